// The GRPO step on the GPU against the CPU: the loss and every adapter gradient of one
// micro-batch equal the CPU's in f32, stay within a stated tolerance with a bf16 base (adapter
// in f32), and PolicyOptimizer's whole step (reference pass, micro-batches, clipping, AdamW)
// runs on the GPU with the CPU's loss; the multi-tensor clipping and fused AdamW equal
// libtorch's per-tensor ones there; the sampler/trainer log-prob mismatch per dtype. Skips
// without a GPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "../cuda_util.h"
#include "../model/test_util.h"
#include "optim_check.h"
#include "generate/generate.h"
#include "grpo/loss.h"
#include "grpo/trainer.h"
#include "lora/lora.h"
#include "model/loader.h"

using namespace brl;

namespace {
const int kThreads = test::init_threads();

model::Model with_adapter(const model::ModelConfig& c, at::ScalarType dt, at::Device dev) {
  auto m = model::random_model(c, 51, 0.1);
  LoraConfig lc;
  lc.r = 4;
  lc.target_modules = {"all-linear"};
  lora::attach(m, lc);
  at::manual_seed(5);  // B is zero at init: give every factor a value, the same on each device
  {
    torch::NoGradGuard ng;
    for (auto& p : lora::parameters(m)) p.normal_(0, 0.05);
  }
  if (dt != at::kFloat) {
    // Base in dt, adapter kept in f32 (as attach makes it over a bf16 base).
    std::vector<at::Tensor> keep;
    for (auto& p : lora::parameters(m)) keep.push_back(p.detach().clone());
    m.to(dt);
    size_t i = 0;
    for (auto& [name, lin] : m.projections())
      if (lin->lora) {
        lin->lora->A = keep[i++].set_requires_grad(true);
        lin->lora->B = keep[i++].set_requires_grad(true);
      }
  }
  m.to(dev);
  m.set_requires_grad(false);
  return m;
}

grpo::PolicyBatch random_batch(const model::ModelConfig& c, int64_t N, int64_t Lp, int64_t Lc) {
  at::manual_seed(6);
  grpo::PolicyBatch b;
  b.prompt_len = Lp;
  b.completion_len = Lc;
  b.ids = at::randint(0, c.vocab_size, {N, Lp + Lc}, at::kLong);
  b.attn = at::ones({N, Lp + Lc}, at::kBool);
  b.attn.select(0, 1).narrow(0, 0, 3).fill_(false);  // a left-padded prompt
  b.pos = model::positions_from_mask(b.attn);
  b.completion_mask = at::ones({N, Lc}, at::kFloat);
  b.completion_mask.select(0, 2).narrow(0, Lc - 2, 2).fill_(0);  // a short completion
  b.old_logps = -3.0 - at::rand({N, Lc});
  b.advantages = at::randn({N});
  return b;
}

// Loss of the whole batch as one micro-batch, backward; -> {loss, gradients in adapter order}.
std::pair<double, std::vector<at::Tensor>> loss_and_grads(model::Model& m, const grpo::PolicyBatch& batch) {
  auto b = batch.to(m.device());
  grpo::LossInputs in;
  in.logps = grpo::completion_logprobs(m, b, 0, b.ids.size(0), 0.9);
  in.old_logps = b.old_logps;
  in.advantages = b.advantages;
  in.mask = b.completion_mask;
  grpo::LossOptions lo;
  lo.loss_type = grpo::LossType::dapo;
  lo.epsilon_low = 0.2, lo.epsilon_high = 0.28;
  auto loss = grpo::grpo_loss(in, lo, nullptr);
  loss.backward();
  std::vector<at::Tensor> g;
  for (auto& p : lora::parameters(m)) g.push_back(p.grad().detach().cpu());
  return {loss.item<double>(), g};
}

void expect_grads_close(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, test::rel_max_diff(got[i], want[i]));
  std::printf("adapter gradients: worst max |diff| / max |grad| = %.2e\n", worst);
  EXPECT_LT(worst, tol);
}

// One micro-batch's loss and adapter gradients on the GPU (base in dt) against the CPU in f32.
void compare_with_cpu(const std::string& family, at::ScalarType dt, double loss_rel, double grad_tol) {
  auto c = test::tiny_config(family);
  auto cpu = with_adapter(c, at::kFloat, at::kCPU);
  auto gpu = with_adapter(c, dt, at::Device(at::kCUDA));
  for (auto& p : lora::parameters(gpu)) ASSERT_EQ(p.scalar_type(), at::kFloat);
  auto b = random_batch(c, 6, 9, 7);
  auto [lc, gc] = loss_and_grads(cpu, b);
  auto [lg, gg] = loss_and_grads(gpu, b);
  EXPECT_NEAR(lg, lc, loss_rel * std::abs(lc) + 1e-7);
  expect_grads_close(gg, gc, grad_tol);
}
}  // namespace

TEST(CudaTrain, F32LossAndAdapterGradientsEqualCpu) {
  REQUIRE_GPU();
  test::strict_fp32();
  compare_with_cpu("qwen2", at::kFloat, 1e-5, 1e-4);
}

// bf16 base (activations in bf16, adapter and its gradients in f32) against all-f32 on the CPU:
// gradients within 10 % of the largest (4.45 % measured on an H200), the loss within 1 %.
TEST(CudaTrain, Bf16BaseWithinTolerance) {
  REQUIRE_GPU();
  compare_with_cpu("llama", at::kBFloat16, 1e-2, 1e-1);
}

