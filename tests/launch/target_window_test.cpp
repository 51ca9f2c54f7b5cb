// The run's stopping rule: the mean of the last N evaluations against the target.
#include <gtest/gtest.h>

#include "launch/local_run.h"

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
