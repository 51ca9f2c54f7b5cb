// `bucketrl proxy`: folds worker updates into new global versions. Holds no state the
// bucket does not: on start it reads the newest manifest, whose cursors say which update
// of each worker was the last one considered, and continues after them. Each poll it lists
// only the updates past those cursors, validates them (header, signature, replays, staleness,
// codec, shapes, finite values, norm bound), folds the accepted ones (weights ∝ samples × (1 + staleness)^-exponent; how:
// proxy/aggregate.h) and publishes [outer optimizer state →] payload → manifest (create-only)
// → LATEST. Also watches heartbeats (lost, straggling workers) and garbage-collects old
// payloads and folded updates.
//
// Rejections carry a reason "<kind>: <details>" (counted by kind, listed in the manifest):
// malformed, missing, corrupt, unsigned, unknown_key, forged (protocol/update.h), replay (an
// update id or a delta already considered within the staleness window; older ones are
// stale anyway), mismatch (header vs key), future, stale, shape, nonfinite, norm
// ([aggregation] max_update_norm, or max_update_norm_ratio x the median norm of the last
// update_norm_window accepted updates, once at least kMinNormHistory are known; the norm is
// proxy::update_norm: gauge-fixed per LoRA module except in fedavg mode, which folds the
// factors as sent; the norms
// are in the manifests, so a restarted proxy keeps the window).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "proxy/aggregate.h"
#include "codec/codec.h"
#include "config/run_config.h"
#include "protocol/health.h"
#include "protocol/records.h"
#include "store/object_store.h"

namespace brl::proxy {

class Proxy;

struct ProxyOptions {
  std::string bucket;
  std::string id;           // "" = proxy-<hostname>-<pid>
  double time_limit_s = 0;  // 0 = until stopped
  int64_t max_version = 0;  // stop after publishing this version (0 = no limit)
  // Called on the proxy's thread after every poll of run(), e.g. to hand a snapshot to the
  // HTTP endpoints (obs/monitor.h); must not block.
  std::function<void(const Proxy&)> on_poll;
  // Aggregation mode "exact" factorizes with this (launch::aten_factorizer() in the binary);
  // null: a run in that mode is refused at load.
  const ProductFactorizer* factorizer = nullptr;
};

struct WorkerHealth {
  protocol::Heartbeat beat;
  std::optional<protocol::Health> health;  // none before the first classification
  double age_s = 0;
};

struct ProxyCounters {
  int64_t published = 0, accepted = 0, rejected = 0, polls = 0, collected = 0;
  int64_t gc_failures = 0;  // manifest reads and removals that failed during garbage collection
  std::map<std::string, int64_t> rejected_by_reason;
};

class Proxy {
 public:
  // The relative norm bound needs this many accepted norms before it applies (the absolute
  // bound covers the start of a run).
  static constexpr size_t kMinNormHistory = 3;

  explicit Proxy(ProxyOptions opt);
  ~Proxy();
  // Reads the run and the newest version from the bucket (again: after losing a publish race).
  void load();
  // One poll: health, new updates, maybe a new version. Returns true if it published.
  bool poll_once();
  // Polls until stop, a limit, or max_version; a final poll folds what arrived last.
  void run(const std::atomic<bool>& stop);

  int64_t version() const { return version_; }
  const std::string& id() const { return opt_.id; }
  const protocol::RunDescription& run_description() const { return run_; }
  const ProxyCounters& counters() const { return counters_; }
  const std::map<std::string, WorkerHealth>& workers() const { return health_; }

 private:
  struct Pending;
  void check_health();
  std::vector<std::string> known_workers();
  // False when the update could not be read now (retry next poll); else accepted or rejected.
  bool consider(const std::string& worker, const store::ObjectInfo& obj);
  bool publish();
  // sync mode (the baseline): true once every live worker has an update on the current version.
  bool barrier_ready() const;
  void collect_garbage();

  ProxyOptions opt_;
  std::unique_ptr<store::ObjectStore> store_;
  RunConfig cfg_;
  protocol::RunDescription run_;
  int64_t version_ = -1;
  std::vector<codec::Tensor> global_;
  OuterState outer_;  // server momentum at version_ (from the manifest's stats.outer_state)
  // The best train reward of any version so far (manifests carry it as stats.best_reward, so
  // run health can be judged from the newest versions alone): {"version", "reward_mean"}.
  nlohmann::json best_reward_;
  std::map<std::string, std::string> cursors_;
  std::map<std::string, std::string> seen_payloads_;  // payload sha256 -> worker/id
  std::map<std::string, int64_t> seen_ids_;           // worker/id -> version it was considered for
  std::set<std::string> allowed_keys_;                // raw Ed25519 keys; empty = unsigned run
  std::deque<double> recent_norms_;                   // |delta| of the last accepted, oldest first
  std::vector<Pending> accepted_;
  std::vector<protocol::RejectedUpdate> rejected_;
  std::map<std::string, WorkerHealth> health_;
  ProxyCounters counters_;
  int64_t gc_through_ = -1;  // versions <= this have been collected
};

}  // namespace brl::proxy
