// `bucketrl worker`: pulls the run and the newest global adapter from the bucket, runs GRPO
// steps on its shard, and on the sync trigger (every sync_interval_s seconds or sync_steps
// steps) uploads its delta against the state it started from; then adopts a newer global
// version if there is one. It never waits for the proxy or another worker (except in sync
// mode, the baseline, at its barrier). Heartbeats go out from a background thread every
// heartbeat_interval_s (worker/heartbeat.h), metrics lines in batches.
// With a signing key every update is signed (Ed25519, protocol/update.h); a run with
// [security] allowed_keys refuses to start a worker whose key is missing or not allowed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "config/run_config.h"
#include "protocol/records.h"
#include "store/object_store.h"
#include "util/clock.h"
#include "util/ed25519.h"
#include "worker/reward_window.h"

namespace brl::grpo {
struct Session;
class GrpoTrainer;
}  // namespace brl::grpo

namespace brl::worker {

class HeartbeatSender;

struct WorkerOptions {
  std::string bucket;             // URL
  std::string id;                 // "" = <hostname>-<pid>; a fixed id resumes its trainer state after a restart
  std::string cache_dir;          // base model and trainer state cache ("" = default, see cache_root_dir)
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
  int64_t rejected = 0;        // own updates the proxy rejected (read from the manifests of adopted versions)
  std::string last_rejection;  // "update <id>: <reason>" of the newest one
  int64_t lost_steps = 0;      // steps whose delta the stop could not upload (the bucket refused it)
  uint64_t bytes_uploaded = 0;
  double waited_s = 0;     // sync mode: time spent at the barrier
  std::string last_error;  // of the last failed upload
};

class Worker {
 public:
  // Joins the run (base model and task files into the local cache), checks the signing key
  // against the run's allow-list, opens the model and adopts the newest version. Throws
  // UserError for bad options or a key the run would refuse.
  explicit Worker(WorkerOptions opt);
  ~Worker();

  // One GRPO step on the current adapter; its metrics line waits for the next sync's upload.
  void step();
  // The trigger: sync_interval_s since the last sync (not in sync mode) or sync_steps steps.
  bool sync_due() const;
  // Uploads the delta since the last sync (create-only; when the bucket refuses it the
  // progress stays in the model for the next sync), waits at the barrier in sync mode, then
  // adopts a newer version if there is one. False when there was nothing to upload or the
  // upload failed.
  bool sync(const std::atomic<bool>& stop);
  // Global version v, plus this worker's own uploaded updates it has not considered yet,
  // becomes the model's adapter and the anchor of the next delta; the proxy's rejections of
  // this worker's updates since the last adopted version are counted.
  void adopt(int64_t v);
  // Steps and syncs until `stop`, a limit or a fatal error; on a clean stop the progress
  // since the last sync is uploaded first (retried a few times when the bucket refuses it;
  // what still fails is counted in lost_steps).
  WorkerSummary run(const std::atomic<bool>& stop);

  const std::string& id() const { return id_; }
  int64_t version() const { return version_; }
  const WorkerSummary& summary() const { return sum_; }
  const RewardWindow& window() const { return win_; }
  // The adapter the next delta is taken against (the model's adapter right after a sync).
  const std::vector<codec::Tensor>& anchor() const { return anchor_; }
  // Own updates uploaded but not yet considered by the newest adopted version.
  size_t unfolded() const { return unfolded_.size(); }
  // Optimizer steps and prompts this worker's trainer has taken, a resumed state's included.
  int64_t trainer_steps() const;
  uint64_t example_cursor() const;
  // Where the trainer state goes after each sync ("" = nowhere: no fixed id, or
  // sync.optimizer_state = reset, which has nothing to keep); also to the bucket
  // (protocol::trainer_state_key) every sync.state_upload_interval_s.
  const std::string& state_path() const { return state_path_; }

 private:
  // Sync mode (the baseline): idle until the proxy publishes past v.
  void wait_for_version(int64_t v, const std::atomic<bool>& stop);
  bool upload_and_adopt(const std::atomic<bool>& stop);
  void flush_logs();
  void resume_state();
  void save_state();
  void upload_state(const std::string& bytes);

  WorkerOptions opt_;
  std::string id_;
  Clock::time_point start_ = Clock::now(), last_sync_ = Clock::now(), train_start_ = Clock::now();
  std::unique_ptr<store::ObjectStore> store_;
  protocol::RunDescription run_;
  RunConfig cfg_;
  std::optional<ed25519::SigningKey> key_;
  std::unique_ptr<HeartbeatSender> beater_;
  std::unique_ptr<grpo::Session> ses_;
  std::unique_ptr<grpo::GrpoTrainer> trainer_;
  WorkerSummary sum_;
  int64_t version_ = -1;
  std::vector<codec::Tensor> anchor_;  // the adapter the next delta is taken against
  // Own uploads a newer version may not contain yet: the id and the delta as the proxy will
  // decode it. Adopting a version without them would step this worker back over its own
  // progress, which it would then learn, and upload, a second time.
  struct Unfolded {
    std::string id;
    std::vector<codec::Tensor> delta;
  };
  std::vector<Unfolded> unfolded_;
  int64_t last_ms_ = 0;  // the time part of this worker's newest update id
  std::mt19937_64 rng_;
  codec::Options codec_;
  codec::ErrorFeedback feedback_;
  RewardWindow win_;
  std::string log_lines_;
  int64_t samples_total_ = 0;
  std::string state_path_;                           // see state_path()
  std::optional<Clock::time_point> state_uploaded_;  // the last copy to the bucket
};

// Worker(opt).run(stop).
WorkerSummary run_worker(const WorkerOptions& opt, const std::atomic<bool>& stop);

}  // namespace brl::worker
