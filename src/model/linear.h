// The projection used for every q/k/v/o/gate/up/down: a frozen (or trainable) base weight
// [out, in] with optional bias, and an optional LoRA slot applied as
//   y = x W^T + b + scale * (dropout(x) A^T) B^T
// when the slot is filled AND the owning model's adapters are enabled (switch them off for
// the reference-policy forward pass of GRPO's KL term). src/lora fills the slots.
#pragma once

#include <torch/types.h>

#include <optional>

namespace brl::model {

struct LoraSlot {
  // A and B may be f32 over a low-precision base (trained adapters): the branch then runs in f32.
  torch::Tensor A;       // [r, in]
  torch::Tensor B;       // [out, r]
  double scale = 1.0;    // lora_alpha / r (or / sqrt(r) with rslora)
  double dropout = 0.0;  // on the LoRA branch's input, training mode only
};

struct Linear {
  torch::Tensor weight;  // [out, in]
  torch::Tensor bias;    // [out] or undefined
  std::optional<LoraSlot> lora;

  int64_t in_features() const { return weight.size(1); }
  int64_t out_features() const { return weight.size(0); }
  // x [..., in] -> [..., out]. lora_x (optional): x's rows in the adapter's dtype, shared by the
  // projections of one input (q, k, v; gate, up): cast here if undefined, reused if defined.
  torch::Tensor forward(const torch::Tensor& x, bool adapters_enabled, bool training,
                        torch::Tensor* lora_x = nullptr) const;
};

}  // namespace brl::model
