#include "protocol/status.h"

#include <fmt/format.h>

#include "config/run_config.h"
#include "protocol/bucket.h"
#include "protocol/health.h"
#include "protocol/layout.h"

namespace brl::protocol {

nlohmann::json run_status(store::ObjectStore& s, int recent) {
  nlohmann::json st;
  auto run = read_run(s).value();
  RunConfig cfg;
  cfg.apply_json(run.config, "run.json");
  int64_t now = now_ms();
  st["bucket"] = s.describe();
  st["run"] = {{"id", run.run_id},      {"created_ms", run.created_ms}, {"base_sha256", run.base_sha256},
               {"task", cfg.task.name}, {"codec", cfg.sync.codec},      {"mode", cfg.aggregation.mode}};
  int64_t newest = newest_version(s).value();
  st["version"] = newest;
  nlohmann::json versions = nlohmann::json::array(), rejected = nlohmann::json::array();
  // Run health looks further back than the versions shown when collapse_versions asks for it.
  const RunHealthRule rule{cfg.proxy.collapse_versions, cfg.proxy.regression_margin};
  std::vector<VersionSignal> signals;
  for (int64_t v = newest; v >= 0 && v > newest - std::max<int64_t>(recent, rule.collapse_versions); --v) {
    auto m = read_manifest(s, v);
    if (!m) continue;
    if (!m->updates.empty()) signals.insert(signals.begin(), version_signal(*m));
    if (v <= newest - recent) continue;
    versions.push_back({{"version", v},
                        {"created_ms", m->created_ms},
                        {"proxy", m->proxy},
                        {"updates", m->updates.size()},
                        {"rejected", m->rejected.size()},
                        {"reward_mean", m->stats.value("reward_mean", 0.0)},
                        {"samples", m->stats.value("samples", 0)}});
    for (auto& r : m->rejected)
      rejected.push_back({{"version", v}, {"worker", r.worker}, {"id", r.id}, {"reason", r.reason}});
  }
  st["versions"] = versions;
  st["rejected"] = rejected;
  // Every evaluation for the run's health (its best so far), the recent ones for display.
  std::vector<EvalRecord> all_evals;
  if (auto evs = s.list_all(evals_prefix()); evs)
    for (auto& o : *evs)
      if (auto body = s.get(o.key); body)
        if (auto e = EvalRecord::parse(*body, o.key); e) all_evals.push_back(*e);
  nlohmann::json evals = nlohmann::json::array();
  for (size_t i = all_evals.size() > static_cast<size_t>(recent) ? all_evals.size() - recent : 0; i < all_evals.size();
       ++i)
    evals.push_back(all_evals[i].to_json());
  st["evals"] = evals;
  st["run_health"] = assess_run(signals, all_evals, rule).to_json();
  std::map<std::string, Heartbeat> beats;
  if (auto hb = s.list_all(heartbeats_prefix()); hb)
    for (auto& o : *hb)
      if (auto body = s.get(o.key); body)
        if (auto h = Heartbeat::parse(*body, o.key); h) beats[h->worker] = *h;
  auto health = classify_health(beats, now, {cfg.proxy.heartbeat_timeout_s, cfg.proxy.straggler_ratio});
  nlohmann::json workers = nlohmann::json::array();
  for (auto& [w, h] : beats) {
    auto j = h.to_json();
    j["health"] = health[w];
    j["age_s"] = (now - h.time_ms) / 1000.0;
    workers.push_back(j);
  }
  st["workers"] = workers;
  return st;
}

std::string format_status(const nlohmann::json& st) {
  std::string out;
  auto& r = st["run"];
  out += fmt::format("run {} in {}: task {}, codec {}, aggregation {}\n", r["id"].get<std::string>(),
                     st["bucket"].get<std::string>(), r["task"].get<std::string>(), r["codec"].get<std::string>(),
                     r["mode"].get<std::string>());
  out += fmt::format("newest global version: {}\n", st["version"].get<int64_t>());
  if (auto& h = st["run_health"]; h.is_object() && h["state"] != "ok")
    out += fmt::format("run health: {} since v{}: {}\n", h["state"].get<std::string>(),
                       h["since_version"].get<int64_t>(), h["detail"].get<std::string>());
  int64_t now = now_ms();
  for (auto& v : st["versions"])
    out += fmt::format("  v{:<6} {:>6.0f} s ago  {} updates  {} rejected  train reward {:.3f}  by {}\n",
                       v["version"].get<int64_t>(), (now - v["created_ms"].get<int64_t>()) / 1000.0,
                       v["updates"].get<int64_t>(), v["rejected"].get<int64_t>(), v["reward_mean"].get<double>(),
                       v["proxy"].get<std::string>());
  if (!st["evals"].empty()) {
    out += "held-out accuracy:";
    for (auto& e : st["evals"])
      out += fmt::format("  v{} {:.3f}", e["version"].get<int64_t>(), e["accuracy"].get<double>());
    out += "\n";
    // pass@k of the newest evaluation that measured it.
    for (auto it = st["evals"].rbegin(); it != st["evals"].rend(); ++it)
      if (it->value("k", 0) > 0) {
        out +=
            fmt::format("held-out pass@1 {:.3f}, pass@{} {:.3f} (v{}, sampled)\n", (*it)["pass_at_1"].get<double>(),
                        (*it)["k"].get<int64_t>(), (*it)["pass_at_k"].get<double>(), (*it)["version"].get<int64_t>());
        break;
      }
  }
  out += fmt::format("workers ({}):\n", st["workers"].size());
  for (auto& w : st["workers"])
    out += fmt::format(
        "  {:<16} {:<10} step {:<7} v{:<6} {:>7.1f} samples/s  reward {:.3f}  {} updates  beat {:.0f} s ago{}{}\n",
        w["worker"].get<std::string>(), w["health"].get<std::string>(), w["step"].get<int64_t>(),
        w["version"].get<int64_t>(), w["samples_per_s"].get<double>(), w["reward_mean"].get<double>(),
        w["updates"].get<int64_t>(), w["age_s"].get<double>(),
        w.value("device", "").empty() ? "" : "  on " + w["device"].get<std::string>(),
        w["last_error"].get<std::string>().empty() ? "" : "  last error: " + w["last_error"].get<std::string>());
  if (!st["rejected"].empty()) {
    out += fmt::format("rejected updates ({} in the versions above):\n", st["rejected"].size());
    for (auto& x : st["rejected"])
      out += fmt::format("  v{} {}/{}: {}\n", x["version"].get<int64_t>(), x["worker"].get<std::string>(),
                         x["id"].get<std::string>(), x["reason"].get<std::string>());
  }
  return out;
}

}  // namespace brl::protocol
