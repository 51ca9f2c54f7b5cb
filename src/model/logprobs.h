// Log-probabilities of chosen tokens under the LM head without the [N, V] logits tensor:
// at a 150k vocabulary the logits of a GRPO batch are gigabytes. Forward keeps only the
// log-sum-exp per row; backward recomputes each chunk's logits (as fused linear-cross-entropy
// kernels do), so peak memory is one chunk of [chunk_tokens, V].
#pragma once

#include <torch/types.h>

namespace brl::model {

// hidden [..., C], weight [V, C], targets [...] int64 -> log softmax(hidden W^T / T)[target]
// with shape [...]. Gradients flow to hidden and (when it requires grad) weight.
torch::Tensor chunked_token_logprobs(const torch::Tensor& hidden, const torch::Tensor& weight,
                                     const torch::Tensor& targets, double temperature = 1.0,
                                     int64_t chunk_tokens = 128);

}  // namespace brl::model
