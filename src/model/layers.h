// The small stateless pieces of the decoder: RMSNorm and rotary position embeddings (RoPE,
// HF's rotate-half layout, optionally on only the first n_rot dims of each head).
#pragma once

#include <torch/types.h>

namespace brl::model {

// x [..., C] * rsqrt(mean(x^2) + eps) * weight [C]; computed in f32 for low-precision x (on a
// GPU in one fused kernel each way).
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

struct RopeCosSin {
  torch::Tensor cos, sin;  // [B, T, 1, n_rot] (broadcast over heads); sin's first half negated
};
// positions [B, T] int64 -> cos/sin of position * theta^(-2i/n_rot), each half repeated (sin's
// first half negated, as apply_rope takes it).
RopeCosSin rope_cos_sin(const torch::Tensor& positions, int64_t n_rot, double theta, torch::ScalarType dtype);
// x [B, T, H, D]: rotate the first n_rot dims of each head (rotate-half pairs i, i + n_rot/2).
torch::Tensor apply_rope(const torch::Tensor& x, const RopeCosSin& cs);

}  // namespace brl::model
