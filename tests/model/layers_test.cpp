// RMSNorm and RoPE against formulas worked out by hand on tiny inputs.
#include "model/layers.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

using namespace brl::model;

TEST(RmsNorm, HandDerived) {
  auto x = at::tensor({3.0f, 4.0f}).view({1, 2});
  auto w = at::tensor({1.0f, 2.0f});
  auto y = rms_norm(x, w, 0.0);
  const double r = std::sqrt((9.0 + 16.0) / 2.0);
  EXPECT_NEAR(y[0][0].item<float>(), 3.0 / r, 1e-6);
  EXPECT_NEAR(y[0][1].item<float>(), 8.0 / r, 1e-6);
  // eps enters under the square root: x = [1, 1], eps = 3 -> 1 / sqrt(4).
  auto z = rms_norm(at::ones({1, 2}), at::ones({2}), 3.0);
  EXPECT_NEAR(z[0][1].item<float>(), 0.5, 1e-6);
  // bf16 input is normalized in f32 and returned as bf16.
  auto zb = rms_norm(x.to(at::kBFloat16), w.to(at::kBFloat16), 0.0);
  EXPECT_EQ(zb.scalar_type(), at::kBFloat16);
  EXPECT_NEAR(zb[0][1].item<float>(), 8.0 / r, 2e-2);
}

TEST(Rope, HandDerivedFullAndPartial) {
  // head_dim 4, theta 10000: pairs (0,2) rotate at frequency 1, (1,3) at 10000^(-1/2) = 0.01.
  auto x = at::tensor({0.3f, -1.2f, 0.7f, 2.0f}).view({1, 1, 1, 4});
  auto pos = at::full({1, 1}, 2, at::kLong);
  auto y = apply_rope(x, rope_cos_sin(pos, 4, 10000.0, at::kFloat)).view({4});
  const double a = 2.0, b = 0.02;
  EXPECT_NEAR(y[0].item<float>(), 0.3 * std::cos(a) - 0.7 * std::sin(a), 1e-6);
  EXPECT_NEAR(y[2].item<float>(), 0.7 * std::cos(a) + 0.3 * std::sin(a), 1e-6);
  EXPECT_NEAR(y[1].item<float>(), -1.2 * std::cos(b) - 2.0 * std::sin(b), 1e-6);
  EXPECT_NEAR(y[3].item<float>(), 2.0 * std::cos(b) + -1.2 * std::sin(b), 1e-6);

  // Partial rotary: head_dim 6, n_rot 4 -> the last 2 dims pass through unchanged.
  auto x6 = at::tensor({0.3f, -1.2f, 0.7f, 2.0f, 5.0f, -6.0f}).view({1, 1, 1, 6});
  auto y6 = apply_rope(x6, rope_cos_sin(pos, 4, 10000.0, at::kFloat)).view({6});
  EXPECT_TRUE(at::allclose(y6.narrow(0, 0, 4), y, 1e-6, 1e-6));
  EXPECT_EQ(y6[4].item<float>(), 5.0f);
  EXPECT_EQ(y6[5].item<float>(), -6.0f);
}

// The defining property: <rope(q, m), rope(k, n)> depends only on m - n.
TEST(Rope, DotProductDependsOnlyOnOffset) {
  at::manual_seed(1);
  auto q = at::randn({1, 1, 1, 8}, at::kDouble), k = at::randn({1, 1, 1, 8}, at::kDouble);
  auto dot = [&](int64_t m, int64_t n) {
    auto cm = rope_cos_sin(at::full({1, 1}, m, at::kLong), 8, 500.0, at::kDouble);
    auto cn = rope_cos_sin(at::full({1, 1}, n, at::kLong), 8, 500.0, at::kDouble);
    return (apply_rope(q, cm) * apply_rope(k, cn)).sum().item<double>();
  };
  EXPECT_NEAR(dot(5, 2), dot(103, 100), 1e-4);  // angles are computed in f32, as HF does
  EXPECT_NEAR(dot(0, 7), dot(20, 27), 1e-4);
  EXPECT_GT(std::abs(dot(5, 2) - dot(5, 3)), 1e-2);  // and it does depend on the offset
}

// apply_rope rolls x by n_rot/2 against a sin whose first half is negated: the same bits as HF's
// x * cos + rotate_half(x) * sin (written out here as transformers' apply_rotary_pos_emb has
// it), forward and backward, in f32 and bf16, full and partial rotary.
TEST(Rope, RollEqualsHfRotateHalfBitForBit) {
  at::manual_seed(2);
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    for (int64_t R : {8, 4}) {
      const int64_t D = 8;
      auto pos = at::randint(0, 500, {2, 5}, at::kLong);
      auto inv_freq = 1.0 / at::pow(10000.0, at::arange(0, R, 2, at::kFloat) / static_cast<double>(R));
      auto freqs = pos.to(at::kFloat).unsqueeze(-1) * inv_freq;
      auto emb = at::cat({freqs, freqs}, -1).unsqueeze(2);
      auto cos = emb.cos().to(dt), sin = emb.sin().to(dt);
      auto x0 = at::randn({2, 5, 3, D}).to(dt), g = at::randn({2, 5, 3, D}).to(dt);
      auto hf = [&](const at::Tensor& x) {
        auto rot = x.narrow(-1, 0, R);
        auto x1 = rot.narrow(-1, 0, R / 2), x2 = rot.narrow(-1, R / 2, R / 2);
        auto out = rot * cos + at::cat({-x2, x1}, -1) * sin;
        return R == D ? out : at::cat({out, x.narrow(-1, R, D - R)}, -1);
      };
      auto xa = x0.clone().requires_grad_(), xb = x0.clone().requires_grad_();
      auto ya = apply_rope(xa, rope_cos_sin(pos, R, 10000.0, dt)), yb = hf(xb);
      EXPECT_TRUE(at::equal(ya, yb)) << dt << " n_rot " << R;
      (ya * g).sum().backward();
      (yb * g).sum().backward();
      EXPECT_TRUE(at::equal(xa.grad(), xb.grad())) << dt << " n_rot " << R;
    }
  }
}
