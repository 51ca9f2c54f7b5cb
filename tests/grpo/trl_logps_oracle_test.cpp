// The log-probabilities GRPO trains on, against TRL's own: GRPOTrainer._get_per_token_logps_and_
// entropies on a model patched by add_fused_lm_head(temperature=T), as GRPOTrainer.__init__ does,
// run live by tools/trl/token_logps.py (.venv). TRL divides the logits by the sampling
// temperature and takes the log-softmax over the whole vocabulary (no top-k / top-p); ours must
// too, in the trainer (grpo::completion_logprobs: the new, old and reference log-probs) and in the
// sampler (Completion::logprobs, which serve as the old log-probs), else the importance ratio of
// an unmoved policy is not 1 and refers to another policy.
// The batch: completions sampled by our generate at T = 0.7 with top-k 20 from a random Qwen2-shaped
// HF checkpoint written by Python (tools/hf/random_hf.py), prompts of different lengths
// left-padded, completions right-padded; compared at T = 0.7, 1 and 1.4.
// Tolerance: |ours - TRL| <= 1e-4 * max |TRL| + 1e-5 on the completion tokens: float32 on both
// sides; TRL numbers left-padded positions from 0 (RoPE is relative: the same logits up to
// rounding), ours from the first real token. Sampler vs trainer: 5e-5 absolute (cached decode vs
// full pass, as tests/generate/generate_test.cpp).
// A missing oracle is a failure naming scripts/setup.sh --test, not a skip.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../model/test_util.h"
#include "generate/generate.h"
#include "grpo/trainer.h"
#include "model/loader.h"

using namespace brl;
using nlohmann::json;
using test::TempDir;
namespace hf = test::hf;

namespace {
const int kThreads = test::init_threads();
constexpr double kSampleT = 0.7;
const std::vector<double> kTemps = {kSampleT, 1.0, 1.4};

struct Sampled {
  grpo::PolicyBatch batch;
  std::vector<gen::Completion> comps;
};

// G = 2 completions of each prompt, laid out by the trainer's own policy_batch.
Sampled sample(const model::Model& m) {
  const std::vector<std::vector<int32_t>> prompts = {{5, 9, 2, 17}, {1, 2, 3, 4, 5, 6, 7, 8, 9}, {40}};
  gen::GenerateOptions o;
  o.num_generations = 2;
  o.max_new_tokens = 9;
  o.temperature = kSampleT;
  o.top_k = 20;
  o.stop_token_ids = {3};
  o.seed = 5;
  Sampled s;
  s.comps = gen::generate(m, prompts, o);
  s.batch = grpo::policy_batch(prompts, s.comps, false);
  return s;
}

json rows_of(const at::Tensor& t) {
  json out = json::array();
  auto c = t.to(at::kLong).contiguous();
  for (int64_t i = 0; i < c.size(0); ++i)
    out.push_back(std::vector<int64_t>(c[i].data_ptr<int64_t>(), c[i].data_ptr<int64_t>() + c.size(1)));
  return out;
}
}  // namespace

