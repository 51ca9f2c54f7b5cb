// The demo base's pretraining: the taught wrong habit (label errors) has the asked rate and
// form and refuses non-integer answers; the held-out scores a run reports are those of the model
// it writes, recounted independently.
#include "grpo/pretrain.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "../model/test_util.h"
#include "generate/generate.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"
#include "tasks/task.h"
#include "util/error.h"

using namespace brl;

namespace {
const int kThreads = test::init_threads();
constexpr int kRecountSteps = 1500;

tasks::TaskOptions addition() {
  tasks::TaskOptions to;
  to.max_operand = 99;
  to.operations = "+";
  to.num_eval = 16;
  return to;
}

// The recount tests' setting: small addition (operands up to max_operand, 12 held-out problems)
// on a 64-wide 2-layer model, 32 sequences a step at lr 5e-3, checks of 12 prompts; greedy
// skill never stops it (target 2).
struct Small {
  std::unique_ptr<tasks::Task> task;
  grpo::PretrainOptions o;
};
Small small_run(int max_operand, const std::string& out_dir) {
  tasks::TaskOptions to;
  to.max_operand = max_operand;
  to.operations = "+";
  to.num_eval = 12;
  Small s{tasks::make_task(to), {}};
  grpo::PretrainOptions& o = s.o;
  o.out_dir = out_dir;
  o.hidden_size = 64, o.intermediate_size = 128, o.num_layers = 2, o.num_heads = 2, o.num_kv_heads = 1;
  o.batch_size = 32, o.max_steps = kRecountSteps, o.eval_examples = 12;
  o.learning_rate = 5e-3;
  o.target_accuracy = 2.0;
  return s;
}

// The written model's answers to the prompts as text (g.num_generations each, in order; at
// most 8 new tokens, the stop token dropped), without the task's reward code.
std::vector<std::string> answers(const model::Model& m, const tok::Tokenizer& tk,
                                 const std::vector<std::string>& prompts, gen::GenerateOptions g) {
  std::vector<std::vector<int32_t>> ids;
  for (auto& p : prompts) ids.push_back(tk.encode(p));
  g.max_new_tokens = 8;
  g.stop_token_ids = {tk.token_to_id("<|endoftext|>").value()};
  std::vector<std::string> out;
  for (auto& c : gen::generate(m, ids, g)) {
    if (c.finish == gen::FinishReason::kStop) c.tokens.pop_back();
    out.push_back(tk.decode(c.tokens));
  }
  return out;
}
}  // namespace

TEST(Pretrain, LabelErrorsHaveTheHabitsFormAtTheAskedRate) {
  auto task = tasks::make_task(addition());
  grpo::PretrainOptions o;
  const int n = 4000;
  using grpo::Habit;
  for (auto [habit, rate] : std::vector<std::pair<Habit, double>>{
           {Habit::plus_one, 0.0}, {Habit::plus_one, 0.55}, {Habit::plus_one, 1.0}, {Habit::negate, 0.6}}) {
    o.habit = habit;
    o.label_error_rate = rate;
    int wrong = 0;
    for (uint64_t i = 0; i < n; ++i) {
      tasks::Example e = grpo::pretrain_example(*task, i, o), clean = task->train_example(i, 0, 1);
      ASSERT_EQ(e.prompt, clean.prompt);
      int64_t a = e.extra["a"], b = e.extra["b"];
      ASSERT_EQ(clean.answer, std::to_string(a + b));
      if (e.answer != clean.answer) {
        ++wrong;
        EXPECT_EQ(e.answer, std::to_string(habit == Habit::negate ? -(a + b) : a + b + 1)) << e.prompt;
      }
      // Same draw on every call: the label of example i is fixed by (seed, i).
      EXPECT_EQ(grpo::pretrain_example(*task, i, o).answer, e.answer);
    }
    // Binomial(n, rate): 5 standard deviations (0.039 at rate 0.55), exact at 0 and 1.
    double tol = 5 * std::sqrt(rate * (1 - rate) / n);
    EXPECT_NEAR(static_cast<double>(wrong) / n, rate, tol) << "rate " << rate;
  }
}

