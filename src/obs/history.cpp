#include "obs/history.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "protocol/bucket.h"
#include "protocol/health.h"
#include "protocol/layout.h"

namespace brl::obs {

VersionPoint summarize_version(const protocol::Manifest& m) {
  VersionPoint p;
  p.version = m.version;
  p.created_ms = m.created_ms;
  p.proxy = m.proxy;
  p.updates = static_cast<int64_t>(m.updates.size());
  p.rejected = static_cast<int64_t>(m.rejected.size());
  const protocol::VersionSignal sig = protocol::version_signal(m);
  p.frac_reward_zero_std = sig.frac_reward_zero_std;
  p.best_version = sig.best_version;
  p.best_reward = sig.best_reward;
  double w = 0, rw = 0, acc = 0, stale = 0;
  for (auto& u : m.updates) {
    double s = static_cast<double>(std::max<int64_t>(u.samples, 0));
    w += s;
    rw += s * u.reward_mean;
    acc += s * u.accuracy;
    stale += static_cast<double>(u.staleness);
    p.bytes_in += u.size;
  }
  p.samples = static_cast<int64_t>(w);
  if (w > 0) {
    p.reward_mean = rw / w;
    p.accuracy = acc / w;
    double var = 0;
    for (auto& u : m.updates)
      var += static_cast<double>(std::max<int64_t>(u.samples, 0)) * (u.reward_mean - p.reward_mean) *
             (u.reward_mean - p.reward_mean);
    p.reward_std = std::sqrt(var / w);
  }
  if (p.updates) p.staleness_mean = stale / static_cast<double>(p.updates);
  p.aggregate_s = m.stats.value("aggregate_seconds", 0.0);
  p.delta_norm = m.stats.value("delta_norm", 0.0);
  return p;
}

nlohmann::json VersionPoint::to_json() const {
  return {{"version", version},
          {"created_ms", created_ms},
          {"proxy", proxy},
          {"updates", updates},
          {"rejected", rejected},
          {"samples", samples},
          {"reward_mean", reward_mean},
          {"reward_std", reward_std},
          {"accuracy", accuracy},
          {"bytes_in", bytes_in},
          {"aggregate_s", aggregate_s},
          {"staleness_mean", staleness_mean},
          {"delta_norm", delta_norm},
          {"frac_reward_zero_std", frac_reward_zero_std}};
}

protocol::RunHealth RunHistory::health(const protocol::RunHealthRule& rule) const {
  std::vector<protocol::VersionSignal> signals;
  for (auto& v : versions)
    if (v.updates > 0)
      signals.push_back({v.version, v.reward_mean, v.frac_reward_zero_std, v.best_version, v.best_reward});
  std::vector<protocol::EvalRecord> evs;
  for (auto& [v, e] : evals) evs.push_back(e);
  return protocol::assess_run(signals, evs, rule);
}

void RunHistory::add(const protocol::Manifest& m) {
  if (m.version <= newest()) return;
  versions.push_back(summarize_version(m));
  while (versions.size() > max_versions) versions.pop_front();
  for (auto& u : m.updates) {
    WorkerTotals& t = workers[u.worker];
    ++t.folded;
    t.samples += u.samples;
    t.bytes += u.size;
    t.staleness_sum += static_cast<double>(u.staleness);
    t.last_version = m.version;
  }
  for (auto& r : m.rejected) {
    ++workers[r.worker].rejected;
    rejected.push_back({m.version, r.worker, r.id, r.reason});
  }
  while (rejected.size() > max_rejected) rejected.pop_front();
}

nlohmann::json RunHistory::to_json() const {
  nlohmann::json vs = nlohmann::json::array(), ws = nlohmann::json::object(), rs = nlohmann::json::array(),
                 es = nlohmann::json::array();
  for (auto& v : versions) vs.push_back(v.to_json());
  for (auto& [name, t] : workers)
    ws[name] = {{"folded", t.folded},
                {"rejected", t.rejected},
                {"samples", t.samples},
                {"bytes", t.bytes},
                {"staleness_mean", t.staleness_mean()},
                {"last_version", t.last_version}};
  for (auto& r : rejected)
    rs.push_back({{"version", r.version}, {"worker", r.worker}, {"id", r.id}, {"reason", r.reason}});
  for (auto& [v, e] : evals) es.push_back(e.to_json());
  return {{"versions", vs}, {"workers", ws}, {"rejected", rs}, {"evals", es}};
}

Status load_history(store::ObjectStore& s, RunHistory& h, int64_t upto) {
  const auto cap = static_cast<int64_t>(std::min<size_t>(h.max_versions, INT64_MAX / 2));
  for (int64_t v = std::max({h.newest() + 1, upto - cap + 1, int64_t{0}}); v <= upto; ++v) {
    auto m = protocol::read_manifest(s, v);
    if (!m) return m.status();
    h.add(*m);
  }
  return Status::ok();
}

Status load_evals(store::ObjectStore& s, RunHistory& h) {
  std::string after = h.evals.empty() ? "" : protocol::eval_key(h.evals.rbegin()->first);
  auto objs = s.list_all(protocol::evals_prefix(), after);
  if (!objs) return objs.status();
  for (auto& o : *objs) {
    auto body = s.get(o.key);
    if (!body) return body.status();
    auto e = protocol::EvalRecord::parse(*body, o.key);
    if (!e) return e.status();
    h.evals[e->version] = *e;
  }
  return Status::ok();
}

}  // namespace brl::obs
