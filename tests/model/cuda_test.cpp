// The CUDA half of libtorch, where a GPU exists: the device list, and our linear (fast_linear,
// the CPU path the model uses) against cuBLAS on the GPU in fp32, RMSNorm's fused GPU kernels
// against the CPU's ops, bf16 token log-probs against f64. Without a GPU every test here skips,
// saying so, and the executable reports Skipped (tests/test_main.cpp); CI allows that for tests
// named *cuda* only (.ci/run). The model on the GPU: generate_cuda_test, trainer_cuda_test.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/function.h>

#include "../cuda_util.h"
#include "logprobs_check.h"
#include "model/device.h"
#include "model/layers.h"
#include "model/skinny_linear.h"

using namespace brl::model;

TEST(Cuda, DevicesListed) {
  REQUIRE_GPU();
  auto d = cuda_devices();
  ASSERT_FALSE(d.empty());
  EXPECT_FALSE(d[0].name.empty());
  EXPECT_GT(d[0].total_memory, int64_t(1) << 30);
  EXPECT_GE(d[0].major, 7) << "libtorch 2.11's CUDA 13 build needs compute capability >= 7.5";
}

TEST(Cuda, LinearMatchesCpu) {
  REQUIRE_GPU();
  at::manual_seed(3);
  // Odd sizes (no multiple of a tile) and a few-row case that takes the CPU's skinny path.
  for (int64_t rows : {3, 67}) {
    auto x = at::randn({rows, 263}), w = at::randn({129, 263}), b = at::randn({129});
    auto cpu = fast_linear(x, w, b);
    at::globalContext().setAllowTF32CuBLAS(false);  // fp32 products, not TF32's 10-bit mantissa
    auto gpu = at::linear(x.cuda(), w.cuda(), b.cuda()).cpu();
    double rel = (gpu - cpu).abs().max().item<double>() / cpu.abs().max().item<double>();
    EXPECT_LT(rel, 1e-5) << rows << " rows";
  }
}

// rms_norm on the GPU takes ATen's fused kernels (one forward, one backward node) and equals the
// CPU's composite ops: forward and both gradients, f32 to rounding, bf16 within about one bf16
// ulp of the largest value (the fused kernel rounds once, after the weight; the CPU before it).
TEST(Cuda, RmsNormFusedMatchesCpu) {
  REQUIRE_GPU();
  at::manual_seed(5);
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    const double tol = dt == at::kFloat ? 1e-5 : 1.6e-2;
    auto x0 = at::randn({3, 11, 2, 96}).to(dt), w0 = (1 + 0.1 * at::randn({96})).to(dt), g = at::randn({3, 11, 2, 96});
    auto run = [&](at::Device d) {
      auto x = x0.to(d).requires_grad_(), w = w0.to(d).requires_grad_();
      auto y = rms_norm(x, w, 1e-6);
      (y.to(at::kFloat) * g.to(d)).sum().backward();
      return std::tuple(y, x.grad(), w.grad());
    };
    auto [yc, dxc, dwc] = run(at::kCPU);
    auto [yg, dxg, dwg] = run(at::kCUDA);
    EXPECT_NE(yg.grad_fn()->name().find("FusedRmsNorm"), std::string::npos) << yg.grad_fn()->name();
    auto rel = [](const at::Tensor& a, const at::Tensor& b) {
      return (a.cpu().to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>() /
             b.to(at::kFloat).abs().max().item<double>();
    };
    EXPECT_LT(rel(yg, yc), tol) << dt;
    EXPECT_LT(rel(dxg, dxc), tol) << dt;
    EXPECT_LT(rel(dwg, dwc), tol) << dt;
  }
}

// The LM head's log-probs over a bf16 base on the GPU, whose kept softmax is written by exp and
// scatter straight into bf16 (the CPU goes through f32): against f64 as on the CPU.
TEST(Cuda, Bf16TokenLogprobsMatchF64) {
  REQUIRE_GPU();
  brl::test::expect_bf16_token_logprobs_match_f64(at::kCUDA);
}

// The entropy with its gradient (the entropy bonus) on the GPU, f64, against the CPU's autograd.
TEST(Cuda, EntropyGradientMatchesAutograd) {
  REQUIRE_GPU();
  brl::test::expect_entropy_grad_matches_autograd(at::kCUDA);
}
