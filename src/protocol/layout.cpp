#include "protocol/layout.h"

#include <cctype>
#include <cstdio>

#include "util/error.h"

namespace brl::protocol {

std::string run_key() { return "run.json"; }
std::string base_prefix() { return "base/"; }
std::string base_key(const std::string& file) { return base_prefix() + file; }
std::string version_dir(int64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "global/v%08lld/", static_cast<long long>(v));
  return b;
}
std::string adapter_key(int64_t v, const std::string& sha) { return version_dir(v) + "adapter-" + sha.substr(0, 16) + ".safetensors"; }
std::string manifest_key(int64_t v) { return version_dir(v) + "manifest.json"; }
std::string latest_key() { return "global/LATEST"; }
std::string updates_prefix() { return "updates/"; }
std::string update_key(const std::string& w, const std::string& id) { return updates_prefix() + w + "/" + id + ".upd"; }
std::string heartbeat_key(const std::string& w) { return "heartbeats/" + w + ".json"; }
std::string logs_prefix(const std::string& w) { return "logs/" + w + "/"; }
std::string log_key(const std::string& w, int64_t t) {
  char b[32];
  std::snprintf(b, sizeof b, "%013lld.jsonl", static_cast<long long>(t));  // sorts by time
  return logs_prefix(w) + b;
}

std::string evals_prefix() { return "evals/"; }
std::string eval_key(int64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "evals/v%08lld.json", static_cast<long long>(v));
  return b;
}

std::optional<int64_t> parse_manifest_key(const std::string& key) {
  long long v = 0;
  char tail[32] = {0};
  if (key.size() != std::string("global/v00000000/manifest.json").size()) return std::nullopt;
  if (std::sscanf(key.c_str(), "global/v%8lld/%31s", &v, tail) != 2) return std::nullopt;
  if (std::string(tail) != "manifest.json" || key != manifest_key(v)) return std::nullopt;
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
  return std::make_pair(rest.substr(0, slash), rest.substr(slash + 1));
}

void check_worker_id(const std::string& id) {
  bool ok = !id.empty() && id.size() <= 64 && id[0] != '.';
  for (char c : id) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  if (!ok)
    throw UserError("worker id '" + id + "' is not valid", "use 1-64 characters from A-Z a-z 0-9 . _ - (not starting with '.')");
}

}  // namespace brl::protocol
