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
  st["run"] = {{"id", run.run_id}, {"created_ms", run.created_ms}, {"base_sha256", run.base_sha256},
               {"task", cfg.task.name}, {"codec", cfg.sync.codec}, {"mode", cfg.aggregation.mode}};
  int64_t newest = newest_version(s).value();
  st["version"] = newest;
  nlohmann::json versions = nlohmann::json::array(), rejected = nlohmann::json::array();
  for (int64_t v = newest; v >= 0 && v > newest - recent; --v) {
    auto m = read_manifest(s, v);
    if (!m) continue;
    versions.push_back({{"version", v}, {"created_ms", m->created_ms}, {"proxy", m->proxy}, {"updates", m->updates.size()},
                        {"rejected", m->rejected.size()}, {"reward_mean", m->stats.value("reward_mean", 0.0)},
                        {"samples", m->stats.value("samples", 0)}});
    for (auto& r : m->rejected) rejected.push_back({{"version", v}, {"worker", r.worker}, {"id", r.id}, {"reason", r.reason}});
  }
  st["versions"] = versions;
  st["rejected"] = rejected;
  nlohmann::json evals = nlohmann::json::array();
  if (auto evs = s.list_all(evals_prefix()); evs) {
    size_t from = evs->size() > static_cast<size_t>(recent) ? evs->size() - recent : 0;
    for (size_t i = from; i < evs->size(); ++i)
      if (auto body = s.get((*evs)[i].key); body)
        if (auto e = EvalRecord::parse(*body, (*evs)[i].key); e) evals.push_back(e->to_json());
  }
  st["evals"] = evals;
  std::map<std::string, Heartbeat> beats;
  if (auto hb = s.list_all("heartbeats/"); hb)
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
  int64_t now = now_ms();
  for (auto& v : st["versions"])
    out += fmt::format("  v{:<6} {:>6.0f} s ago  {} updates  {} rejected  train reward {:.3f}  by {}\n",
                       v["version"].get<int64_t>(), (now - v["created_ms"].get<int64_t>()) / 1000.0,
                       v["updates"].get<int64_t>(), v["rejected"].get<int64_t>(), v["reward_mean"].get<double>(),
                       v["proxy"].get<std::string>());
  if (!st["evals"].empty()) {
    out += "held-out accuracy:";
    for (auto& e : st["evals"]) out += fmt::format("  v{} {:.3f}", e["version"].get<int64_t>(), e["accuracy"].get<double>());
    out += "\n";
    // pass@k of the newest evaluation that measured it.
    for (auto it = st["evals"].rbegin(); it != st["evals"].rend(); ++it)
      if (it->value("k", 0) > 0) {
        out += fmt::format("held-out pass@1 {:.3f}, pass@{} {:.3f} (v{}, sampled)\n", (*it)["pass_at_1"].get<double>(),
                           (*it)["k"].get<int64_t>(), (*it)["pass_at_k"].get<double>(), (*it)["version"].get<int64_t>());
        break;
      }
  }
  out += fmt::format("workers ({}):\n", st["workers"].size());
  for (auto& w : st["workers"])
    out += fmt::format("  {:<16} {:<10} step {:<7} v{:<6} {:>7.1f} samples/s  reward {:.3f}  {} updates  beat {:.0f} s ago{}{}\n",
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
