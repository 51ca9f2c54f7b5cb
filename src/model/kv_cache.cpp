// KvCache allocation and row selection.
#include "model/kv_cache.h"

#include <ATen/ATen.h>

namespace brl::model {

KvCache KvCache::allocate(const ModelConfig& cfg, int64_t batch, int64_t max_tokens, torch::ScalarType dtype,
                          torch::Device device) {
  KvCache c;
  auto opts = at::TensorOptions().dtype(dtype).device(device);
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    c.k.push_back(at::zeros({batch, cfg.num_key_value_heads, max_tokens, cfg.head_dim}, opts));
    c.v.push_back(at::zeros({batch, cfg.num_key_value_heads, max_tokens, cfg.head_dim}, opts));
  }
  c.valid = at::zeros({batch, max_tokens}, opts.dtype(at::kBool));
  return c;
}

void KvCache::keep_rows(const torch::Tensor& rows_in) {
  auto rows = rows_in.to(valid.device());
  for (auto& t : k) t = t.index_select(0, rows);
  for (auto& t : v) t = t.index_select(0, rows);
  valid = valid.index_select(0, rows);
}

}  // namespace brl::model
