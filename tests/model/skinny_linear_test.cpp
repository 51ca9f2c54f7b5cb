// skinny_linear (few-row linear) against a double-precision x W^T + b, for every instruction set
// this CPU runs, over odd shapes (K not a multiple of any vector width, N odd, every row count
// 1..16), in F32 and BF16 (the reference from the same BF16 values, within BF16's rounding of
// the result), plus when it applies and that fast_linear falls back otherwise.
#include "model/skinny_linear.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

using namespace brl::model;

namespace {
const int kThreads = brl::test::init_threads();

// Largest |got - want| / bound over all outputs, where want is computed in double and
// bound = 1e-5 * sum_k |x[m, k] w[n, k]| + 1e-6 |b[n]| (+ the smallest normal, for all-zero
// rows). F32 accumulation in another order stays far below this; a wrong or missing term
// (one x*w product, the bias, the K tail) is of the order of the whole bound or more.
double worst_ratio(const at::Tensor& got, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  auto xd = x.to(at::kDouble), wd = w.to(at::kDouble);
  auto want = at::matmul(xd, wd.t());
  auto bound = at::matmul(xd.abs(), wd.abs().t()) * 1e-5 + 1e-30;
  if (b.defined()) {
    want = want + b.to(at::kDouble);
    bound = bound + b.to(at::kDouble).abs() * 1e-6;
  }
  EXPECT_EQ(got.sizes(), want.sizes());
  return ((got.to(at::kDouble) - want).abs() / bound).max().item<double>();
}

std::vector<SkinnyIsa> isas_here() {
  std::vector<SkinnyIsa> out;
  for (auto i : {SkinnyIsa::kGeneric, SkinnyIsa::kAvx2, SkinnyIsa::kAvx512})
    if (skinny_isa_supported(i)) out.push_back(i);
  return out;
}
}  // namespace

TEST(SkinnyLinear, MatchesDoubleReferenceOnOddShapes) {
  at::manual_seed(11);
  for (auto isa : isas_here()) {
    for (int64_t K : {1, 3, 7, 15, 16, 17, 31, 33, 100, 257}) {
      for (int64_t N : {1, 2, 3, 17, 64, 67}) {
        auto w = at::randn({N, K});
        auto b = at::randn({N});
        for (int64_t M = 1; M <= kSkinnyMaxRows; ++M) {
          auto x = at::randn({M, K});
          for (bool bias : {false, true}) {
            auto bb = bias ? b : at::Tensor();
            auto y = skinny_linear(x, w, bb, isa);
            EXPECT_LE(worst_ratio(y, x, w, bb), 1.0)
                << "isa " << int(isa) << " M " << M << " K " << K << " N " << N << " bias " << bias;
          }
        }
      }
    }
  }
}

namespace {
// BF16: the double reference of the same BF16 inputs, then the result's own rounding: half an
// ulp of BF16 (at most 2^-8 of the value) plus F32 summation's 1e-5 of sum |x w|. A wrong widening of a
// weight (a byte off, the wrong half) is of the order of the whole result.
double worst_ratio_bf16(const at::Tensor& got, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  EXPECT_EQ(got.scalar_type(), at::kBFloat16);
  auto xd = x.to(at::kDouble), wd = w.to(at::kDouble);
  auto want = at::matmul(xd, wd.t());
  if (b.defined()) want = want + b.to(at::kDouble);
  auto bound = want.abs() * std::ldexp(1.0, -8) + at::matmul(xd.abs(), wd.abs().t()) * 1e-5 + 1e-30;
  EXPECT_EQ(got.sizes(), want.sizes());
  return ((got.to(at::kDouble) - want).abs() / bound).max().item<double>();
}
}  // namespace

TEST(SkinnyLinear, Bf16MatchesDoubleReference) {
  at::manual_seed(15);
  for (auto isa : isas_here()) {
    for (auto [K, N] : {std::pair<int64_t, int64_t>{1, 3}, {7, 2}, {17, 67}, {33, 5}, {257, 17}, {896, 4099}}) {
      auto w = at::randn({N, K}).to(at::kBFloat16);
      auto b = at::randn({N}).to(at::kBFloat16);
      for (int64_t M = 1; M <= kSkinnyMaxRowsBf16; ++M) {
        auto x = at::randn({M, K}).to(at::kBFloat16);
        for (bool bias : {false, true}) {
          auto bb = bias ? b : at::Tensor();
          EXPECT_LE(worst_ratio_bf16(skinny_linear(x, w, bb, isa), x, w, bb), 1.0)
              << "isa " << int(isa) << " M " << M << " K " << K << " N " << N << " bias " << bias;
        }
      }
    }
  }
}

