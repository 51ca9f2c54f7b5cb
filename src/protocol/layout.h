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
//   global/LATEST                         newest version number, written last
//   updates/<worker>/<update-id>.upd      one worker delta (header + payload)
//   heartbeats/<worker>.json              last beat
//   logs/<worker>/<time>.jsonl            metrics lines
//   evals/v<N:08>.json                    held-out evaluation of version N
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace brl::protocol {

inline constexpr int kProtocolVersion = 1;

std::string run_key();
std::string base_prefix();
std::string base_key(const std::string& file);
std::string version_dir(int64_t v);  // "global/v00000012/"
std::string adapter_key(int64_t v, const std::string& payload_sha256);
std::string manifest_key(int64_t v);
std::string latest_key();
std::string updates_prefix();
std::string update_key(const std::string& worker, const std::string& update_id);
std::string heartbeat_key(const std::string& worker);
std::string logs_prefix(const std::string& worker);
std::string log_key(const std::string& worker, int64_t time_ms);
std::string evals_prefix();
std::string eval_key(int64_t v);

// Parses "global/v00000012/manifest.json" -> 12; nullopt for other keys.
std::optional<int64_t> parse_manifest_key(const std::string& key);
// Parses "updates/<worker>/<id>.upd" -> {worker, id}.
std::optional<std::pair<std::string, std::string>> parse_update_key(const std::string& key);

// Worker ids and update ids: [A-Za-z0-9._-]{1,64}, no leading dot. Throws UserError otherwise.
void check_worker_id(const std::string& id);

}  // namespace brl::protocol