TEST(TrlLogpsOracle, CompletionLogprobsMatchTrlAtTheSamplingTemperature) {
  ASSERT_TRUE(hf::python_installed());
  TempDir dir;
  ASSERT_TRUE(hf::random_hf_model("tiny-qwen2", dir.str("m"), 21));
  auto m = model::load_model(dir.str("m"));
  Sampled s = sample(m);
  const auto& b = s.batch;
  const int64_t N = b.ids.size(0), Lc = b.completion_len;

  json req = {{"model_dir", dir.str("m")},
              {"input_ids", rows_of(b.ids)},
              {"attention_mask", rows_of(b.attn)},
              {"logits_to_keep", Lc},
              {"temperatures", kTemps}};
  test::write_file(dir.str("req.json"), req.dump());
  ASSERT_TRUE(hf::run_command("'" BRL_PYTHON "' '" + hf::source("tools/trl/token_logps.py") + "' < '" +
                              dir.str("req.json") + "' > '" + dir.str("out.json") + "'"));
  json out = json::parse(test::read_file(dir.str("out.json")));
  ASSERT_EQ(out["logps"].size(), kTemps.size());

  at::NoGradGuard ng;
  const at::Tensor mask = b.completion_mask.to(at::kBool);
  std::vector<at::Tensor> ours_by_t;
  for (size_t k = 0; k < kTemps.size(); ++k) {
    SCOPED_TRACE("T = " + std::to_string(kTemps[k]));
    std::vector<at::Tensor> rows;
    for (auto& r : out["logps"][k]) rows.push_back(at::tensor(r.get<std::vector<double>>(), at::kDouble));
    at::Tensor trl = at::stack(rows);  // [N, Lc]
    ASSERT_EQ(trl.sizes(), (std::vector<int64_t>{N, Lc}));
    at::Tensor ent;
    at::Tensor ours = grpo::completion_logprobs(m, b, 0, N, kTemps[k], &ent).to(at::kDouble);
    ours_by_t.push_back(ours);
    const double scale = trl.masked_select(mask).abs().max().item<double>();
    const double diff = (ours - trl).masked_select(mask).abs().max().item<double>();
    std::printf("    T = %.1f: max |ours - TRL| = %.2e (max |TRL| = %.3f)\n", kTemps[k], diff, scale);
    EXPECT_LE(diff, 1e-4 * scale + 1e-5);
    EXPECT_GT(scale, 0.5);  // log-probs with signal, else agreement proves nothing
    // The entropies top_entropy_quantile ranks by: TRL's (fused LM head's) at the same temperature.
    rows.clear();
    for (auto& r : out["entropies"][k]) rows.push_back(at::tensor(r.get<std::vector<double>>(), at::kDouble));
    at::Tensor trl_ent = at::stack(rows);
    ASSERT_EQ(ent.sizes(), trl_ent.sizes());
    const double ent_scale = trl_ent.masked_select(mask).abs().max().item<double>();
    const double ent_diff = (ent.to(at::kDouble) - trl_ent).masked_select(mask).abs().max().item<double>();
    std::printf("    T = %.1f: entropy max |ours - TRL| = %.2e (max %.3f nats)\n", kTemps[k], ent_diff, ent_scale);
    EXPECT_LE(ent_diff, 1e-4 * ent_scale + 1e-5);
    EXPECT_GT(ent_scale, 0.5);
  }
  // The temperature matters: at T = 1 the same tokens have other log-probs.
  EXPECT_GT((ours_by_t[0] - ours_by_t[1]).masked_select(mask).abs().max().item<double>(), 0.05);

  // The sampler's log-probs are the trainer's at the sampling temperature: ratio 1 on-policy.
  double worst = 0;
  for (int64_t i = 0; i < N; ++i)
    for (size_t k = 0; k < s.comps[i].logprobs.size(); ++k)
      worst = std::max(worst, std::abs(s.comps[i].logprobs[k] - ours_by_t[0][i][k].item<double>()));
  std::printf("    sampler vs trainer at T = %.1f: max diff %.2e\n", kSampleT, worst);
  EXPECT_LE(worst, 5e-5);

  // A micro-batch forwards only its rows' window (here one row: its own prompt and completion),
  // and its log-probs are still TRL's over the batch's whole width; the columns left out read 0.
  std::vector<at::Tensor> trl_rows;
  for (auto& r : out["logps"][0]) trl_rows.push_back(at::tensor(r.get<std::vector<double>>(), at::kDouble));
  at::Tensor ent_all;
  grpo::completion_logprobs(m, b, 0, N, kSampleT, &ent_all);
  int64_t trimmed = 0;
  for (int64_t i = 0; i < N; ++i) {
    SCOPED_TRACE("row " + std::to_string(i));
    trimmed += b.prompt_tokens[i] < b.prompt_len || b.completion_tokens[i] < Lc;
    at::Tensor ent;
    at::Tensor one = grpo::completion_logprobs(m, b, i, i + 1, kSampleT, &ent).to(at::kDouble)[0];
    ASSERT_EQ(one.size(0), Lc);
    const at::Tensor row_mask = mask[i];
    const double scale = trl_rows[i].masked_select(row_mask).abs().max().item<double>();
    EXPECT_LE((one - trl_rows[i]).masked_select(row_mask).abs().max().item<double>(), 1e-4 * scale + 1e-5);
    EXPECT_LE((ent[0] - ent_all[i]).masked_select(row_mask).abs().max().item<float>(), 1e-4);
    EXPECT_EQ(one.slice(0, b.completion_tokens[i]).abs().sum().item<double>(), 0.0);
  }
  EXPECT_GE(trimmed, N / 2);  // prompts of 4, 9 and 1 tokens: most rows have a narrower window
}
