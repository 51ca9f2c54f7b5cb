// Bucket layout, protocol version 1 (DESIGN.md). Every key the worker and proxy read or
// write is made here, so the layout lives in one place.
//
//   run.json                              immutable run description
//   base/<files>                          the base model (HF layout)
//   global/v<N:08>/adapter-<sha16>.safetensors  full global adapter at version N (the name
//                                         carries its hash: two proxies racing for N never
//                                         overwrite each other's payload; the create-only
//                                         manifest decides which one is version N)
//   global/v<N:08>/manifest.json          version, parent, payload sha256/size, folded updates
//   global/v<N:08>/outer-<sha16>.safetensors  the proxy's outer optimizer state at version N
//                                         (protocol/outer_state.h; named by the manifest's
//                                         stats.outer_state, content-addressed like the payload)
//   global/LATEST                         newest version number, written last
//   updates/<worker>/<update-id>.upd      one worker delta (header + payload)
//   heartbeats/<worker>.json              last beat
//   state/<worker>.safetensors            the worker's trainer state, for a machine that
//                                         takes over its id (grpo::GrpoTrainer::portable_state)
//   logs/<worker>/<time>.jsonl            metrics lines
//   evals/v<N:08>.json                    held-out evaluation of version N
//   data/<sha16>-<name>                   task files (JSONL) the run was initialized with
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace brl::protocol {

inline constexpr int kProtocolVersion = 1;

std::string run_key();
std::string base_prefix();
std::string base_key(const std::string& file);
std::string global_prefix();         // "global/": every version's folder, and LATEST
std::string version_dir(int64_t v);  // "global/v00000012/"
std::string adapter_key(int64_t v, const std::string& payload_sha256);
std::string manifest_key(int64_t v);
std::string outer_state_key(int64_t v, const std::string& state_sha256);
std::string latest_key();
std::string updates_prefix();
std::string update_key(const std::string& worker, const std::string& update_id);
std::string heartbeats_prefix();
std::string heartbeat_key(const std::string& worker);
std::string trainer_state_key(const std::string& worker);
std::string all_logs_prefix();  // "logs/": every worker's
std::string logs_prefix(const std::string& worker);
std::string log_key(const std::string& worker, int64_t time_ms);
std::string evals_prefix();
std::string eval_key(int64_t v);
std::string data_key(const std::string& file_name);

// The objects of a version's folder.
enum class VersionObject { manifest, adapter, outer_state };
struct VersionKey {
  int64_t version = 0;
  VersionObject object = VersionObject::manifest;
};
// Parses a key made by manifest_key, adapter_key or outer_state_key; nullopt for other keys.
std::optional<VersionKey> parse_version_key(const std::string& key);
// Parses "global/v00000012/manifest.json" -> 12; nullopt for other keys.
std::optional<int64_t> parse_manifest_key(const std::string& key);
// Parses "evals/v00000012.json" -> 12; nullopt for other keys.
std::optional<int64_t> parse_eval_key(const std::string& key);
// Parses "updates/<worker>/<id>.upd" -> {worker, id}; nullopt unless both are valid ids.
std::optional<std::pair<std::string, std::string>> parse_update_key(const std::string& key);

// Worker ids and update ids: [A-Za-z0-9._-]{1,64}, no leading dot (so never "." or "..",
// which would name a folder). Throws UserError otherwise.
void check_worker_id(const std::string& id);
bool is_valid_id(const std::string& id);

}  // namespace brl::protocol
