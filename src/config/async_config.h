// Settings of the asynchronous run over a bucket: what workers do ([sync]), what the proxy
// does ([proxy]) and how it folds updates ([aggregation]). They live in run.json with the
// rest of the run, so every process of a run agrees on them.
#pragma once

#include <string>

#include "util/config_table.h"

namespace brl {

struct SyncConfig {
  // async: workers never wait (the point of bucketrl). sync: the baseline it moves away from,
  // a barrier per round: each worker waits after its upload for the next global version, and
  // the proxy publishes only once every live worker has sent its delta for the current one.
  std::string mode = "async";
  double sync_interval_s = 15;     // upload a delta every T seconds ...
  int sync_steps = 0;              // ... or every K GRPO steps, whichever first (0 = time only)
  double heartbeat_interval_s = 5;
  std::string codec = "fp32";      // fp32 | bf16 | int8 | int4
  int block_size = 64;             // int8/int4: elements per absmax block
  int zstd_level = 3;              // 0 = no compression
  bool error_feedback = true;      // keep the quantization residual, add it to the next delta
  ConfigTable table();
  void validate() const;
};

struct ProxyConfig {
  double poll_interval_s = 2;
  int min_updates = 1;             // publish once this many updates are accepted
  int max_updates = 64;            // fold at most this many per version
  double heartbeat_timeout_s = 60; // a worker silent this long is lost
  double straggler_ratio = 0.25;   // throughput below ratio x median: straggler
  int keep_versions = 20;          // adapter payloads kept (manifests are kept forever)
  ConfigTable table();
  void validate() const;
};

struct AggregationConfig {
  // fedavg | exact | trimmed_mean | median (src/async/aggregate.h says what each computes)
  std::string mode = "fedavg";
  int max_staleness = 8;           // reject deltas whose base is more versions behind
  double staleness_exponent = 0.5; // weight = samples * (1 + staleness)^-exponent
  double server_learning_rate = 1.0;  // global += lr * weighted mean delta
  double server_momentum = 0;      // Nesterov momentum of the outer step (0 = off, e.g. 0.9)
  double trim_ratio = 0.2;         // trimmed_mean: fraction of the updates dropped at each end
  ConfigTable table();
  void validate() const;
};

}  // namespace brl
