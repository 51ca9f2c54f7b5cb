// Settings of the asynchronous run over a bucket: what workers do ([sync]), what the proxy
// does ([proxy]), how it folds updates ([aggregation]) and whose updates it folds
// ([security]). They live in run.json with the rest of the run, so every process of a run
// agrees on them.
#pragma once

#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

#include "util/config_table.h"

namespace brl {

// async: workers never wait (the point of bucketrl). sync: the baseline it moves away from,
// a barrier per round: each worker waits after its upload for the next global version, and
// the proxy publishes only once every live worker has sent its delta for the current one.
enum class SyncMode { async, sync };
inline const EnumNames<SyncMode> kSyncModes{{"async", "sync"}};
// SyncConfig::optimizer_state.
enum class OptimizerState { reset_momentum, reset, keep };
inline const EnumNames<OptimizerState> kOptimizerStates{{"reset_momentum", "reset", "keep"}};
// AggregationConfig::mode (src/proxy/aggregate.h says what each computes).
enum class AggregationMode { fedavg, exact, trimmed_mean, median };
inline const EnumNames<AggregationMode> kAggregationModes{{"fedavg", "exact", "trimmed_mean", "median"}};
// AggregationConfig::publish_dtype.
enum class PublishDtype { float32, bfloat16 };
inline const EnumNames<PublishDtype> kPublishDtypes{{"float32", "bfloat16"}};
// In JSON (stats, /status, run.json) as their names, never as numbers.
inline void to_json(nlohmann::json& j, SyncMode e) { j = kSyncModes(e); }
inline void to_json(nlohmann::json& j, OptimizerState e) { j = kOptimizerStates(e); }
inline void to_json(nlohmann::json& j, AggregationMode e) { j = kAggregationModes(e); }
inline void to_json(nlohmann::json& j, PublishDtype e) { j = kPublishDtypes(e); }

struct SyncConfig {
  SyncMode mode = SyncMode::async;
  double sync_interval_s = 15;  // upload a delta every T seconds ...
  int sync_steps = 0;           // ... or every K GRPO steps, whichever first (0 = time only)
  double heartbeat_interval_s = 5;
  std::string codec = "fp32";      // fp32 | bf16 | int8 | int4 | topk_int2 | topk_int4
  int block_size = 64;             // int8/int4: elements per absmax block
  int topk_chunk = 4096;           // topk: elements per run ...
  double topk_density = 1.0 / 64;  // ... and the fraction of each run sent (SparseLoCo: 64 of 4096)
  int zstd_level = 3;              // 0 = no compression
  bool error_feedback = true;      // keep the quantization residual, add it to the next delta
  // What a worker's AdamW state does when it adopts a new global version. reset_momentum:
  // the first moment is zeroed (it points along the worker's own trajectory, which the new
  // version already holds folded) and its bias correction restarts (grpo/trainer.h), the second
  // moment and step count stay (they measure the task's gradient scale). reset: a fresh
  // optimizer, whose first steps are sign(g) x lr in every coordinate, noise included, so the
  // adapter random-walks (one process reset every 25 steps: LoRA norm 25.3 after 3000 steps vs
  // 9.8 never reset, 8.4 momentum reset) and long
  // runs collapsed. keep: kept momentum re-pushes along what was folded. Issue 21,
  // BENCHMARKS.md "Long runs stay learned".
  OptimizerState optimizer_state = OptimizerState::reset_momentum;
  // A worker with a fixed id keeps its trainer state (AdamW's second moment, step and prompt
  // counters) on its disk after every sync and in the bucket (state/<id>.safetensors) at most
  // this often, so a replacement machine under the same id resumes it. Without it, chaos with
  // every restart on an empty disk grew the adapter ~2.5x (LoRA A norm 17-20 vs 7.1-7.6):
  // a fresh AdamW's second moment knows only the newest, small gradients near a saturated
  // reward, so it steps noise at full size (BENCHMARKS.md "Long runs stay learned").
  double state_upload_interval_s = 60;
  ConfigTable table();
  void validate() const;
};

struct ProxyConfig {
  double poll_interval_s = 2;
  int min_updates = 1;              // publish once this many updates are accepted
  int max_updates = 64;             // fold at most this many per version
  double heartbeat_timeout_s = 60;  // a worker silent this long is lost
  double straggler_ratio = 0.25;    // throughput below ratio x median: straggler
  int keep_versions = 20;           // adapter payloads kept (manifests are kept forever)
  // Run health (protocol/health.h): "collapsed" once this many versions in a row had no group
  // with reward variance at a train reward below the best by regression_margin; "regressed"
  // once held-out accuracy is below its best by more than regression_margin.
  int collapse_versions = 20;
  double regression_margin = 0.1;
  ConfigTable table();
  void validate() const;
};

struct AggregationConfig {
  AggregationMode mode = AggregationMode::fedavg;
  int max_staleness = 8;              // reject deltas whose base is more versions behind
  double staleness_exponent = 0.5;    // an update's step is scaled by (1 + staleness)^-exponent
  double server_learning_rate = 1.0;  // global += lr * weighted mean delta
  double server_momentum = 0;         // Nesterov momentum of the outer step (0 = off, e.g. 0.9)
  double trim_ratio = 0.2;            // trimmed_mean: fraction of the updates dropped at each end
  // Norm bounds on one update (the L2 norm of its decoded delta over all tensors):
  double max_update_norm = 0;        // reject |delta| above this (0 = off)
  double max_update_norm_ratio = 0;  // reject |delta| above ratio x the median |delta| of the
                                     // last update_norm_window accepted updates (0 = off)
  int update_norm_window = 20;
  // The dtype of published versions: "bfloat16" halves what every worker downloads per
  // version; the proxy still aggregates into a float32 master copy (kept in the bucket).
  PublishDtype publish_dtype = PublishDtype::float32;
  bool publish_bf16() const { return publish_dtype == PublishDtype::bfloat16; }
  ConfigTable table();
  void validate() const;
};

// Who may contribute. With allowed_keys set, the proxy folds only updates signed (Ed25519)
// by one of these keys; without, it accepts unsigned updates (protocol/update.h).
struct SecurityConfig {
  // "ed25519:<base64>" lines as `bucketrl keygen --out NAME` writes to NAME.pub (also
  // "ed25519:<64 hex digits>" or PEM public keys).
  std::vector<std::string> allowed_keys;
  // A file of more keys, one per line ('#' comments), e.g. `cat keys/*.pub > allowed_keys`;
  // `bucketrl init` reads it and stores its keys in run.json's allowed_keys.
  std::string allowed_keys_file;
  ConfigTable table();
  void validate() const;
  // The raw 32-byte keys of allowed_keys; throws UserError quoting a bad entry.
  std::set<std::string> public_keys() const;
  // Reads allowed_keys_file into allowed_keys (then clears it) and rewrites every key in the
  // one-line base64 form, without duplicates. Throws UserError naming the file and line.
  void resolve_key_file();
};

}  // namespace brl
