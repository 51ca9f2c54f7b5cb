// fused_adamw_step and clip_grad_norm (grpo/optim.h) against libtorch's own AdamW and
// clip_grad_norm_ (a separate implementation: one op per tensor), on any device; shared by the
// CPU test (trainer_test) and the GPU one (trainer_cuda_test).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "grpo/optim.h"

namespace brl::test {

namespace optim_check {
inline const std::vector<std::vector<int64_t>> kShapes = {{16, 33}, {7}, {1}, {5, 5, 2}, {3, 4}};

// Two equal sets of parameters of kShapes (the last never gets a gradient).
inline void twin_params(at::Device dev, at::ScalarType dt, std::vector<at::Tensor>* a, std::vector<at::Tensor>* b) {
  for (auto& s : kShapes) {
    auto p = at::randn(s, at::TensorOptions().dtype(dt)).to(dev);
    a->push_back(p.clone().set_requires_grad(true));
    b->push_back(p.clone().set_requires_grad(true));
  }
}

inline double max_abs(const at::Tensor& x, const at::Tensor& y) {
  return (x.detach().cpu().to(at::kDouble) - y.detach().cpu().to(at::kDouble)).abs().max().item<double>();
}
}  // namespace optim_check

// Six steps with weight decay and a learning rate that changes between steps (as the trainer's
// schedule does): parameters and both moments within tol of libtorch's, the same step counts,
// and the parameter without a gradient untouched and without state.
inline void expect_fused_adamw_matches_libtorch(at::Device dev, at::ScalarType dt, double tol) {
  using namespace optim_check;
  at::manual_seed(11);
  std::vector<at::Tensor> ref, ours;
  twin_params(dev, dt, &ref, &ours);
  const at::Tensor first = ours[0].detach().clone(), idle = ours.back().detach().clone();
  auto o = torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1);
  torch::optim::AdamW a(ref, o), b(ours, o);
  for (int step = 0; step < 6; ++step) {
    for (size_t i = 0; i + 1 < kShapes.size(); ++i) {
      auto g = at::randn(kShapes[i], at::TensorOptions().dtype(dt)).to(dev);
      ref[i].mutable_grad() = g.clone();
      ours[i].mutable_grad() = g.clone();
    }
    for (auto* opt : {&a, &b})
      static_cast<torch::optim::AdamWOptions&>(opt->param_groups()[0].options()).lr(1e-2 * (1 + step));
    a.step();
    grpo::fused_adamw_step(b);
  }
  EXPECT_GT(max_abs(ours[0], first), 1e-2);  // it moved
  for (size_t i = 0; i + 1 < kShapes.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    EXPECT_LE(max_abs(ours[i], ref[i]), tol);
    auto& sa = static_cast<torch::optim::AdamWParamState&>(*a.state().at(ref[i].unsafeGetTensorImpl()));
    auto& sb = static_cast<torch::optim::AdamWParamState&>(*b.state().at(ours[i].unsafeGetTensorImpl()));
    EXPECT_EQ(sb.step(), 6);
    EXPECT_EQ(sb.step(), sa.step());
    EXPECT_LE(max_abs(sb.exp_avg(), sa.exp_avg()), tol);
    EXPECT_LE(max_abs(sb.exp_avg_sq(), sa.exp_avg_sq()), tol);
  }
  EXPECT_TRUE(ours.back().detach().equal(idle));
  EXPECT_EQ(b.state().count(ours.back().unsafeGetTensorImpl()), 0u);
  EXPECT_EQ(a.state().count(ref.back().unsafeGetTensorImpl()), 0u);
}

// The returned norm is the L2 norm of all gradients (summed here in f64), the clipped gradients
// equal libtorch's, and a max_norm above the norm leaves them exactly as they were.
inline void expect_clip_grad_norm_matches_libtorch(at::Device dev) {
  using namespace optim_check;
  at::manual_seed(12);
  std::vector<at::Tensor> ref, ours;
  twin_params(dev, at::kFloat, &ref, &ours);
  EXPECT_EQ(grpo::clip_grad_norm(ours, 1.0), 0.0);  // no gradients yet
  double sq = 0;
  for (size_t i = 0; i + 1 < kShapes.size(); ++i) {
    auto g = (3 * at::randn(kShapes[i])).to(dev);
    sq += g.cpu().to(at::kDouble).square().sum().item<double>();
    ref[i].mutable_grad() = g.clone();
    ours[i].mutable_grad() = g.clone();
  }
  const double norm = std::sqrt(sq);
  ASSERT_GT(norm, 10.0);
  const double want = torch::nn::utils::clip_grad_norm_(ref, 1.0);
  const double got = grpo::clip_grad_norm(ours, 1.0);
  EXPECT_NEAR(got, norm, 1e-5 * norm);
  EXPECT_NEAR(want, norm, 1e-5 * norm);
  double after = 0;
  for (size_t i = 0; i + 1 < kShapes.size(); ++i) {
    EXPECT_LE(max_abs(ours[i].grad(), ref[i].grad()), 1e-6);
    after += ours[i].grad().cpu().to(at::kDouble).square().sum().item<double>();
  }
  EXPECT_NEAR(std::sqrt(after), 1.0, 1e-5);
  std::vector<at::Tensor> kept;
  for (size_t i = 0; i + 1 < kShapes.size(); ++i) kept.push_back(ours[i].grad().clone());
  EXPECT_NEAR(grpo::clip_grad_norm(ours, 1e3), 1.0, 1e-5);
  for (size_t i = 0; i + 1 < kShapes.size(); ++i) EXPECT_TRUE(ours[i].grad().equal(kept[i]));
}

}  // namespace brl::test
