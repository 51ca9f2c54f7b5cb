#include "config/async_config.h"

#include <cmath>
#include <fstream>

#include "util/ed25519.h"
#include "util/error.h"

namespace brl {

namespace {
[[noreturn]] void bad(const std::string& section, const std::string& key, const std::string& value,
                      const std::string& rule) {
  throw UserError("[" + section + "] " + key + " = " + value + ": " + rule);
}
}  // namespace

ConfigTable SyncConfig::table() {
  ConfigTable t("sync");
  t.add("mode", &mode, kSyncModes, "async | sync (a barrier per round: the baseline)")
      .add("sync_interval_s", &sync_interval_s, "upload a delta every T seconds")
      .add("sync_steps", &sync_steps, "or every K steps, whichever first (0 = time only)")
      .add("heartbeat_interval_s", &heartbeat_interval_s, "seconds between heartbeats")
      .add("codec", &codec, "fp32 | bf16 | int8 | int4 | topk_int2 | topk_int4")
      .add("block_size", &block_size, "int8/int4 absmax block size")
      .add("topk_chunk", &topk_chunk, "topk codecs: elements per run, 16 .. 32768")
      .add("topk_density", &topk_density, "topk codecs: fraction of each run sent, (0, 1]")
      .add("zstd_level", &zstd_level, "0 = no compression")
      .add("error_feedback", &error_feedback, "carry the quantization residual into the next delta")
      .add("optimizer_state", &optimizer_state, kOptimizerStates,
           "reset_momentum | reset | keep: a worker's AdamW state when it adopts a new global version")
      .add("state_upload_interval_s", &state_upload_interval_s,
           "a worker with a fixed id copies its trainer state to the bucket at most this often (0 = never)");
  return t;
}

void SyncConfig::validate() const {
  if (mode == SyncMode::sync && sync_steps < 1)
    bad("sync", "sync_steps", std::to_string(sync_steps), "must be >= 1 with mode = \"sync\" (a round is K steps)");
  if (!(sync_interval_s > 0)) bad("sync", "sync_interval_s", std::to_string(sync_interval_s), "must be > 0");
  if (sync_steps < 0) bad("sync", "sync_steps", std::to_string(sync_steps), "must be >= 0");
  if (!(heartbeat_interval_s > 0))
    bad("sync", "heartbeat_interval_s", std::to_string(heartbeat_interval_s), "must be > 0");
  if (codec != "fp32" && codec != "bf16" && codec != "int8" && codec != "int4" && codec != "topk_int2" &&
      codec != "topk_int4")
    bad("sync", "codec", "\"" + codec + "\"", "must be one of fp32, bf16, int8, int4, topk_int2, topk_int4");
  if (topk_chunk < 16 || topk_chunk > 32768)
    bad("sync", "topk_chunk", std::to_string(topk_chunk), "must be in [16, 32768]");
  if (!(topk_density > 0 && topk_density <= 1))
    bad("sync", "topk_density", std::to_string(topk_density), "must be in (0, 1]");
  if (block_size < 8 || block_size > 4096)
    bad("sync", "block_size", std::to_string(block_size), "must be in [8, 4096]");
  if (zstd_level < 0 || zstd_level > 19) bad("sync", "zstd_level", std::to_string(zstd_level), "must be in [0, 19]");
  if (!(state_upload_interval_s >= 0))
    bad("sync", "state_upload_interval_s", std::to_string(state_upload_interval_s), "must be >= 0 (0 = never)");
}

ConfigTable ProxyConfig::table() {
  ConfigTable t("proxy");
  t.add("poll_interval_s", &poll_interval_s, "seconds between bucket polls")
      .add("min_updates", &min_updates, "accepted updates needed to publish a version")
      .add("max_updates", &max_updates, "updates folded into one version at most")
      .add("heartbeat_timeout_s", &heartbeat_timeout_s, "a worker silent this long is lost")
      .add("straggler_ratio", &straggler_ratio, "throughput below ratio x median marks a straggler")
      .add("keep_versions", &keep_versions, "adapter payloads kept; older ones are deleted")
      .add("collapse_versions", &collapse_versions,
           "run health \"collapsed\": this many versions in a row without reward variance in any group, below the best "
           "reward")
      .add("regression_margin", &regression_margin,
           "run health \"regressed\": held-out accuracy this far below its best (also the reward margin of "
           "\"collapsed\")");
  return t;
}

void ProxyConfig::validate() const {
  if (!(poll_interval_s > 0)) bad("proxy", "poll_interval_s", std::to_string(poll_interval_s), "must be > 0");
  if (min_updates < 1) bad("proxy", "min_updates", std::to_string(min_updates), "must be >= 1");
  if (max_updates < min_updates) bad("proxy", "max_updates", std::to_string(max_updates), "must be >= min_updates");
  if (!(heartbeat_timeout_s > 0))
    bad("proxy", "heartbeat_timeout_s", std::to_string(heartbeat_timeout_s), "must be > 0");
  if (!(straggler_ratio >= 0 && straggler_ratio < 1))
    bad("proxy", "straggler_ratio", std::to_string(straggler_ratio), "must be in [0, 1)");
  if (keep_versions < 2) bad("proxy", "keep_versions", std::to_string(keep_versions), "must be >= 2");
  if (collapse_versions < 1) bad("proxy", "collapse_versions", std::to_string(collapse_versions), "must be >= 1");
  if (!(regression_margin > 0 && regression_margin <= 1))
    bad("proxy", "regression_margin", std::to_string(regression_margin), "must be in (0, 1]");
}

ConfigTable AggregationConfig::table() {
  ConfigTable t("aggregation");
  t.add("mode", &mode, kAggregationModes, "fedavg | exact | trimmed_mean | median")
      .add("max_staleness", &max_staleness, "reject deltas whose base version is more than this behind")
      .add("staleness_exponent", &staleness_exponent, "an update's step is scaled by (1 + staleness)^-exponent")
      .add("server_learning_rate", &server_learning_rate, "global += lr * weighted mean delta")
      .add("server_momentum", &server_momentum, "Nesterov momentum of the outer step (0 = off)")
      .add("trim_ratio", &trim_ratio, "trimmed_mean: fraction of the updates dropped at each end")
      .add("max_update_norm", &max_update_norm, "reject an update whose delta norm exceeds this (0 = off)")
      .add("max_update_norm_ratio", &max_update_norm_ratio,
           "reject an update whose delta norm exceeds ratio x the median of recently accepted ones (0 = off)")
      .add("update_norm_window", &update_norm_window, "accepted updates the median norm is taken over")
      .add("publish_dtype", &publish_dtype, kPublishDtypes,
           "float32 | bfloat16: the published versions' dtype (bf16 halves downloads)");
  return t;
}

void AggregationConfig::validate() const {
  if (max_staleness < 0) bad("aggregation", "max_staleness", std::to_string(max_staleness), "must be >= 0");
  if (!(staleness_exponent >= 0))
    bad("aggregation", "staleness_exponent", std::to_string(staleness_exponent), "must be >= 0");
  if (!(server_learning_rate > 0))
    bad("aggregation", "server_learning_rate", std::to_string(server_learning_rate), "must be > 0");
  if (!(server_momentum >= 0 && server_momentum < 1))
    bad("aggregation", "server_momentum", std::to_string(server_momentum), "must be in [0, 1)");
  if (!(trim_ratio >= 0 && trim_ratio < 0.5))
    bad("aggregation", "trim_ratio", std::to_string(trim_ratio), "must be in [0, 0.5)");
  if (!(max_update_norm >= 0 && std::isfinite(max_update_norm)))
    bad("aggregation", "max_update_norm", std::to_string(max_update_norm), "must be >= 0 (0 = off)");
  if (!(max_update_norm_ratio == 0 || (max_update_norm_ratio >= 1 && std::isfinite(max_update_norm_ratio))))
    bad("aggregation", "max_update_norm_ratio", std::to_string(max_update_norm_ratio),
        "must be 0 (off) or >= 1 (a ratio below 1 would reject most honest updates)");
  if (update_norm_window < 3 || update_norm_window > 10000)
    bad("aggregation", "update_norm_window", std::to_string(update_norm_window), "must be in [3, 10000]");
}

ConfigTable SecurityConfig::table() {
  ConfigTable t("security");
  t.add("allowed_keys", &allowed_keys,
        "Ed25519 public keys allowed to contribute (ed25519:<base64>); empty = unsigned run")
      .add("allowed_keys_file", &allowed_keys_file, "a file of more allowed keys, one per line (read by init)");
  return t;
}

namespace {
// One allowed key -> its 32 raw bytes; the error quotes the start of the entry (enough to
// find it, too little to leak a private key pasted there by mistake).
std::string parse_allowed_key(const std::string& text, const std::string& where) {
  std::string quoted = text.size() > 24 ? text.substr(0, 24) + "..." : text;
  if (text.find("PRIVATE") != std::string::npos) quoted = "<a private key>";
  auto k = ed25519::parse_public_key(text, where + " \"" + quoted + "\"");
  if (!k) throw UserError(k.status().message(), "paste the line of the worker's NAME.pub file");
  return *k;
}
std::vector<std::string> parse_allowed_keys(const std::vector<std::string>& keys) {
  std::vector<std::string> raw;
  for (size_t i = 0; i < keys.size(); ++i)
    raw.push_back(parse_allowed_key(keys[i], "[security] allowed_keys[" + std::to_string(i) + "]"));
  return raw;
}
}  // namespace

std::set<std::string> SecurityConfig::public_keys() const {
  auto raw = parse_allowed_keys(allowed_keys);
  return {raw.begin(), raw.end()};
}

void SecurityConfig::validate() const { (void)public_keys(); }

void SecurityConfig::resolve_key_file() {
  std::vector<std::string> raw = parse_allowed_keys(allowed_keys);
  if (!allowed_keys_file.empty()) {
    std::ifstream f(allowed_keys_file);
    if (!f)
      throw UserError("[security] allowed_keys_file = \"" + allowed_keys_file + "\": cannot read it",
                      "give the path of a file with one public key (a NAME.pub line) per line");
    std::string pem, line;
    for (int n = 1; std::getline(f, line); ++n) {
      if (!pem.empty() || line.rfind("-----BEGIN", 0) == 0) {  // a PEM public key spans lines
        pem += line + "\n";
        if (line.rfind("-----END", 0) == 0) {
          raw.push_back(parse_allowed_key(pem, allowed_keys_file + ":" + std::to_string(n)));
          pem.clear();
        }
        continue;
      }
      line = line.substr(0, line.find('#'));
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      raw.push_back(parse_allowed_key(line, allowed_keys_file + ":" + std::to_string(n)));
    }
    if (!pem.empty()) throw UserError(allowed_keys_file + ": a PEM block is not closed by an -----END line");
  }
  std::set<std::string> seen;
  allowed_keys.clear();
  for (auto& k : raw)
    if (seen.insert(k).second) allowed_keys.push_back(ed25519::format_public_key(k));
  allowed_keys_file.clear();
}

}  // namespace brl
