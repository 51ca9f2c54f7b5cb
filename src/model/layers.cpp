// RMSNorm and RoPE.
#include "model/layers.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <numbers>

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

namespace {
// 1 / theta^(2i / n_rot), i < n_rot/2, in f32 as HF computes it.
torch::Tensor default_inv_freq(int64_t n_rot, double theta, c10::Device device) {
  auto idx = at::arange(0, n_rot, 2, at::TensorOptions().dtype(at::kFloat).device(device));
  return 1.0 / at::pow(theta, idx / static_cast<double>(n_rot));
}

// YaRN's mscale (its paper's eq. 21), as transformers' yarn_get_mscale.
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }
}  // namespace

// The scalings follow transformers' modeling_rope_utils op for op (a Python float against an f32
// tensor computes in f32, as a double Scalar does here), so the frequencies are its bits.
RopeFrequencies rope_frequencies(const ModelConfig& config, c10::Device device) {
  const RopeScaling& r = config.rope_scaling;
  const int64_t dim = config.n_rot();
  RopeFrequencies f;
  f.inv_freq = default_inv_freq(dim, config.rope_theta, device);
  if (r.type == "linear") {
    f.inv_freq = f.inv_freq / r.factor;
  } else if (r.type == "llama3") {
    // Wavelengths shorter than the pretraining context / high_freq_factor keep their frequency,
    // longer than context / low_freq_factor are divided by factor, those between are blended.
    const double ctx = static_cast<double>(r.original_max_position_embeddings);
    const double low_wavelen = ctx / r.low_freq_factor, high_wavelen = ctx / r.high_freq_factor;
    auto wavelen = at::reciprocal(f.inv_freq) * (2 * std::numbers::pi);  // Python's scalar / tensor
    auto scaled = at::where(wavelen > low_wavelen, f.inv_freq / r.factor, f.inv_freq);
    auto smooth = (at::reciprocal(wavelen) * ctx - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    auto smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
    auto medium = at::logical_not(wavelen < high_wavelen).mul(at::logical_not(wavelen > low_wavelen));
    f.inv_freq = at::where(medium, smoothed, scaled);
  } else if (r.type == "yarn") {
    const double base = config.rope_theta, ctx = static_cast<double>(r.original_max_position_embeddings);
    // The dimension that turns n times over the pretraining context, rounded outwards.
    auto correction_dim = [&](double n) {
      return dim * std::log(ctx / (n * 2 * std::numbers::pi)) / (2 * std::log(base));
    };
    double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
    if (r.truncate) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0), high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;
    auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
    auto pos_freqs = at::pow(base, at::arange(0, dim, 2, opts) / static_cast<double>(dim));
    auto extrapolation = at::reciprocal(pos_freqs);
    auto interpolation = at::reciprocal(r.factor * pos_freqs);
    auto ramp = ((at::arange(dim / 2, opts) - low) / (high - low)).clamp(0, 1);
    auto extrapolation_factor = 1 - ramp;
    f.inv_freq = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
    if (r.attention_factor) f.attention_factor = *r.attention_factor;
    else if (r.mscale.value_or(0) != 0 && r.mscale_all_dim.value_or(0) != 0)
      f.attention_factor = yarn_mscale(r.factor, *r.mscale) / yarn_mscale(r.factor, *r.mscale_all_dim);
    else f.attention_factor = yarn_mscale(r.factor, 1.0);
  }
  return f;
}

RopeCosSin rope_cos_sin(const torch::Tensor& positions, const RopeFrequencies& f, torch::ScalarType dtype) {
  const int64_t half = f.inv_freq.size(0);
  auto freqs = positions.to(at::kFloat).unsqueeze(-1) * f.inv_freq;  // [B, T, n_rot/2]
  auto emb = at::cat({freqs, freqs}, -1).unsqueeze(2);               // [B, T, 1, n_rot]
  auto cos = emb.cos();
  // sin with its first half negated: rotate_half(x) * sin == roll(x, n_rot/2) * this, bit for bit.
  auto sin = emb.sin();
  sin.narrow(-1, 0, half).neg_();
  if (f.attention_factor != 1.0) cos.mul_(f.attention_factor), sin.mul_(f.attention_factor);
  return {cos.to(dtype), sin.to(dtype)};
}

RopeCosSin rope_cos_sin(const torch::Tensor& positions, int64_t n_rot, double theta, torch::ScalarType dtype) {
  return rope_cos_sin(positions, RopeFrequencies{default_inv_freq(n_rot, theta, positions.device())}, dtype);
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
