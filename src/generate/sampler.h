// Picking one token from one row of logits: greedy at temperature 0, else temperature,
// top-k, top-p (nucleus) over the renormalized top-k distribution, then min-p (tokens under
// min_p times the top token's probability dropped), as HF's warpers chain them. The draw u
// picks by inverse CDF over the vocabulary in id order (temperature and min-p only) or over the
// top-k / top-p candidates sorted by probability, ties by id. Torch-free and given its uniform
// draw, so it is deterministic and testable. The repetition penalty (HF's
// RepetitionPenaltyLogitsProcessor) changes the logits before all of them, greedy included.
#pragma once

#include <cstdint>
#include <vector>

namespace brl::gen {

struct SamplerConfig {
  double temperature = 1.0;         // 0: greedy
  int64_t top_k = 0;                // 0: off
  double top_p = 1.0;               // 1: off
  double min_p = 0.0;               // 0: off
  double repetition_penalty = 1.0;  // 1: off; > 1 discourages tokens already in prompt or completion
};

// logits [V]; u uniform in [0, 1). Returns the token id. The repetition penalty is the
// caller's (apply_repetition_penalty on the row first).
int64_t sample_row(const float* logits, int64_t vocab, const SamplerConfig& cfg, double u);

// HF's repetition penalty on one row of logits: each of `tokens` (distinct ids) has its logit
// divided by `penalty` where positive, multiplied where negative.
void apply_repetition_penalty(float* logits, const std::vector<int32_t>& tokens, double penalty);

}  // namespace brl::gen
