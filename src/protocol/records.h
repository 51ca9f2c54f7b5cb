// The JSON records of the bucket protocol: run.json, global/v<N>/manifest.json, heartbeats
// and evaluations. Parsers validate every field they use and name the object and the field
// in errors, because these come from the bucket, i.e. from other machines.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace brl::protocol {

struct BaseFile {
  std::string name, sha256;
  uint64_t size = 0;
};

// run.json: immutable once written.
struct RunDescription {
  int protocol_version = 1;
  std::string run_id;
  int64_t created_ms = 0;
  std::string base_sha256;  // sha256 over "<name>\t<sha256>\n" of the sorted base files
  std::vector<BaseFile> base_files;
  // Task files (JSONL datasets) under data/; config's task paths name them as "data/<name>".
  std::vector<BaseFile> data_files;
  nlohmann::json config;  // RunConfig::to_json(): [model] [lora] [grpo] [task] [sync] ...

  nlohmann::json to_json() const;
  static Result<RunDescription> parse(std::string_view text, const std::string& label);
};
std::string base_digest(const std::vector<BaseFile>& files);

struct FoldedUpdate {
  std::string worker, id, sha256;  // sha256 of the whole object
  std::string payload_sha256;      // of the delta alone: the same delta under another id is a replay
  uint64_t size = 0;
  int64_t base_version = 0, staleness = 0, steps = 0, samples = 0;
  double weight = 0;    // relative weight in the fold: samples
  double discount = 1;  // staleness discount on its step (1 + staleness)^-exponent
  double reward_mean = 0, accuracy = 0;
  double norm = 0;                   // L2 norm of the decoded delta (0: unknown, older manifests)
  std::string signer{};              // "ed25519:<base64>" of a signed update, else ""
  double frac_reward_zero_std = -1;  // its header's (-1: not reported)
};

struct RejectedUpdate {
  std::string worker, id, reason;
};

// Where a version's outer optimizer state is (protocol/outer_state.h).
struct OuterStateRef {
  std::string key, sha256;  // key: layout's outer_state_key of the manifest's version
  uint64_t size = 0;
};

// global/v<N>/manifest.json: what version N is and what built it.
struct Manifest {
  int64_t version = 0, parent = -1;  // v0 has no parent
  int64_t created_ms = 0;
  std::string proxy;  // who published it
  std::string payload_key, payload_sha256;
  uint64_t payload_size = 0;
  std::vector<FoldedUpdate> updates;
  std::vector<RejectedUpdate> rejected;
  // Per worker, the newest update id considered (folded or rejected) up to this version:
  // a restarted proxy continues after these without re-reading older manifests.
  std::map<std::string, std::string> cursors;
  // The payload's tensor dtype, stats.payload_dtype: "float32" | "bfloat16" ("" in manifests
  // written before the field: float32).
  std::string payload_dtype;
  // stats.outer_state: the proxy's server momentum and, in bf16 runs, its F32 master copy;
  // none when the run keeps neither.
  std::optional<OuterStateRef> outer_state;
  // Aggregation stats (weights, norms, seconds). The two fields above live inside "stats" in
  // the JSON; parse takes them out of it and to_json puts them back.
  nlohmann::json stats = nlohmann::json::object();

  nlohmann::json to_json() const;
  nlohmann::json stats_json() const;  // "stats" as written: stats with the two fields above
  static Result<Manifest> parse(std::string_view text, const std::string& label);
};

struct Heartbeat {
  std::string worker, host, state;  // state: starting | training | uploading | stopped | error
  int64_t pid = 0, time_ms = 0, step = 0, version = 0, updates = 0;
  int64_t updates_rejected = 0;  // of its updates, those the proxy rejected (as the worker read them)
  double samples_per_s = 0, reward_mean = 0, accuracy = 0;
  uint64_t bytes_uploaded = 0;
  std::string device;                // where it computes: "cuda:0 NVIDIA H200", "cpu (8 threads)"
  uint64_t device_memory_bytes = 0;  // GPU memory its allocator holds (0 on a CPU)
  std::string last_error;

  nlohmann::json to_json() const;
  static Result<Heartbeat> parse(std::string_view text, const std::string& label);
};

// evals/v<N>.json: held-out evaluation of one global version.
struct EvalRecord {
  int64_t version = 0, n = 0, time_ms = 0;
  double accuracy = 0, reward_mean = 0;
  // pass@1 and pass@k over k sampled answers per prompt; k = 0 (and absent in the JSON) when
  // the evaluator did not measure them.
  int64_t k = 0;
  double pass_at_1 = 0, pass_at_k = 0;

  nlohmann::json to_json() const;
  static Result<EvalRecord> parse(std::string_view text, const std::string& label);
};

int64_t now_ms();

}  // namespace brl::protocol
