// Worker health from heartbeats, one rule for the proxy and for `bucketrl status`:
// stopped (said so), lost (silent longer than the timeout), straggling (throughput below
// ratio x the median of the live workers, when there are at least two), else alive.
//
// Run health, one rule for the proxy (/status, /metrics, the dashboard) and `bucketrl status`:
// a run that learned and then unlearned must not look fine.
//  * collapsed: the newest `collapse_versions` versions folded updates in which no prompt group
//    had any reward variance (GRPO has no signal left to climb back with) while their train
//    reward sits more than `margin` below the best version's: a solved task (every answer
//    right) is not a collapse.
//  * regressed: the newest held-out accuracy is more than `margin` below the best one so far.
// Otherwise ok. Collapsed wins when both hold.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "protocol/records.h"
#include "util/config_table.h"

namespace brl::protocol {

enum class Health { alive, straggling, lost, stopped };
inline const EnumNames<Health> kHealthNames{{"alive", "straggling", "lost", "stopped"}};
inline void to_json(nlohmann::json& j, Health h) { j = kHealthNames(h); }

struct HealthRule {
  double timeout_s = 60, straggler_ratio = 0.25;
};

// Health per worker id; now_ms = the observer's clock.
std::map<std::string, Health> classify_health(const std::map<std::string, Heartbeat>& beats, int64_t now_ms,
                                              const HealthRule& rule);

struct RunHealthRule {
  int collapse_versions = 20;
  double margin = 0.1;
};

// What the rule needs of a version: its train reward, its updates' frac_reward_zero_std
// (sample-weighted; < 0 when its updates did not report it), and the best train reward of the
// run up to it as its proxy recorded it (stats.best_reward; best_version -1: not recorded), so
// that the newest versions alone can be judged.
struct VersionSignal {
  int64_t version = 0;
  double reward_mean = 0, frac_reward_zero_std = -1;
  int64_t best_version = -1;
  double best_reward = 0;
};
VersionSignal version_signal(const Manifest& m);

struct RunHealth {
  std::string state = "ok";    // ok | collapsed | regressed
  int64_t since_version = -1;  // the version the state started at
  std::string detail;          // a sentence for people
  nlohmann::json to_json() const;
};

// versions: oldest first, versions that folded updates only; evals: oldest first.
RunHealth assess_run(const std::vector<VersionSignal>& versions, const std::vector<EvalRecord>& evals,
                     const RunHealthRule& rule);

}  // namespace brl::protocol