TEST(SkinnyLinear, DecodeShapesAcrossThreads) {
  // Big enough that parallel_for splits N over threads at odd boundaries.
  at::manual_seed(12);
  for (auto isa : isas_here()) {
    for (auto [K, N] : {std::pair<int64_t, int64_t>{896, 4099}, {4864, 131}, {512, 5001}}) {
      auto w = at::randn({N, K}) * 0.02;
      auto b = at::randn({N});
      for (int64_t M : {1, 8, 16}) {
        auto x = at::randn({M, K});
        EXPECT_LE(worst_ratio(skinny_linear(x, w, b, isa), x, w, b), 1.0)
            << "isa " << int(isa) << " M " << M << " K " << K << " N " << N;
      }
    }
  }
}

TEST(SkinnyLinear, LeadingDimsAndStridedInput) {
  at::manual_seed(13);
  auto w = at::randn({9, 20});
  auto b = at::randn({9});
  auto x = at::randn({2, 3, 20});
  auto y = skinny_linear(x, w, b);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 3, 9}));
  EXPECT_LE(worst_ratio(y.view({6, 9}), x.view({6, 20}), w, b), 1.0);
  auto xt = at::randn({20, 5}).t();  // [5, 20], not contiguous
  ASSERT_FALSE(xt.is_contiguous());
  EXPECT_LE(worst_ratio(skinny_linear(xt, w, b), xt, w, b), 1.0);
}

TEST(SkinnyLinear, AppliesOnlyWhereNoAutogradAndFewRows) {
  auto w = at::randn({4, 8});
  auto b = at::randn({4});
  EXPECT_TRUE(skinny_linear_applies(at::randn({16, 8}), w, b));
  EXPECT_FALSE(skinny_linear_applies(at::randn({17, 8}), w, b));    // too many rows
  EXPECT_FALSE(skinny_linear_applies(at::randn({2, 9, 8}), w, b));  // 18 rows
  EXPECT_TRUE(skinny_linear_applies(at::randn({4, 8}).to(at::kBFloat16), w.to(at::kBFloat16), b.to(at::kBFloat16)));
  EXPECT_FALSE(skinny_linear_applies(at::randn({5, 8}).to(at::kBFloat16), w.to(at::kBFloat16), {}));  // ATen's
  EXPECT_FALSE(skinny_linear_applies(at::randn({2, 8}), w.to(at::kBFloat16), {}));                    // dtypes differ
  EXPECT_FALSE(skinny_linear_applies(at::randn({2, 8}).to(at::kBFloat16), w.to(at::kBFloat16), b));
  EXPECT_FALSE(skinny_linear_applies(at::randn({2, 8}).to(at::kHalf), w.to(at::kHalf), {}));
  EXPECT_FALSE(skinny_linear_applies(at::randn({2, 8}), at::randn({8, 4}).t(), {}));  // W strided
  EXPECT_FALSE(skinny_linear_applies(at::randn({2, 7}), w, b));                       // K mismatch
  auto wg = w.clone().set_requires_grad(true);
  EXPECT_FALSE(skinny_linear_applies(at::randn({2, 8}), wg, b));  // gradient wanted
  {
    at::NoGradGuard no_grad;  // generation: nothing recorded
    EXPECT_TRUE(skinny_linear_applies(at::randn({2, 8}), wg, b));
  }
}

TEST(SkinnyLinear, FastLinearFallsBackAndKeepsGradients) {
  at::manual_seed(14);
  auto w = at::randn({5, 8});
  auto b = at::randn({5});
  auto x = at::randn({40, 8});  // too many rows: at::linear itself
  EXPECT_TRUE(at::equal(fast_linear(x, w, b), at::linear(x, w, b)));
  auto wg = w.clone().set_requires_grad(true);
  auto y = fast_linear(at::randn({2, 8}), wg, b);  // at::linear: records the graph
  EXPECT_TRUE(y.requires_grad());
  y.sum().backward();
  EXPECT_TRUE(wg.grad().defined());
}
