// The launcher's rules for `bucketrl run` and the demo: the stopping rule (the mean of the last
// N evaluations against the target) and the children's GPUs on a machine with several (one
// each in turn when model.device names none; as configured otherwise).
#include <gtest/gtest.h>

#include "launch/local_run.h"

using brl::launch::spread_device;
using brl::launch::TargetWindow;

TEST(TargetWindow, OneEvaluationIsTheLatestAlone) {
  TargetWindow w(1, 0.6);
  EXPECT_FALSE(w.add(0.59));
  EXPECT_TRUE(w.add(0.6));
  EXPECT_FALSE(w.add(0.4));  // each evaluation on its own
}

// The skill demo's last readings on 2026-12-06 (pass@1, one per ~5 s): the latest alone stopped
// it at 0.600, and the next version read 0.596. Over three, the mean 0.567 is short of 0.6.
TEST(TargetWindow, ThreeEvaluationsNeedTheirMeanAtTheTarget) {
  TargetWindow w(3, 0.6);
  for (double v : {0.549, 0.506, 0.596, 0.600}) EXPECT_FALSE(w.add(v)) << v;
  EXPECT_NEAR(w.mean(), (0.506 + 0.596 + 0.600) / 3, 1e-12);
  EXPECT_FALSE(w.add(0.598));  // (0.596 + 0.600 + 0.598) / 3 = 0.598
  EXPECT_TRUE(w.add(0.612));   // (0.600 + 0.598 + 0.612) / 3 = 0.6033
}

TEST(TargetWindow, NotBeforeThereAreThatMany) {
  TargetWindow w(3, 0.6);
  EXPECT_FALSE(w.add(0.9));
  EXPECT_FALSE(w.add(0.9));
  EXPECT_NEAR(w.mean(), 0.9, 1e-12);
  EXPECT_TRUE(w.add(0.9));
  TargetWindow zero(0, 0.6);  // a window under 1 is 1
  EXPECT_TRUE(zero.add(0.6));
}

TEST(SpreadDevice, ChildrenTakeTheGpusInTurnWhenTheDeviceNamesNone) {
  // 4 GPUs, 6 workers and the evaluator (index 6): 0 1 2 3 0 1, evaluator on 2.
  const char* want[] = {"cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:0", "cuda:1", "cuda:2"};
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(spread_device("auto", 4, i), want[i]) << i;
    EXPECT_EQ(spread_device("cuda", 4, i), want[i]) << i;
  }
  EXPECT_EQ(spread_device("auto", 2, 2), "cuda:0");  // 2 workers: the evaluator shares the first
}

TEST(SpreadDevice, OneGpuNoGpuOrANamedDeviceLeaveEachChildToModelDevice) {
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(spread_device("auto", 1, i), "");
    EXPECT_EQ(spread_device("cuda", 0, i), "");  // resolve_device then says no GPU is here
    EXPECT_EQ(spread_device("cpu", 8, i), "");
    EXPECT_EQ(spread_device("cuda:1", 8, i), "");  // an operator's choice stands
  }
}