TEST(Pretrain, LabelErrorsNeedIntegerAnswersAndARate) {
  tasks::TaskOptions to;
  to.name = "countdown";
  to.num_eval = 4;
  auto countdown = tasks::make_task(to);
  grpo::PretrainOptions o;
  EXPECT_NO_THROW(grpo::pretrain_example(*countdown, 0, o));  // rate 0: any answer
  o.label_error_rate = 1.0;
  try {
    grpo::pretrain_example(*countdown, 0, o);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("needs integer answers"), std::string::npos) << e.what();
  }
  auto add = tasks::make_task(addition());
  for (double bad : {-0.1, 1.5, std::nan("")}) {
    o.label_error_rate = bad;
    EXPECT_THROW(grpo::pretrain_example(*add, 0, o), UserError) << bad;
  }
}

// The reported held-out accuracy and skill, recounted here from the written model: greedy
// answers to the held-out prompts, decoded and compared as text with the answer and with its
// negation (the habit), without the task's reward code. Single-digit addition with the habit at
// 50 %, trained long enough (~7 s) that the model answers some held-out problems (never trained
// on, nor their twins) right or with the habit, so the counts are not all zero.
TEST(Pretrain, ReportedHeldOutScoresMatchARecountOfTheWrittenModel) {
  test::TempDir tmp;
  auto [task, o] = small_run(9, tmp.str("base"));
  o.eval_every = 100;
  o.label_error_rate = 0.5;
  auto r = grpo::pretrain(*task, o, /*progress=*/false);
  EXPECT_EQ(r.steps, kRecountSteps);

  auto m = model::load_model(o.out_dir);
  EXPECT_EQ(m.config.hidden_size, 64);
  auto tk = tok::Tokenizer::from_dir(o.out_dir);
  int right = 0, habit = 0;
  const auto& held_out = task->eval_set();
  gen::GenerateOptions greedy;
  greedy.temperature = 0;
  for (auto& e : held_out) {
    const std::string text = answers(m, tk, {e.prompt}, greedy)[0];
    right += text == e.answer;
    habit += text == "-" + e.answer && e.answer != "0";
  }
  const double n = static_cast<double>(held_out.size());
  std::printf(
      "    held-out: %d right, %d with the habit of %zu; reported accuracy %.3f skill %.3f (validation %.3f %.3f)\n",
      right, habit, held_out.size(), r.accuracy, r.skill, r.val_accuracy, r.val_skill);
  EXPECT_DOUBLE_EQ(r.accuracy, right / n);
  EXPECT_DOUBLE_EQ(r.skill, (right + habit) / n);
  EXPECT_GT(right + habit, 0);  // measured: 2 right, 2 with the habit on a Zen 5; 0 and 1 on a 2-core Xeon
}

TEST(Pretrain, CosineScheduleWarmsUpThenDecaysToTheFloor) {
  grpo::PretrainOptions o;
  o.learning_rate = 1e-3, o.max_steps = 1000, o.warmup_steps = 100, o.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(grpo::pretrain_lr(o, 500), 1e-3);  // constant: warmup only
  EXPECT_DOUBLE_EQ(grpo::pretrain_lr(o, 50), 0.5e-3);
  o.lr_scheduler_type = grpo::PretrainSchedule::cosine;
  // lr * min(1, s / warmup) * (0.1 + 0.9 * (1 + cos(pi s / max)) / 2), by hand:
  EXPECT_NEAR(grpo::pretrain_lr(o, 50), 1e-3 * 0.5 * (0.1 + 0.9 * (1 + std::cos(M_PI * 0.05)) / 2), 1e-15);
  EXPECT_NEAR(grpo::pretrain_lr(o, 500), 1e-3 * 0.55, 1e-15);  // cos(pi/2) = 0
  EXPECT_NEAR(grpo::pretrain_lr(o, 1000), 1e-4, 1e-15);        // the floor
}

