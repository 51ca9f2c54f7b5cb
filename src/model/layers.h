// The small stateless pieces of the decoder: RMSNorm and rotary position embeddings (RoPE,
// HF's rotate-half layout, optionally on only the first n_rot dims of each head).
#pragma once

#include <torch/types.h>

#include "model/config.h"

namespace brl::model {

// x [..., C] * rsqrt(mean(x^2) + eps) * weight [C]; computed in f32 for low-precision x (on a
// GPU in one fused kernel each way).
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

struct RopeCosSin {
  torch::Tensor cos, sin;  // [B, T, 1, n_rot] (broadcast over heads); sin's first half negated
};
struct RopeFrequencies {
  torch::Tensor inv_freq;         // [n_rot/2] f32
  double attention_factor = 1.0;  // cos and sin scaled by it (YaRN's; 1 otherwise)
};
// The config's RoPE frequencies on `device`, with the ops and f32 rounding of transformers'
// rope init functions (default: theta^(-2i/n_rot); linear; llama3; yarn). Computed there rather
// than copied from the host, so a forward captured as a CUDA graph holds no host copy.
RopeFrequencies rope_frequencies(const ModelConfig& config, c10::Device device);
// positions [B, T] int64 -> cos/sin of position * inv_freq, each half repeated (sin's first half
// negated, as apply_rope takes it), times attention_factor.
RopeCosSin rope_cos_sin(const torch::Tensor& positions, const RopeFrequencies& f, torch::ScalarType dtype);
// Plain RoPE: rope_cos_sin with inv_freq = theta^(-2i/n_rot).
RopeCosSin rope_cos_sin(const torch::Tensor& positions, int64_t n_rot, double theta, torch::ScalarType dtype);
// x [B, T, H, D]: rotate the first n_rot dims of each head (rotate-half pairs i, i + n_rot/2).
torch::Tensor apply_rope(const torch::Tensor& x, const RopeCosSin& cs);

}  // namespace brl::model
