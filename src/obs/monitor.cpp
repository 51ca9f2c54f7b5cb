#include "obs/monitor.h"

#include <chrono>

#include "config/run_config.h"
#include "obs/prometheus.h"
#include "util/log.h"

namespace brl::obs {

Monitor::Monitor(std::unique_ptr<store::ObjectStore> store) : store_(std::move(store)) {}

Monitor::~Monitor() { stop(); }

void Monitor::set_run(const protocol::RunDescription& run, const std::string& proxy_id, int64_t version) {
  RunConfig cfg;
  cfg.apply_json(run.config, "run.json");
  std::lock_guard<std::mutex> lock(mu_);
  run_id_ = run.run_id;
  task_ = cfg.task.name;
  mode_ = kAggregationModes(cfg.aggregation.mode);
  codec_ = cfg.sync.codec;
  health_rule_ = {cfg.proxy.collapse_versions, cfg.proxy.regression_margin};
  proxy_id_ = proxy_id;
  started_ms_ = protocol::now_ms();
  start_version_ = version;
  if (live_.version < version) live_.version = version;
  ready_ = true;
}

void Monitor::update(ProxyLive live) {
  std::lock_guard<std::mutex> lock(mu_);
  live_ = std::move(live);
}

bool Monitor::ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ready_;
}

void Monitor::start(double interval_s) {
  stop_ = false;
  thread_ = std::thread([this, interval_s] {
    auto period = std::chrono::duration<double>(interval_s);
    while (!stop_.load()) {
      auto t0 = std::chrono::steady_clock::now();
      try {
        sync_once();
      } catch (const std::exception& e) {  // the proxy goes on without its charts
        LOG_WARN("monitor: {}", e.what());
      }
      while (!stop_.load() && std::chrono::steady_clock::now() - t0 < period)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
}

void Monitor::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void Monitor::sync_once() {
  int64_t target, start_version;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ready_) return;
    target = live_.version;
    start_version = start_version_;
  }
  const int64_t before = work_.newest();
  const size_t evals_before = work_.evals.size();
  if (target > before)
    if (Status st = load_history(*store_, work_, target); !st) LOG_DEBUG("monitor: {}", st.to_string());  // next time
  if (int64_t now = protocol::now_ms(); now - evals_checked_ms_ > 5000) {
    evals_checked_ms_ = now;
    if (Status st = load_evals(*store_, work_); !st) LOG_DEBUG("monitor: {}", st.to_string());
  }
  if (work_.newest() == before && work_.evals.size() == evals_before) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& v : work_.versions)
    if (v.version > std::max(before, start_version)) {
      bytes_in_ += v.bytes_in;
      aggregate_s_sum_ += v.aggregate_s;
      ++aggregate_count_;
    }
  history_ = work_;
}

nlohmann::json Monitor::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t now = protocol::now_ms();
  nlohmann::json st = history_.to_json();
  st["now_ms"] = now;
  st["ready"] = ready_;
  st["run"] = {{"id", run_id_}, {"task", task_}, {"mode", mode_}, {"codec", codec_}};
  st["proxy"] = {{"id", proxy_id_}, {"started_ms", started_ms_}, {"uptime_s", (now - started_ms_) / 1000.0}};
  st["version"] = std::max(live_.version, history_.newest());
  st["counters"] = {{"published", live_.published},
                    {"accepted", live_.accepted},
                    {"rejected", live_.rejected},
                    {"polls", live_.polls},
                    {"rejected_by_reason", live_.rejected_by_reason},
                    {"bytes_in", bytes_in_}};
  // One row per worker: its heartbeat and health (live) with what the manifests say it contributed.
  nlohmann::json workers = nlohmann::json::array();
  auto add = [&](const std::string& name, const WorkerLive* w) {
    nlohmann::json j = w ? w->beat.to_json() : nlohmann::json{{"worker", name}};
    j["health"] = w && w->health ? protocol::kHealthNames(*w->health) : "unknown";
    j["age_s"] = w ? (now - w->beat.time_ms) / 1000.0 : -1.0;
    auto t = history_.workers.find(name);
    WorkerTotals tot = t == history_.workers.end() ? WorkerTotals{} : t->second;
    j["folded"] = tot.folded;
    j["rejected"] = tot.rejected;
    j["staleness_mean"] = tot.staleness_mean();
    j["bytes_folded"] = tot.bytes;
    workers.push_back(j);
  };
  for (auto& [name, w] : live_.workers) add(name, &w);
  for (auto& [name, t] : history_.workers)
    if (!live_.workers.count(name)) add(name, nullptr);
  st["workers"] = workers;
  st["run_health"] = history_.health(health_rule_).to_json();
  return st;
}

