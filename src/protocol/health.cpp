#include "protocol/health.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <vector>

namespace brl::protocol {

std::map<std::string, Health> classify_health(const std::map<std::string, Heartbeat>& beats, int64_t now_ms,
                                              const HealthRule& rule) {
  auto age = [&](const Heartbeat& h) { return (now_ms - h.time_ms) / 1000.0; };
  std::vector<double> rates;
  for (auto& [w, h] : beats)
    if (h.state != "stopped" && age(h) <= rule.timeout_s && h.samples_per_s > 0) rates.push_back(h.samples_per_s);
  std::sort(rates.begin(), rates.end());
  double median = rates.empty() ? 0 : rates[rates.size() / 2];
  std::map<std::string, Health> out;
  for (auto& [w, h] : beats)
    out[w] = h.state == "stopped"                                                     ? Health::stopped
             : age(h) > rule.timeout_s                                                ? Health::lost
             : (rates.size() >= 2 && h.samples_per_s < rule.straggler_ratio * median) ? Health::straggling
                                                                                      : Health::alive;
  return out;
}

VersionSignal version_signal(const Manifest& m) {
  VersionSignal s{m.version, m.stats.value("reward_mean", 0.0), m.stats.value("frac_reward_zero_std", -1.0)};
  if (auto b = m.stats.find("best_reward"); b != m.stats.end() && b->is_object()) {
    s.best_version = b->value("version", int64_t{-1});
    s.best_reward = b->value("reward_mean", 0.0);
  }
  return s;
}

nlohmann::json RunHealth::to_json() const {
  return {{"state", state}, {"since_version", since_version}, {"detail", detail}};
}

RunHealth assess_run(const std::vector<VersionSignal>& versions, const std::vector<EvalRecord>& evals,
                     const RunHealthRule& rule) {
  RunHealth h;
  // Collapsed: a trailing streak of versions without reward variance, below the best reward.
  if (!versions.empty()) {
    auto top = std::max_element(versions.begin(), versions.end(), [](const VersionSignal& a, const VersionSignal& b) {
      return a.reward_mean < b.reward_mean;
    });
    // The best of the versions given, or an older one the newest manifest remembers.
    int64_t best_version = top->version;
    double best_reward = top->reward_mean;
    if (versions.back().best_version >= 0 && versions.back().best_reward > best_reward)
      best_version = versions.back().best_version, best_reward = versions.back().best_reward;
    size_t streak = 0;
    double reward = 0;
    for (auto it = versions.rbegin(); it != versions.rend() && it->frac_reward_zero_std >= 1.0 - 1e-9; ++it)
      ++streak, reward += it->reward_mean;
    reward /= std::max<size_t>(1, streak);
    if (streak >= static_cast<size_t>(rule.collapse_versions) && reward < best_reward - rule.margin) {
      h.state = "collapsed";
      h.since_version = versions[versions.size() - streak].version;
      h.detail = fmt::format(
          "no prompt group has had any reward variance for {} versions (since v{}): train reward "
          "{:.3f}, best {:.3f} at v{}",
          streak, h.since_version, reward, best_reward, best_version);
      return h;
    }
  }
  // Regressed: the newest held-out accuracy below the best by more than the margin.
  if (!evals.empty()) {
    auto best = std::max_element(evals.begin(), evals.end(),
                                 [](const EvalRecord& a, const EvalRecord& b) { return a.accuracy < b.accuracy; });
    const double floor = best->accuracy - rule.margin;
    if (evals.back().accuracy < floor) {
      auto first_low = evals.end();
      while (first_low != evals.begin() && std::prev(first_low)->accuracy < floor) --first_low;
      h.state = "regressed";
      h.since_version = first_low->version;
      h.detail = fmt::format(
          "held-out accuracy {:.3f} at v{}, best {:.3f} at v{} (below it by more than {:.2f} since v{})",
          evals.back().accuracy, evals.back().version, best->accuracy, best->version, rule.margin, h.since_version);
    }
  }
  return h;
}

}  // namespace brl::protocol
