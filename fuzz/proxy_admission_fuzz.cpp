// Fuzzes the proxy's whole admission path (proxy/proxy.h) and what follows an admission: one
// update object in a fresh directory bucket holding run.json and version 0 (median
// aggregation, so the gauge fix runs; max_update_norm 10), then one Proxy::poll_once. Byte 0
// picks the run: odd = signed (an allow-list of the seeds' key), even = unsigned; the rest is
// the object, stored under its own worker/id when its header parses (so mutations reach the
// checks past the key), else under a fixed key. Invariants:
//  - poll_once does not throw; the update is either folded into version 1 or rejected with
//    one of the documented reasons, and counted once;
//  - in the signed run a folded object has the header values and payload bytes of one the
//    key signed (fuzz/proxy_seeds.h): nothing else can carry a valid signature (the same
//    values in other JSON spelling, e.g. 0E0 for 0.0, are the same signed content);
//  - version 1 is finite and its step within max_update_norm; the bucket verifies.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "config/run_config.h"
#include "proxy/proxy.h"
#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "protocol/records.h"
#include "protocol/update.h"
#include "protocol/verify.h"
#include "proxy_seeds.h"
#include "store/local_store.h"
#include "util/hash.h"
#include "util/log.h"

using namespace brl;
namespace fs = std::filesystem;

namespace {

constexpr double kMaxNorm = 10;

fs::path scratch() {
  static const fs::path dir = [] {
    fs::path base = fs::exists("/dev/shm") ? "/dev/shm" : fs::temp_directory_path();
    fs::path d = base / ("brl_proxy_fuzz_" + std::to_string(getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

// run.json + version 0, as `bucketrl init` leaves them (without a base model: the proxy
// never reads it).
void make_run(store::ObjectStore& s, bool signed_run) {
  RunConfig cfg;
  cfg.aggregation.mode = AggregationMode::median;
  cfg.aggregation.max_update_norm = kMaxNorm;
  if (signed_run) cfg.security.allowed_keys = {ed25519::format_public_key(fuzz::proxy_seed_key().public_key())};
  cfg.validate();
  protocol::Manifest m;
  m.version = 0;
  m.parent = -1;
  m.proxy = "init";
  if (!protocol::publish_version(s, m, protocol::encode_adapter(fuzz::proxy_seed_v0())).is_ok()) __builtin_trap();
  protocol::RunDescription r;
  r.run_id = "fuzz";
  r.base_files = {{"config.json", std::string(64, 'a'), 10}};
  r.base_sha256 = sha256_hex(protocol::base_digest(r.base_files));
  r.config = cfg.to_json();
  if (!s.put(protocol::run_key(), r.to_json().dump()).is_ok()) __builtin_trap();
}

std::string key_for(std::string_view object) {
  if (auto p = protocol::parse_update(object, "fuzz"); p.is_ok()) {
    try {
      std::string key = protocol::update_key(p.value().header.worker, p.value().header.id);
      if (auto back = protocol::parse_update_key(key); back && back->first == p.value().header.worker) return key;
    } catch (const std::exception&) {
    }
  }
  return protocol::update_key("w1", protocol::make_update_id(1700000000000, 1));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  set_log_level("off");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool signed_run = data[0] & 1;
  const std::string object(reinterpret_cast<const char*>(data) + 1, size - 1);
  const fs::path dir = scratch() / "bucket";
  fs::remove_all(dir);
  fs::create_directories(dir);
  store::LocalStore store(dir.string());
  make_run(store, signed_run);
  if (!store.put(key_for(object), object).is_ok()) __builtin_trap();

  proxy::ProxyOptions opt;
  opt.bucket = dir.string();
  opt.id = "fuzz-proxy";
  proxy::Proxy p(opt);
  const bool published = p.poll_once();
  const auto& c = p.counters();
  if (std::getenv("BRL_FUZZ_VERBOSE")) {  // which way an input went (run it on files to see)
    std::string why;
    for (auto& [reason, n] : c.rejected_by_reason) why += " " + reason;
    std::fprintf(stderr, "proxy_admission: %s run, %s%s\n", signed_run ? "signed" : "unsigned",
                 published    ? "folded"
                 : c.rejected ? "rejected:"
                              : "not considered",
                 why.c_str());
  }
  if (c.accepted + c.rejected > 1) __builtin_trap();
  for (auto& [reason, n] : c.rejected_by_reason)
    if (!protocol::kRejectionKinds.parse(reason)) __builtin_trap();
  if (published != (c.accepted == 1)) __builtin_trap();
  if (!published) return 0;

  auto m = protocol::read_manifest(store, 1);
  if (!m.is_ok() || m.value().updates.size() != 1) __builtin_trap();
  if (signed_run) {  // the signature covers the header's values (not their JSON spelling) and the payload
    const auto got = protocol::parse_update(object, "fuzz").value();
    bool is_seed = false;
    for (auto& seed : fuzz::proxy_seed_updates(/*signed_only=*/true)) {
      const auto want = protocol::parse_update(seed, "seed").value();
      is_seed |= want.header.to_json() == got.header.to_json() && want.payload == got.payload;
    }
    if (!is_seed) __builtin_trap();
  }
  auto next = protocol::decode_adapter(protocol::read_payload(store, m.value()).value(), "v1").value();
  const auto v0 = fuzz::proxy_seed_v0();
  double sq = 0;
  for (size_t i = 0; i < v0.size(); ++i)
    for (size_t j = 0; j < v0[i].data.size(); ++j) {
      if (!std::isfinite(next[i].data[j])) __builtin_trap();
      sq += std::pow(static_cast<double>(next[i].data[j]) - v0[i].data[j], 2);
    }
  if (!(std::sqrt(sq) <= kMaxNorm * (1 + 1e-5))) __builtin_trap();
  if (!protocol::verify_run(store).ok()) __builtin_trap();
  return 0;
}
