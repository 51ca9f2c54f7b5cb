#include "protocol/layout.h"

#include <cctype>
#include <cstdio>
#include <utility>

#include "util/error.h"

namespace brl::protocol {

std::string run_key() { return "run.json"; }
std::string base_prefix() { return "base/"; }
std::string base_key(const std::string& file) { return base_prefix() + file; }
std::string global_prefix() { return "global/"; }
std::string version_dir(int64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "global/v%08lld/", static_cast<long long>(v));
  return b;
}
std::string adapter_key(int64_t v, const std::string& sha) {
  return version_dir(v) + "adapter-" + sha.substr(0, 16) + ".safetensors";
}
std::string manifest_key(int64_t v) { return version_dir(v) + "manifest.json"; }
std::string outer_state_key(int64_t v, const std::string& sha) {
  return version_dir(v) + "outer-" + sha.substr(0, 16) + ".safetensors";
}
std::string latest_key() { return global_prefix() + "LATEST"; }
std::string updates_prefix() { return "updates/"; }
std::string update_key(const std::string& w, const std::string& id) { return updates_prefix() + w + "/" + id + ".upd"; }
std::string heartbeats_prefix() { return "heartbeats/"; }
std::string heartbeat_key(const std::string& w) { return heartbeats_prefix() + w + ".json"; }
std::string trainer_state_key(const std::string& w) { return "state/" + w + ".safetensors"; }
std::string all_logs_prefix() { return "logs/"; }
std::string logs_prefix(const std::string& w) { return all_logs_prefix() + w + "/"; }
std::string log_key(const std::string& w, int64_t t) {
  char b[32];
  std::snprintf(b, sizeof b, "%013lld.jsonl", static_cast<long long>(t));  // sorts by time
  return logs_prefix(w) + b;
}

std::string evals_prefix() { return "evals/"; }
std::string data_key(const std::string& file_name) { return "data/" + file_name; }
std::string eval_key(int64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "evals/v%08lld.json", static_cast<long long>(v));
  return b;
}

namespace {
// The number of "<prefix>v<8 digits>" at the start of key (the rest after it in *rest).
std::optional<int64_t> parse_numbered(const std::string& key, const std::string& prefix, std::string* rest) {
  const size_t digits = prefix.size() + 1;
  if (key.size() < digits + 8 || key.compare(0, prefix.size(), prefix) != 0 || key[prefix.size()] != 'v')
    return std::nullopt;
  int64_t v = 0;
  for (size_t i = digits; i < digits + 8; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(key[i]))) return std::nullopt;
    v = v * 10 + (key[i] - '0');
  }
  *rest = key.substr(digits + 8);
  return v;
}
}  // namespace

std::optional<VersionKey> parse_version_key(const std::string& key) {
  std::string rest;
  auto v = parse_numbered(key, "global/", &rest);
  if (!v) return std::nullopt;
  const std::string ext = ".safetensors";
  if (rest == "/manifest.json") return VersionKey{*v, VersionObject::manifest};
  for (auto [name, object] :
       {std::pair{"/adapter-", VersionObject::adapter}, std::pair{"/outer-", VersionObject::outer_state}}) {
    const std::string n = name;
    // The hash part as any name in the folder: what the proxy's garbage collection removes.
    if (rest.size() > n.size() + ext.size() && rest.compare(0, n.size(), n) == 0 &&
        rest.compare(rest.size() - ext.size(), ext.size(), ext) == 0 && rest.find('/', n.size()) == std::string::npos)
      return VersionKey{*v, object};
  }
  return std::nullopt;
}

std::optional<int64_t> parse_manifest_key(const std::string& key) {
  auto k = parse_version_key(key);
  if (!k || k->object != VersionObject::manifest) return std::nullopt;
  return k->version;
}

std::optional<int64_t> parse_eval_key(const std::string& key) {
  std::string rest;
  auto v = parse_numbered(key, evals_prefix(), &rest);
  if (!v || rest != ".json") return std::nullopt;
  return v;
}

std::optional<std::pair<std::string, std::string>> parse_update_key(const std::string& key) {
  const std::string p = updates_prefix(), ext = ".upd";
  if (key.rfind(p, 0) != 0 || key.size() < p.size() + ext.size() + 3) return std::nullopt;
  if (key.compare(key.size() - ext.size(), ext.size(), ext) != 0) return std::nullopt;
  std::string rest = key.substr(p.size(), key.size() - p.size() - ext.size());
  auto slash = rest.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 >= rest.size()) return std::nullopt;
  if (rest.find('/', slash + 1) != std::string::npos) return std::nullopt;
  auto ids = std::make_pair(rest.substr(0, slash), rest.substr(slash + 1));
  if (!is_valid_id(ids.first) || !is_valid_id(ids.second)) return std::nullopt;
  return ids;
}

bool is_valid_id(const std::string& id) {
  bool ok = !id.empty() && id.size() <= 64 && id[0] != '.';
  for (char c : id) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  return ok;
}

void check_worker_id(const std::string& id) {
  if (!is_valid_id(id))
    throw UserError("worker id '" + id + "' is not valid",
                    "use 1-64 characters from A-Z a-z 0-9 . _ - (not starting with '.')");
}

}  // namespace brl::protocol
