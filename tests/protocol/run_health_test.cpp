// Run health (protocol/health.h) on hand-made histories: each case's expected state and start
// version follow from the rule's definition by hand.
#include <gtest/gtest.h>

#include "protocol/health.h"
#include "protocol/status.h"

using namespace brl::protocol;

namespace {

// Versions first..last with the same reward and share of uniform groups.
void add(std::vector<VersionSignal>& v, int64_t first, int64_t last, double reward, double zero_std) {
  for (int64_t i = first; i <= last; ++i) v.push_back({i, reward, zero_std});
}

EvalRecord eval(int64_t version, double accuracy) { return {version, 200, 0, accuracy, accuracy}; }

const RunHealthRule kRule{20, 0.1};

}  // namespace

TEST(RunHealth, CollapsedAfterATrailingStreakWithoutVarianceBelowTheBest) {
  std::vector<VersionSignal> v;
  add(v, 1, 5, 0.6, 0.3);
  v.push_back({6, 0.93, 0.1});  // the best
  add(v, 7, 26, 0.0, 1.0);      // 20 versions in which every group was uniform
  auto h = assess_run(v, {}, kRule);
  EXPECT_EQ(h.state, "collapsed");
  EXPECT_EQ(h.since_version, 7);
  EXPECT_NE(h.detail.find("for 20 versions"), std::string::npos) << h.detail;
  EXPECT_NE(h.detail.find("best 0.930 at v6"), std::string::npos) << h.detail;
  // One version short of the streak: not yet.
  v.pop_back();
  EXPECT_EQ(assess_run(v, {}, kRule).state, "ok");
  // A version that did not report the share breaks the streak.
  v.push_back({26, 0.0, -1});
  EXPECT_EQ(assess_run(v, {}, kRule).state, "ok");
}

TEST(RunHealth, ASolvedTaskIsNotACollapse) {
  std::vector<VersionSignal> v;
  add(v, 1, 5, 0.5, 0.4);
  add(v, 6, 40, 1.0, 1.0);  // every answer right: no variance either, at the best reward
  EXPECT_EQ(assess_run(v, {}, kRule).state, "ok");
  // Reward 0.95 with no variance is within the margin of the best (1.0): still not a collapse.
  add(v, 41, 70, 0.95, 1.0);
  EXPECT_EQ(assess_run(v, {}, kRule).state, "ok");
}

TEST(RunHealth, RegressedWhenHeldOutAccuracyFallsBelowItsBestByTheMargin) {
  std::vector<EvalRecord> e{eval(0, 0.2), eval(10, 0.9), eval(20, 0.85), eval(30, 0.7), eval(40, 0.6)};
  auto h = assess_run({}, e, kRule);
  EXPECT_EQ(h.state, "regressed");
  EXPECT_EQ(h.since_version, 30);  // 0.85 is within 0.1 of 0.9; 0.7 is the first below 0.8
  EXPECT_NE(h.detail.find("0.600 at v40, best 0.900 at v10"), std::string::npos) << h.detail;
  e.push_back(eval(50, 0.85));  // recovered to within the margin
  EXPECT_EQ(assess_run({}, e, kRule).state, "ok");
  EXPECT_EQ(assess_run({}, {eval(0, 0.1), eval(5, 0.05)}, kRule).state, "ok");  // never good: nothing to fall from
}

TEST(RunHealth, CollapseWinsAndStatusTextSaysIt) {
  std::vector<VersionSignal> v;
  v.push_back({1, 0.9, 0.2});
  add(v, 2, 30, 0.0, 1.0);
  auto h = assess_run(v, {eval(0, 0.3), eval(1, 0.95), eval(30, 0.0)}, kRule);
  EXPECT_EQ(h.state, "collapsed");
  EXPECT_EQ(h.since_version, 2);
  nlohmann::json st{{"run", {{"id", "r"}, {"task", "t"}, {"codec", "int8"}, {"mode", "fedavg"}}},
                    {"bucket", "file:///b"},
                    {"version", 30},
                    {"versions", nlohmann::json::array()},
                    {"evals", nlohmann::json::array()},
                    {"workers", nlohmann::json::array()},
                    {"rejected", nlohmann::json::array()},
                    {"run_health", h.to_json()}};
  EXPECT_NE(format_status(st).find("run health: collapsed since v2: no prompt group"), std::string::npos)
      << format_status(st);
  st["run_health"] = RunHealth().to_json();
  EXPECT_EQ(format_status(st).find("run health"), std::string::npos);
}
