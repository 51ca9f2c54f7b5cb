// sample_row's rule for a whole batch as tensor operations, so that sampling runs where the
// logits are (the GPU) without a copy to the host or a synchronisation per token: one uniform
// draw per row picks by inverse CDF, over the vocabulary in id order (plain temperature), or
// over the top-k / nucleus candidates sorted by probability (ties by id), as sample_row does.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

#include "generate/sampler.h"

namespace brl::gen {

// logits [B, V] f32, u [B] f64 uniforms in [0, 1) (on the logits' device) -> the tokens [B]
// int64 and their log-probabilities [B] f32: log_softmax(logits / T) at the token (T = 1 when
// greedy), before the repetition penalty, top-k, top-p and min-p, as Completion::logprobs.
// seen [B, V] bool: the tokens cfg.repetition_penalty applies to (each row's prompt and
// completion so far); needed when the penalty is not 1, unused otherwise.
std::pair<at::Tensor, at::Tensor> sample_rows(const at::Tensor& logits, const at::Tensor& u, const SamplerConfig& cfg,
                                              const at::Tensor& seen = {});

}  // namespace brl::gen