TEST(CudaTrain, PolicyOptimizerStepMatchesCpu) {
  REQUIRE_GPU();
  test::strict_fp32();
  auto c = test::tiny_config("qwen3");
  auto cpu = with_adapter(c, at::kFloat, at::kCPU);
  auto gpu = with_adapter(c, at::kFloat, at::Device(at::kCUDA));
  grpo::GrpoConfig g;
  g.num_generations = 2;
  g.per_device_train_batch_size = 2;  // 3 micro-batches
  g.max_completion_length = 7;
  g.beta = 0.04;  // the reference pass too
  g.num_iterations = 2;
  g.max_grad_norm = 0.5;
  grpo::PolicyOptimizer pc(cpu, g), pg(gpu, g);
  auto b = random_batch(c, 6, 9, 7);
  auto before = lora::parameters(gpu)[1].detach().cpu().clone();
  auto sc = pc.optimize(b, 1e-3);
  auto sg = pg.optimize(b, 1e-3);  // the batch moves to the GPU inside
  EXPECT_NEAR(sg.loss, sc.loss, 1e-5 * std::abs(sc.loss) + 1e-7);
  EXPECT_NEAR(sg.kl, sc.kl, 1e-5 * std::abs(sc.kl) + 1e-8);
  EXPECT_NEAR(sg.grad_norm, sc.grad_norm, 1e-4 * sc.grad_norm);
  EXPECT_EQ(pg.reference_passes(), 1);
  auto after = lora::parameters(gpu)[1].detach();
  EXPECT_TRUE(after.is_cuda());
  EXPECT_GT((after.cpu() - before).abs().max().item<double>(), 0);
  // After the same two AdamW steps (lr 1e-3) the adapters agree: Adam's first steps move each
  // element by ~lr * sign(gradient), so an element whose gradient is ~0 may move either way on
  // either device; all but 1 % agree within 1e-5, and none differs by more than the two steps.
  auto pcpu = lora::parameters(cpu), pgpu = lora::parameters(gpu);
  double worst = 0, far = 0, n = 0;
  for (size_t i = 0; i < pcpu.size(); ++i) {
    auto d = (pgpu[i].detach().cpu() - pcpu[i].detach()).abs();
    worst = std::max(worst, d.max().item<double>());
    far += (d > 1e-5).sum().item<double>();
    n += d.numel();
  }
  EXPECT_LT(far / n, 0.01);
  EXPECT_LE(worst, 2 * 2e-3);
}

// The fused AdamW kernel and the multi-tensor clipping on the GPU against libtorch's
// per-tensor AdamW and clip_grad_norm_ there.
TEST(OptimCuda, FusedAdamWAndClippingMatchLibtorch) {
  REQUIRE_GPU();
  test::expect_fused_adamw_matches_libtorch(at::kCUDA, at::kFloat, 2e-6);
  test::expect_clip_grad_norm_matches_libtorch(at::kCUDA);
}

// The sampler's mismatch on the GPU (vllm_importance_sampling_correction): completions sampled
// by the static decoder (CUDA graphs), then the trainer's log-probs of them. In f32 the two agree
// to rounding (weights 1); with a bf16 base (and with its LM head cast to f32, the ScaleRL recipe)
// they differ by bf16 rounding, which this prints (the
// figure that says whether the correction is worth its cost) and bounds loosely: a mean |difference|
// under 0.1 nats and mean weight within [0.5, 2] (a larger mismatch would be a decoder bug). Also:
// the old policy pass (num_iterations 2) runs on the device.
TEST(CudaTrain, SamplerMismatchPerDtype) {
  REQUIRE_GPU();
  test::strict_fp32();
  auto c = test::tiny_config("qwen2");
  const std::vector<std::pair<at::ScalarType, bool>> variants = {
      {at::kFloat, false}, {at::kBFloat16, false}, {at::kBFloat16, true}};  // dtype, f32 LM head
  for (const auto& [dt, f32_head] : variants) {
    const std::string what = std::string(c10::toString(dt)) + (f32_head ? " + cast_lm_head_to_fp32" : "");
    SCOPED_TRACE(what);
    auto m = with_adapter(c, dt, at::Device(at::kCUDA));
    if (f32_head) m.cast_lm_head_to_fp32();
    gen::GenerateOptions go;
    go.num_generations = 8;
    go.max_new_tokens = 24;
    go.seed = 3;
    const std::vector<std::vector<int32_t>> prompts = {{5, 9, 2, 7}, {11, 3}, {4, 4, 8, 1, 6}, {2}};
    auto comps = gen::generate(m, prompts, go);
    grpo::PolicyBatch b = grpo::policy_batch(prompts, comps, false);
    b.advantages = at::randn({b.ids.size(0)});
    grpo::GrpoConfig g;
    g.num_generations = 8;
    g.per_device_train_batch_size = 8;
    g.num_iterations = 2;
    g.vllm_importance_sampling_correction = true;
    g.vllm_importance_sampling_mode = grpo::SamplingCorrectionMode::token_truncate;
    grpo::PolicyOptimizer po(m, g);
    const grpo::PolicyStats st = po.optimize(b, 0.0);  // no update: both iterations see the sampler's policy
    ASSERT_TRUE(st.sampling);
    EXPECT_EQ(po.old_policy_passes(), 1);
    const grpo::SamplingStats& s = *st.sampling;
    std::printf("    %s: |trainer - sampler| log-prob mean %.2e max %.2e; weights min %.4f mean %.4f max %.4f\n",
                what.c_str(), s.logp_diff_mean, s.logp_diff_max, s.is_ratio_min, s.is_ratio_mean, s.is_ratio_max);
    if (dt == at::kFloat) {
      EXPECT_LT(s.logp_diff_max, 1e-3);
      EXPECT_NEAR(s.is_ratio_mean, 1.0, 1e-3);
    } else {
      EXPECT_LT(s.logp_diff_mean, 0.1);
      EXPECT_GT(s.is_ratio_mean, 0.5);
      EXPECT_LT(s.is_ratio_mean, 2.0);
    }
  }
}
