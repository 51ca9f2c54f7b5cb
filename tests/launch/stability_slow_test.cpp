// Long runs stay learned (issue 21): the learnable task (local_run_slow_test's, which reaches
// held-out accuracy 0.8 in ~20 s) kept training over a directory bucket with two workers and
// the evaluator for 90 s, several times what it needs. Held-out accuracy must reach 0.8, end
// within 0.15 of its best, and the run's health (protocol/health.h) must be ok. A run that
// learned and then unlearned (reward 0.9 -> 0, every later delta of norm 0, as the issue saw)
// fails all three.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>

#include "launch/local_run.h"
#include "async_util.h"
#include "protocol/bucket.h"
#include "protocol/layout.h"
#include "protocol/status.h"

using namespace brl;

TEST(Stability, KeepsWhatItLearnedWhenTrainingGoesOn) {
  test::TempDir tmp;
  RunConfig cfg = test::learnable_config(test::make_base(tmp.str("base")), tmp.str("out"));
  cfg.train.eval_pass_k = 0;  // greedy accuracy is the criterion; leave the cores to the workers
  launch::LocalRunOptions o;
  o.workers = 2;
  o.time_limit_s = 90;
  o.eval_interval_s = 2;
  o.exe = BRL_EXE;
  std::atomic<bool> stop{false};
  auto s = launch::run_local(cfg, o, stop);
  ASSERT_TRUE(s.verify.ok()) << s.verify.summary();
  auto store = protocol::open_bucket(s.bucket);
  std::vector<protocol::EvalRecord> evals;
  for (auto& obj : store->list_all(protocol::evals_prefix()).value())
    evals.push_back(protocol::EvalRecord::parse(store->get(obj.key).value(), obj.key).value());
  ASSERT_GE(evals.size(), 5u);
  double best = 0;
  int64_t best_v = 0;
  for (auto& e : evals)
    if (e.accuracy > best) best = e.accuracy, best_v = e.version;
  std::printf(
      "held-out accuracy: %.3f at v0, best %.3f at v%lld, %.3f at v%lld (the end; %zu evaluations, %lld versions)\n",
      evals.front().accuracy, best, static_cast<long long>(best_v), evals.back().accuracy,
      static_cast<long long>(evals.back().version), evals.size(), static_cast<long long>(s.versions));
  EXPECT_GE(best, 0.8);
  EXPECT_GE(evals.back().accuracy, best - 0.15) << "learned, then unlearned";
  auto st = protocol::run_status(*store);
  EXPECT_EQ(st["run_health"]["state"], "ok") << st["run_health"].dump();
}
