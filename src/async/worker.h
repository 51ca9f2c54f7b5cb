// `bucketrl worker`: pulls the run and the newest global adapter from the bucket, runs GRPO
// steps on its shard, and on the sync trigger (every sync_interval_s seconds or sync_steps
// steps) uploads its delta against the state it started from; then adopts a newer global
// version if there is one. It never waits for the proxy or another worker. Heartbeats go
// out from a background thread every heartbeat_interval_s, metrics lines in batches.
// With a signing key every update is signed (Ed25519, protocol/update.h); a run with
// [security] allowed_keys refuses to start a worker whose key is missing or not allowed.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace brl::async {

struct WorkerOptions {
  std::string bucket;             // URL
  std::string id;                 // "" = <hostname>-<pid>
  std::string cache_dir;          // base model cache ("" = default, see fetch_base)
  int shard = 0, num_shards = 1;  // prompt shard of this worker
  int threads = 0;                // 0 = train.threads from the run
  double time_limit_s = 0;        // stop after this long (0 = until stopped)
  int64_t max_steps = 0;          // stop after this many steps (0 = no limit)
  double slowdown = 1.0;          // tests/benchmarks: idle (slowdown-1) x busy time (step + upload)
  std::string signing_key;        // Ed25519 private key (PEM) file; "" = $BRL_SIGNING_KEY_FILE, else unsigned
  std::string device;             // "" = the run's [model] device (auto: this machine's GPU, if any)
};

struct WorkerSummary {
  int64_t steps = 0, updates = 0, adopted = 0, failed_uploads = 0;
  int64_t rejected = 0;  // own updates the proxy rejected (read from the manifests of adopted versions)
  std::string last_rejection;  // "update <id>: <reason>" of the newest one
  int64_t lost_steps = 0;  // steps whose delta the stop could not upload (the bucket refused it)
  uint64_t bytes_uploaded = 0;
  double waited_s = 0;  // sync mode: time spent at the barrier
  std::string last_error;  // of the last failed upload
};

// Runs until `stop` becomes true (SIGINT/SIGTERM), a limit is reached, or a fatal error;
// on a clean stop the progress since the last sync is uploaded first (retried a few times
// when the bucket refuses it; what still fails is counted in lost_steps).
WorkerSummary run_worker(const WorkerOptions& opt, const std::atomic<bool>& stop);

}  // namespace brl::async
