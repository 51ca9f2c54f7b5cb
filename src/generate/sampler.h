// Picking one token from one row of logits: greedy at temperature 0, else temperature,
// top-k, then top-p (nucleus) over the renormalized top-k distribution, as HF's warpers
// chain them. The draw u picks by inverse CDF over the vocabulary in id order (temperature
// only) or over the top-k / top-p candidates sorted by probability, ties by id. Torch-free
// and given its uniform draw, so it is deterministic and testable.
#pragma once

#include <cstdint>

namespace brl::gen {

struct SamplerConfig {
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
};

// logits [V]; u uniform in [0, 1). Returns the token id.
int64_t sample_row(const float* logits, int64_t vocab, const SamplerConfig& cfg, double u);

}  // namespace brl::gen
