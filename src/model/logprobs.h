// Log-probabilities of chosen tokens under the LM head, chunk_tokens rows at a time: at a
// 150k vocabulary the logits of a GRPO batch can be gigabytes. When a gradient will be needed
// and the softmax [N, V] fits in keep_bytes, forward keeps it and backward uses it (no
// recompute: the LM head's products drop from 3 to 2 per row, a third of a small model's
// step, at 0.6 GB for 1024 rows of a 152k vocabulary; over a bf16 base it is kept in bf16 as
// softmax - onehot(target), so backward is one product per chunk); otherwise forward keeps only the
// log-sum-exp per row and backward recomputes each chunk's logits (as fused
// linear-cross-entropy kernels do), so peak memory is one chunk of [chunk_tokens, V].
#pragma once

#include <torch/types.h>

namespace brl::model {

inline constexpr int64_t kKeepSoftmaxBytes = int64_t{1} << 30;
inline constexpr int64_t kChunkTokens = 128;  // rows of logits per chunk when the softmax is not kept
// On a GPU: chunks of 2048 rows (fewer launches, products wide enough for the tensor cores) and
// the softmax kept when it fits a quarter of the device's free memory (Model::token_logprobs).
inline constexpr int64_t kChunkTokensCuda = 2048;

// hidden [..., C], weight [V, C], targets [...] int64 -> log softmax(hidden W^T / T)[target]
// with shape [...]. Gradients flow to hidden and (when it requires grad) weight.
// entropy (optional): set to the Shannon entropy (nats) of each row's softmax at the same
// temperature, shape [...], detached (TRL's entropy_from_logits, for top_entropy_quantile);
// one more elementwise pass over each chunk's [n, V], no more products. entropy_grad: the
// entropy carries its gradient too (TRL's entropy bonus); the softmax is then kept in f32
// within keep_bytes, else backward recomputes each chunk.
torch::Tensor chunked_token_logprobs(const torch::Tensor& hidden, const torch::Tensor& weight,
                                     const torch::Tensor& targets, double temperature = 1.0,
                                     int64_t chunk_tokens = kChunkTokens, int64_t keep_bytes = kKeepSoftmaxBytes,
                                     torch::Tensor* entropy = nullptr, bool entropy_grad = false);

}  // namespace brl::model
