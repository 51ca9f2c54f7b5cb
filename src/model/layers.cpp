// RMSNorm and RoPE.
#include "model/layers.h"

#include <ATen/ATen.h>

namespace brl::model {

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  // On the GPU ATen's fused kernel (torch.nn.RMSNorm's): one pass forward and one backward,
  // keeping only x and the [..., 1] rstd for backward, where the ops below launch ~7 kernels
  // forward and ~12 backward per norm and keep an f32 copy of x (49 norms in a 0.5B step). It
  // rounds once, after the weight; HF and the CPU path also round before it: within a bf16 ulp.
  if (x.is_cuda() && weight.scalar_type() == x.scalar_type()) return at::rms_norm(x, {x.size(-1)}, weight, eps);
  if (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble) {
    auto r = at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps);  // [..., 1]
    return x * r * weight;
  }
  auto xf = x.to(at::kFloat);
  auto r = at::rsqrt(xf.pow(2).mean(-1, true) + eps);
  return (xf * r).to(x.scalar_type()) * weight;
}

RopeCosSin rope_cos_sin(const torch::Tensor& positions, int64_t n_rot, double theta, torch::ScalarType dtype) {
  auto opts = at::TensorOptions().dtype(at::kFloat).device(positions.device());
  // inv_freq[i] = 1 / theta^(2i / n_rot), i < n_rot/2, in f32 as HF computes it.
  auto idx = at::arange(0, n_rot, 2, opts);
  auto inv_freq = 1.0 / at::pow(theta, idx / static_cast<double>(n_rot));  // [n_rot/2]
  auto freqs = positions.to(at::kFloat).unsqueeze(-1) * inv_freq;          // [B, T, n_rot/2]
  auto emb = at::cat({freqs, freqs}, -1).unsqueeze(2);                     // [B, T, 1, n_rot]
  // sin with its first half negated: rotate_half(x) * sin == roll(x, n_rot/2) * this, bit for bit.
  auto sin = emb.sin();
  sin.narrow(-1, 0, n_rot / 2).neg_();
  return {emb.cos().to(dtype), sin.to(dtype)};
}

torch::Tensor apply_rope(const torch::Tensor& x, const RopeCosSin& cs) {
  const int64_t D = x.size(-1), R = cs.cos.size(-1);
  auto rot = R == D ? x : x.narrow(-1, 0, R);  // [B, T, H, R]
  // HF's rotate_half, cat(-x2, x1), as one roll with the sign in cs.sin: one kernel instead of
  // a negation and a concatenation each way (q and k of every layer, forward and backward).
  auto out = rot * cs.cos + at::roll(rot, R / 2, -1) * cs.sin;
  if (R == D) return out;
  return at::cat({out, x.narrow(-1, R, D - R)}, -1);  // pass-through dims unchanged
}

}  // namespace brl::model