std::string Monitor::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = protocol::now_ms();
  PromText p;
  p.family("bucketrl_ready", "gauge", "1 once the proxy has read the run from the bucket").sample(ready_ ? 1 : 0);
  p.family("bucketrl_version", "gauge", "newest global adapter version")
      .sample(static_cast<double>(std::max(live_.version, history_.newest())));
  p.family("bucketrl_versions_published_total", "counter", "global versions this proxy published")
      .sample(static_cast<double>(live_.published));
  p.family("bucketrl_updates_accepted_total", "counter", "worker updates this proxy accepted")
      .sample(static_cast<double>(live_.accepted));
  p.family("bucketrl_updates_rejected_total", "counter", "worker updates this proxy rejected, by reason");
  for (auto& [reason, n] : live_.rejected_by_reason) p.sample(static_cast<double>(n), {{"reason", reason}});
  p.family("bucketrl_proxy_polls_total", "counter", "bucket polls of this proxy")
      .sample(static_cast<double>(live_.polls));
  p.family("bucketrl_proxy_gc_failures_total", "counter",
           "manifest reads and removals that failed in garbage collection (retried)")
      .sample(static_cast<double>(live_.gc_failures));
  p.family("bucketrl_bytes_in_total", "counter",
           "bytes of the worker updates folded into versions published since this proxy started")
      .sample(static_cast<double>(bytes_in_));
  p.family("bucketrl_aggregation_seconds", "summary", "time to aggregate a version (since this proxy started)")
      .sample(aggregate_s_sum_, {}, "_sum")
      .sample(static_cast<double>(aggregate_count_), {}, "_count");
  std::map<std::string, int> by_state;
  for (auto& [name, w] : live_.workers)
    if (w.health) ++by_state[protocol::kHealthNames(*w.health)];
  p.family("bucketrl_workers", "gauge", "workers by health, from their heartbeats");
  for (const auto& s : protocol::kHealthNames.names) p.sample(by_state[s], {{"state", s}});
  if (!history_.versions.empty()) {
    const VersionPoint& v = history_.versions.back();
    p.family("bucketrl_train_reward", "gauge", "mean train reward of the updates folded into the newest version")
        .sample(v.reward_mean);
    p.family("bucketrl_train_reward_spread", "gauge", "standard deviation of that reward across the folded updates")
        .sample(v.reward_std);
  }
  {
    const protocol::RunHealth h = history_.health(health_rule_);
    p.family("bucketrl_run_health", "gauge",
             "1 for the run's health state (protocol/health.h: ok, collapsed, regressed)");
    for (const char* s : {"ok", "collapsed", "regressed"}) p.sample(h.state == s ? 1 : 0, {{"state", s}});
    p.family("bucketrl_run_health_since_version", "gauge", "the version the run's health state started at (-1 when ok)")
        .sample(static_cast<double>(h.since_version));
  }
  if (!history_.evals.empty()) {
    const protocol::EvalRecord& e = history_.evals.rbegin()->second;
    p.family("bucketrl_heldout_accuracy", "gauge", "held-out accuracy of the newest evaluated version")
        .sample(e.accuracy);
    if (e.k > 0) {
      const std::string k = std::to_string(e.k);
      p.family("bucketrl_heldout_pass_at_k", "gauge",
               "held-out pass@k of the newest evaluated version, k sampled answers a prompt")
          .sample(e.pass_at_1, {{"k", "1"}})
          .sample(e.pass_at_k, {{"k", k}});
    }
  }
  p.family("bucketrl_worker_heartbeat_age_seconds", "gauge", "seconds since the worker's last heartbeat");
  for (auto& [name, w] : live_.workers) p.sample((now - w.beat.time_ms) / 1000.0, {{"worker", name}});
  p.family("bucketrl_worker_samples_per_second", "gauge", "worker throughput from its heartbeat");
  for (auto& [name, w] : live_.workers) p.sample(w.beat.samples_per_s, {{"worker", name}});
  p.family("bucketrl_worker_device_memory_bytes", "gauge", "GPU memory the worker's allocator holds (0 on a CPU)");
  for (auto& [name, w] : live_.workers)
    if (!w.beat.device.empty())
      p.sample(static_cast<double>(w.beat.device_memory_bytes), {{"worker", name}, {"device", w.beat.device}});
  p.family("bucketrl_worker_step", "gauge", "the worker's GRPO step");
  for (auto& [name, w] : live_.workers) p.sample(static_cast<double>(w.beat.step), {{"worker", name}});
  p.family("bucketrl_worker_updates_folded", "gauge",
           "the worker's updates folded into the versions in the proxy's history");
  for (auto& [name, t] : history_.workers) p.sample(static_cast<double>(t.folded), {{"worker", name}});
  return p.str();
}

}  // namespace brl::obs