// Stopping on sampled pass@k: the run stops at the first check whose validation pass@k
// reaches the target, and the reported validation and held-out pass@1 / pass@k are those of
// the written model, recounted here from k sampled answers per prompt compared as text (the
// unbiased estimator of Chen et al. 2021 by hand: with k = n samples, pass@k = "any right",
// pass@1 = the fraction right). Addition up to 19 + 19: measured, the target is met at the
// third check (150 steps, under a second).
TEST(Pretrain, StopsOnValidationPassAtKAndReportsTheWrittenModels) {
  test::TempDir tmp;
  auto [task, o] = small_run(19, tmp.str("base"));
  o.eval_every = 50;
  o.pass_k = 4, o.target_pass_at_k = 0.25;
  auto r = grpo::pretrain(*task, o, /*progress=*/false);
  std::printf("    stopped after %d steps: validation pass@1 %.3f pass@4 %.3f, held-out %.3f %.3f\n", r.steps,
              r.val_pass_at_1, r.val_pass_at_k, r.pass_at_1, r.pass_at_k);
  EXPECT_LT(r.steps, kRecountSteps);
  EXPECT_EQ(r.steps % o.eval_every, 0);
  EXPECT_GE(r.val_pass_at_k, o.target_pass_at_k);
  EXPECT_LE(r.val_pass_at_1, r.val_pass_at_k);

  // The recount: the same draws as the run's checks (one batch of prompts, pass_k answers each
  // at temperature 1, seeded by o.seed) through gen::generate, scored as text.
  auto m = model::load_model(o.out_dir);
  auto tk = tok::Tokenizer::from_dir(o.out_dir);
  gen::GenerateOptions g;
  g.num_generations = o.pass_k;
  g.temperature = 1.0;
  g.seed = o.seed * 1000003ULL;
  auto recount = [&](const std::vector<tasks::Example>& set) {
    std::vector<std::string> prompts;
    for (auto& e : set) prompts.push_back(e.prompt);
    const auto texts = answers(m, tk, prompts, g);
    int right = 0, any = 0;
    for (size_t i = 0; i < set.size(); ++i) {
      int c = 0;
      for (int s = 0; s < o.pass_k; ++s) c += texts[i * o.pass_k + s] == set[i].answer;
      right += c;
      any += c > 0;
    }
    const double n = static_cast<double>(set.size());
    return std::pair{right / (n * o.pass_k), any / n};
  };
  ASSERT_LE(task->validation_set().size(), 16u);  // one batch of prompts, as the run's checks had
  auto [v1, vk] = recount(task->validation_set());
  EXPECT_NEAR(r.val_pass_at_1, v1, 1e-12);
  EXPECT_NEAR(r.val_pass_at_k, vk, 1e-12);
  auto [h1, hk] = recount(task->eval_set());
  EXPECT_NEAR(r.pass_at_1, h1, 1e-12);
  EXPECT_NEAR(r.pass_at_k, hk, 1e-12);
}

