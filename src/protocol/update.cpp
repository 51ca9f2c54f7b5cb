#include "protocol/update.h"

#include <cstdio>
#include <cstring>

#include "protocol/layout.h"
#include "util/ed25519.h"
#include "util/hash.h"
#include "util/json_int.h"

namespace brl::protocol {

namespace {
constexpr std::string_view kMagic = "BRLUPD1\n";
constexpr uint32_t kMaxHeader = 1 << 20;
// Separates update signatures from anything else a key might sign.
constexpr std::string_view kSigningDomain = "bucketrl update signature v1\n";

Status corrupt(const std::string& label, const std::string& what) {
  return {StatusCode::kCorrupt, "update " + label + ": " + what};
}
}  // namespace

nlohmann::json UpdateHeader::to_json() const {
  nlohmann::json j = {{"format", format},
                      {"worker", worker},
                      {"id", id},
                      {"base_version", base_version},
                      {"steps", steps},
                      {"samples", samples},
                      {"reward_mean", reward_mean},
                      {"reward_std", reward_std},
                      {"accuracy", accuracy},
                      {"codec", codec},
                      {"payload_sha256", payload_sha256},
                      {"payload_size", payload_size},
                      {"created_ms", created_ms},
                      {"seconds", seconds}};
  if (frac_reward_zero_std >= 0) j["frac_reward_zero_std"] = frac_reward_zero_std;
  if (!signer.empty()) j["signer"] = signer;
  if (!signature.empty()) j["signature"] = signature;
  for (auto& [k, v] : extra.items())
    if (!j.contains(k)) j[k] = v;
  return j;
}

std::string update_signing_bytes(const UpdateHeader& h) {
  nlohmann::json j = h.to_json();
  j.erase("signature");
  return std::string(kSigningDomain) + j.dump();
}

UpdateHeader make_update_header(const std::string& worker, const std::string& id, int64_t base_version,
                                const UpdateStats& stats, const std::string& codec, int64_t created_ms) {
  UpdateHeader h;
  h.worker = worker;
  h.id = id;
  h.base_version = base_version;
  h.steps = stats.steps;
  h.samples = stats.samples;
  h.reward_mean = stats.reward_mean;
  h.reward_std = stats.reward_std;
  h.accuracy = stats.accuracy;
  h.frac_reward_zero_std = stats.frac_reward_zero_std;
  h.codec = codec;
  h.created_ms = created_ms;
  h.seconds = stats.seconds;
  return h;
}

std::string encode_update(UpdateHeader h, std::string_view payload, const ed25519::SigningKey* key) {
  h.payload_sha256 = sha256_hex(payload);
  h.payload_size = payload.size();
  if (key) {
    h.signer = ed25519::format_public_key(key->public_key());
    h.signature = base64_encode(key->sign(update_signing_bytes(h)));
  }
  std::string js = h.to_json().dump();
  std::string out(kMagic);
  uint32_t n = static_cast<uint32_t>(js.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += js;
  out.append(payload.data(), payload.size());
  return out;
}

Result<ParsedUpdate> parse_update(std::string_view bytes, const std::string& label) {
  if (bytes.size() < kMagic.size() + 4 || bytes.substr(0, kMagic.size()) != kMagic)
    return corrupt(label, "not an update object (bad magic)");
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[kMagic.size() + i])) << (8 * i);
  size_t off = kMagic.size() + 4;
  if (n > kMaxHeader || n > bytes.size() - off)
    return corrupt(label, "header length " + std::to_string(n) + " exceeds the object (" +
                              std::to_string(bytes.size()) + " bytes)");
  nlohmann::json j = nlohmann::json::parse(bytes.substr(off, n), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return corrupt(label, "header is not a JSON object");
  ParsedUpdate p;
  UpdateHeader& h = p.header;
  try {
    h.format = json_int<int>(j.at("format"));
    if (h.format != 1)
      return corrupt(label, "header format " + std::to_string(h.format) + " is not supported (expected 1)");
    h.worker = j.at("worker").get<std::string>();
    h.id = j.at("id").get<std::string>();
    h.base_version = json_int<int64_t>(j.at("base_version"));
    h.steps = json_int<int64_t>(j.at("steps"));
    h.samples = json_int<int64_t>(j.at("samples"));
    h.reward_mean = j.at("reward_mean").get<double>();
    h.reward_std = j.at("reward_std").get<double>();
    h.accuracy = j.at("accuracy").get<double>();
    h.codec = j.at("codec").get<std::string>();
    h.payload_sha256 = j.at("payload_sha256").get<std::string>();
    h.payload_size = json_int<uint64_t>(j.at("payload_size"));
    h.created_ms = json_int<int64_t>(j.at("created_ms"));
    h.seconds = j.value("seconds", 0.0);
    h.frac_reward_zero_std = j.value("frac_reward_zero_std", -1.0);
    h.signer = j.value("signer", "");
    h.signature = j.value("signature", "");
    nlohmann::json known = h.to_json();
    for (auto& [k, v] : j.items())
      if (!known.contains(k) && k != "signer" && k != "signature") h.extra[k] = v;
  } catch (const nlohmann::json::exception& e) {
    return corrupt(label, std::string("header field missing or of the wrong type: ") + e.what());
  }
  // The ids name objects (updates/<worker>/<id>.upd): ".." or a '/' would name others.
  if (!is_valid_id(h.worker)) return corrupt(label, "worker '" + h.worker + "' is not a valid worker id");
  if (!is_valid_id(h.id)) return corrupt(label, "id '" + h.id + "' is not a valid update id");
  if (h.base_version < 0) return corrupt(label, "base_version " + std::to_string(h.base_version) + " < 0");
  if (h.steps < 0 || h.samples <= 0) return corrupt(label, "steps/samples must be >= 0 / > 0");
  off += n;
  if (h.payload_size != bytes.size() - off)
    return corrupt(label, "payload is " + std::to_string(bytes.size() - off) + " bytes, header says " +
                              std::to_string(h.payload_size) + " (truncated?)");
  p.payload = bytes.substr(off);
  if (sha256_hex(p.payload) != h.payload_sha256) return corrupt(label, "payload sha256 does not match the header");
  return p;
}

std::optional<Rejection> check_update_signature(const UpdateHeader& h, const std::set<std::string>& allowed) {
  using K = RejectionKind;
  if (h.signer.empty() && h.signature.empty()) {
    if (allowed.empty()) return std::nullopt;
    return Rejection{K::unsigned_update, "the run accepts only updates signed by one of its " +
                                             std::to_string(allowed.size()) +
                                             " allowed keys ([security] allowed_keys)"};
  }
  auto key = ed25519::parse_public_key(h.signer, "signer");
  if (!key) return Rejection{K::forged, key.status().message()};
  auto sig = base64_decode(h.signature);
  if (!sig || sig->size() != ed25519::kSignatureSize)
    return Rejection{K::forged, "the signature field is not a base64 Ed25519 signature"};
  // Before verifying: an unknown key is reported as such even when its signature is good.
  if (!allowed.empty() && !allowed.count(*key))
    return Rejection{K::unknown_key, ed25519::format_public_key(*key) + " is not in [security] allowed_keys"};
  if (!ed25519::verify(*key, update_signing_bytes(h), *sig))
    return Rejection{K::forged,
                     "the signature of " + ed25519::format_public_key(*key) + " does not match the header and payload"};
  return std::nullopt;
}

std::string make_update_id(int64_t ms, uint64_t random) {
  char b[40];
  std::snprintf(b, sizeof b, "%013lld-%08llx", static_cast<long long>(ms),
                static_cast<unsigned long long>(random & 0xffffffffULL));
  return b;
}

std::optional<int64_t> update_id_time(const std::string& id) {
  if (id.size() != 22 || id[13] != '-') return std::nullopt;
  int64_t v = 0;
  for (int i = 0; i < 13; ++i) {
    if (id[i] < '0' || id[i] > '9') return std::nullopt;
    v = v * 10 + (id[i] - '0');
  }
  return v;
}

}  // namespace brl::protocol
