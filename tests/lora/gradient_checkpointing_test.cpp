// Activation checkpointing (model/checkpoint.h, [grpo] gradient_checkpointing) changes what
// backward keeps, never what it computes: the same loss and the same gradients (LoRA factors,
// and every base weight when the base trains) as the plain graph on tiny Llama / Qwen2 /
// Qwen3 models, with LoRA dropout on (so the recomputation must draw the same masks: the
// generator is set back to its state at the forward pass).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "../model/test_util.h"
#include "lora/lora.h"
#include "model/checkpoint.h"
#include "model/loader.h"

using namespace brl;

namespace {

struct Pass {
  double loss = 0;
  std::vector<torch::Tensor> grads;
  int checkpoints = 0;  // checkpointed layers in the graph
};

// Nodes of the autograd graph below `t` whose name says they are checkpoints.
int count_checkpoints(const torch::Tensor& t) {
  std::vector<torch::autograd::Node*> todo{t.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  int n = 0;
  while (!todo.empty()) {
    auto* node = todo.back();
    todo.pop_back();
    if (!node || !seen.insert(node).second) continue;
    n += node->name().find("Checkpoint") != std::string::npos;
    for (auto& e : node->next_edges()) todo.push_back(e.function.get());
  }
  return n;
}

// One forward and backward of the mean chosen-token log-prob (the LM head chunked, as in
// training), seeded; returns the loss and the gradients of `params` (cleared after).
Pass run(model::Model& m, const std::vector<torch::Tensor>& params, bool ckpt, uint64_t seed) {
  m.gradient_checkpointing = ckpt;
  torch::manual_seed(static_cast<int64_t>(seed));
  auto ids = torch::randint(4, m.config.vocab_size, {3, 10}, torch::kLong);
  auto pos = torch::arange(10, torch::kLong).unsqueeze(0).expand({3, 10}).contiguous();
  auto hidden = m.forward(ids, pos);
  auto lp = m.token_logprobs(hidden.narrow(1, 0, 9), ids.narrow(1, 1, 9));
  auto loss = -lp.mean();
  Pass p;
  p.checkpoints = count_checkpoints(loss);
  loss.backward();
  p.loss = loss.item<double>();
  for (auto& t : params) {
    p.grads.push_back(t.grad().defined() ? t.grad().clone() : torch::zeros_like(t));
    t.mutable_grad() = torch::Tensor();
  }
  return p;
}

double max_diff(const Pass& a, const Pass& b) {
  double d = 0, scale = 0;
  for (size_t i = 0; i < a.grads.size(); ++i) {
    d = std::max(d, (a.grads[i] - b.grads[i]).abs().max().item<double>());
    scale = std::max(scale, a.grads[i].abs().max().item<double>());
  }
  EXPECT_GT(scale, 0.0);
  return d / scale;
}

}  // namespace

TEST(GradientCheckpointing, SameLossAndLoraGradientsWithDropout) {
  for (const std::string type : {"llama", "qwen2", "qwen3"}) {
    auto m = model::random_model(test::tiny_config(type), 5, 0.2);
    LoraConfig lc;
    lc.r = 4;
    lc.lora_alpha = 8;
    lc.lora_dropout = 0.3;
    lc.target_modules = {"all-linear"};
    lora::attach(m, lc);
    m.set_requires_grad(false);
    auto params = lora::parameters(m);
    torch::manual_seed(11);
    for (auto& t : params) {
      torch::NoGradGuard ng;
      t.normal_(0, 0.1);  // B non-zero too, so A has a gradient
      t.set_requires_grad(true);
    }
    m.training = true;  // dropout on the LoRA branch
    const Pass plain = run(m, params, false, 7), ckpt = run(m, params, true, 7), other = run(m, params, true, 8);
    EXPECT_EQ(plain.checkpoints, 0);
    EXPECT_EQ(ckpt.checkpoints, m.config.num_hidden_layers) << type;
    EXPECT_NEAR(ckpt.loss, plain.loss, 1e-6 * std::abs(plain.loss)) << type;
    // Recomputed: the same kernels on the same inputs; only the summation order of the
    // parameters' gradient accumulation may differ.
    EXPECT_LT(max_diff(plain, ckpt), 1e-5) << type;
    EXPECT_GT(max_diff(plain, other), 1e-2) << type << ": other dropout masks, other gradients";
  }
}

TEST(GradientCheckpointing, SameGradientsForEveryBaseWeightWhenTheBaseTrains) {
  auto m = model::random_model(test::tiny_config("qwen2"), 5, 0.2);
  m.set_requires_grad(true);  // pretraining: embeddings (tied LM head), norms, projections
  std::vector<torch::Tensor> params;
  for (auto& nt : m.named_tensors())
    if (nt.tensor->defined()) params.push_back(*nt.tensor);
  const Pass plain = run(m, params, false, 3), ckpt = run(m, params, true, 3);
  EXPECT_EQ(ckpt.checkpoints, m.config.num_hidden_layers);
  EXPECT_NEAR(ckpt.loss, plain.loss, 1e-6 * std::abs(plain.loss));
  EXPECT_LT(max_diff(plain, ckpt), 1e-5);
}

TEST(GradientCheckpointing, WithoutGradModeItIsThePlainCall) {
  auto x = torch::randn({4});
  torch::NoGradGuard ng;
  int calls = 0;
  auto y = model::checkpoint(
      [&](const torch::Tensor& in) {
        ++calls;
        return in * 2;
      },
      x);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(torch::equal(y, x * 2));
  EXPECT_FALSE(y.requires_grad());
}