// Snapshots make the stop as fine as checks that often would, at the cost of a few checks at the
// end: with checks every 50 steps and a snapshot every k, the run stops at the same step and
// writes the same weights as a run checking every k steps (the reference; the same draws, so
// the same scores), provided the check that ends the reference's window of 50 steps meets the
// target too (pass@k is noisy: a check can miss after a snapshot met). The premise is read off
// a run checking every 50 steps without snapshots, which must stop at that window's end. Which
// steps meet depends on the CPU's float rounding (seen: step 120 on one machine, 70 on
// another), so seeds are tried until both branches ran: a snapshot that meets (k = 10, the
// reference stopping between checks) and none that does, the run keeping its check's weights
// after scoring them (k = 25, the reference stopping on a multiple of 50).
TEST(Pretrain, SnapshotsStopWhereChecksThatOftenWould) {
  test::TempDir tmp;
  auto bytes = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  bool snapshot_met = false, check_kept = false;
  for (uint64_t seed = 7; seed < 15 && !(snapshot_met && check_kept); ++seed) {
    auto [task, o] = small_run(19, "");
    o.seed = seed, o.pass_k = 4, o.target_pass_at_k = 0.25, o.eval_every = 50;
    o.max_steps = 400;  // a seed slow to meet the target is skipped, not waited for
    grpo::PretrainOptions plain = o;
    plain.out_dir = tmp.str("plain");
    const auto r50 = grpo::pretrain(*task, plain, false);
    if (r50.steps == o.max_steps) continue;
    for (int k : {10, 25}) {
      bool& covered = k == 10 ? snapshot_met : check_kept;
      if (covered) continue;
      grpo::PretrainOptions snap = o, every = o;
      snap.out_dir = tmp.str("snap"), snap.snapshot_every = k;
      every.out_dir = tmp.str("every"), every.eval_every = k;
      const auto re = grpo::pretrain(*task, every, false);
      const bool premise = (re.steps + 49) / 50 * 50 == r50.steps;
      const bool between = re.steps % 50 != 0;
      std::printf("    seed %llu: checks every 50: step %d; every %d: step %d (pass@4 %.3f)%s\n",
                  static_cast<unsigned long long>(seed), r50.steps, k, re.steps, re.val_pass_at_k,
                  premise ? "" : ": that window's check misses, skipped");
      if (!premise || between != (k == 10)) continue;
      const auto rs = grpo::pretrain(*task, snap, false);
      std::printf("      checks every 50 + snapshots every %d: step %d (pass@4 %.3f)\n", k, rs.steps, rs.val_pass_at_k);
      EXPECT_EQ(rs.steps, re.steps);
      EXPECT_EQ(rs.val_pass_at_k, re.val_pass_at_k);
      EXPECT_EQ(rs.pass_at_1, re.pass_at_1);  // held-out, scored on the written weights
      const std::string written = bytes(tmp.str("snap/model.safetensors"));
      EXPECT_FALSE(written.empty());
      EXPECT_EQ(written, bytes(tmp.str("every/model.safetensors")));
      covered = true;
    }
  }
  EXPECT_TRUE(snapshot_met) << "no seed stopped on a snapshot between checks: the test shows nothing";
  EXPECT_TRUE(check_kept) << "no seed stopped on a check after its snapshots missed: the test shows nothing";

  auto [task, o] = small_run(19, "");
  grpo::PretrainOptions snap = o;
  snap.out_dir = tmp.str("snap"), snap.eval_every = 50, snap.pass_k = 4, snap.target_pass_at_k = 0.25;
  snap.snapshot_every = 15;
  EXPECT_THROW(
      {
        try {
          grpo::pretrain(*task, snap, false);
        } catch (const UserError& e) {
          EXPECT_NE(std::string(e.what()).find("snapshot_every (15) must divide eval_every (50)"), std::string::npos);
          throw;
        }
      },
      UserError);
}

// Stopping on validation pass@1 (pass@k's target out of reach): the run stops at the first
// check that meets it. The run stopped 10 steps earlier, whose last check is the step before,
// reads below the target there: the same weights and draws, so the same score the first run saw.
// Measured: step 360 reads 0.104, step 350 0.042 (12 prompts x 4 answers).
TEST(Pretrain, StopsAtTheFirstCheckWhosePassAt1MeetsTheTarget) {
  test::TempDir tmp;
  auto [task, o] = small_run(19, tmp.str("base"));
  o.eval_every = 10;
  o.pass_k = 4, o.target_pass_at_k = 1.0, o.target_pass_at_1 = 0.1;
  const auto r = grpo::pretrain(*task, o, false);
  grpo::PretrainOptions before = o;
  before.out_dir = tmp.str("before"), before.max_steps = r.steps - o.eval_every;
  const auto rb = grpo::pretrain(*task, before, false);
  std::printf("    step %d: validation pass@1 %.3f pass@4 %.3f; step %d: %.3f %.3f\n", r.steps, r.val_pass_at_1,
              r.val_pass_at_k, rb.steps, rb.val_pass_at_1, rb.val_pass_at_k);
  ASSERT_LT(r.steps, kRecountSteps);
  ASSERT_GT(rb.steps, 0);
  EXPECT_GE(r.val_pass_at_1, o.target_pass_at_1);
  EXPECT_LT(r.val_pass_at_k, 1.0);  // pass@1 stopped it, not pass@4
  EXPECT_LT(rb.val_pass_at_1, o.target_pass_at_1);
}

TEST(Pretrain, RefusesAPassKOutsideItsRange) {
  tasks::TaskOptions to = addition();
  auto task = tasks::make_task(to);
  grpo::PretrainOptions o;
  o.pass_k = -1;
  EXPECT_THROW(grpo::pretrain(*task, o, false), UserError);
}
