// The optimizer step over many small tensors in a few kernels, as PyTorch's Python optimizers do
// by default (foreach / fused): libtorch's C++ AdamW and clip_grad_norm_ loop over the tensors
// with ~9 and 2 ops each, which on a GPU is one kernel launch per op per tensor (an adapter on
// every linear module of a 24-layer model has 336 tensors: ~3,700 launches a step).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace torch::optim {
class AdamW;
}

namespace brl::grpo {

// torch.nn.utils.clip_grad_norm_(params, max_norm) (L2, foreach): scales the gradients by
// min(1, max_norm / (norm + 1e-6)) in place and returns the total norm before clipping.
// Parameters without a gradient are skipped; 0 when none has one.
double clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

// One step of `opt` (torch.optim.AdamW(fused=True)'s kernel, ATen's _fused_adamw_) over every
// parameter with a gradient. The state stays in opt's own per-parameter states (step count,
// exp_avg, exp_avg_sq, created on first use as opt.step() would), so serialising `opt` and
// everything that reads its state are unchanged. Falls back to opt.step() for amsgrad.
void fused_adamw_step(torch::optim::AdamW& opt);

}  // namespace brl::grpo
