// KV cache for batched generation: preallocated per layer [B, n_kv_heads, T_max, head_dim],
// written in place (no concatenation per step). All rows share one fill length: prompts of
// different lengths are left-padded so that they end together, and `valid` marks the slots
// that hold real tokens. Rows can be dropped (finished sequences) or replicated (one prompt
// prefilled once, then G completions) with keep_rows.
#pragma once

#include <torch/types.h>

#include <vector>

#include "model/config.h"

namespace brl::model {

struct KvCache {
  std::vector<torch::Tensor> k, v;  // per layer [B, n_kv, T_max, head_dim]
  torch::Tensor valid;              // [B, T_max] bool: slot holds a non-pad token
  int64_t len = 0;                  // slots filled so far (same for every row)

  static KvCache allocate(const ModelConfig& cfg, int64_t batch, int64_t max_tokens, torch::ScalarType dtype,
                          torch::Device device = torch::kCPU);
  int64_t batch() const { return valid.size(0); }
  int64_t capacity() const { return valid.size(1); }
  // rows: int64 [B'] indices into the current batch (may repeat); cache becomes [B', ...].
  void keep_rows(const torch::Tensor& rows);
};

}  // namespace brl::model
