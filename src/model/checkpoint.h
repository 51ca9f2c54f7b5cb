// Activation checkpointing (transformers' gradient_checkpointing, torch.utils.checkpoint with
// use_reentrant=True): fn runs without keeping its activations; backward runs it again, with
// the random number generator of x's device set as it was (LoRA dropout draws the same masks),
// and back-propagates through the recomputation. Memory: x instead of everything fn saved;
// time: one more forward of fn.
#pragma once

#include <torch/types.h>

#include <functional>

namespace brl::model {

// fn must be deterministic given the generator's state, and must not change what it captures
// before backward. Gradients reach x and every tensor fn reads that requires grad (LoRA
// factors, trainable weights), even when x itself does not require grad.
torch::Tensor checkpoint(std::function<torch::Tensor(const torch::Tensor&)> fn, const torch::Tensor& x);

}  // namespace brl::model
