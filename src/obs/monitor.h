// What the proxy's HTTP endpoints show, shared between the proxy's thread and the HTTP
// thread under one mutex. The proxy thread only hands over its live state after each poll
// (a copy, no I/O: the proxy loop never waits for HTTP clients or for this); a reader thread
// of the monitor's own reads the manifests of new versions and the evaluations from the
// bucket into the run's history (obs/history.h), so the charts survive a proxy restart.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "obs/history.h"
#include "protocol/health.h"
#include "protocol/records.h"
#include "store/object_store.h"

namespace brl::obs {

struct WorkerLive {
  protocol::Heartbeat beat;
  std::optional<protocol::Health> health;  // at the last poll; none before the first
};

// The proxy's in-memory state after a poll.
struct ProxyLive {
  int64_t version = -1;
  int64_t published = 0, accepted = 0, rejected = 0, polls = 0;  // by this proxy process
  int64_t gc_failures = 0;
  std::map<std::string, int64_t> rejected_by_reason;
  std::map<std::string, WorkerLive> workers;
};

class Monitor {
 public:
  explicit Monitor(std::unique_ptr<store::ObjectStore> store);
  ~Monitor();  // stops the reader
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  // The proxy has read the run (at `version`): from now on /health says ready.
  void set_run(const protocol::RunDescription& run, const std::string& proxy_id, int64_t version);
  // From the proxy thread after each poll: a copy under the mutex.
  void update(ProxyLive live);
  // The reader thread: sync_once() about every `interval_s`.
  void start(double interval_s = 0.5);
  void stop();
  // Reads manifests up to the live version, and new evaluations now and then.
  void sync_once();

  bool ready() const;
  nlohmann::json status() const;  // /status
  std::string metrics() const;    // /metrics (Prometheus text)

 private:
  std::unique_ptr<store::ObjectStore> store_;  // used by the reader thread only
  RunHistory work_;                            // the reader's copy, filled off the lock
  int64_t evals_checked_ms_ = 0;

  mutable std::mutex mu_;  // guards everything below
  bool ready_ = false;
  std::string run_id_, task_, mode_, codec_, proxy_id_;
  int64_t started_ms_ = 0, start_version_ = -1;
  protocol::RunHealthRule health_rule_;
  ProxyLive live_;
  RunHistory history_;
  // Over the versions newer than start_version_ (what this process has seen appear).
  uint64_t bytes_in_ = 0;
  double aggregate_s_sum_ = 0;
  int64_t aggregate_count_ = 0;

  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace brl::obs
