// Llama-family decoder forward pass, the HF name map and the LM head.
#include "model/llama.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "model/checkpoint.h"
#include "model/device.h"
#include "model/logprobs.h"
#include "model/skinny_linear.h"
#include "util/error.h"

namespace brl::model {

Model::Model(ModelConfig cfg) : config(std::move(cfg)) {
  config.validate();
  layers.resize(config.num_hidden_layers);
}

// Within the window a sliding-window mask hides nothing; beyond it, transformers would hide the
// oldest slots (by slot, padding included), which the attention here does not.
void Model::check_window(int64_t slots) const {
  if (config.sliding_window && slots > *config.sliding_window)
    throw UserError("a sequence of " + std::to_string(slots) +
                        " positions is longer than the model's sliding_window (" +
                        std::to_string(*config.sliding_window) + "): sliding-window attention is not implemented",
                    "keep prompt + completion within it (max_prompt_length, max_completion_length)");
}

torch::Tensor positions_from_mask(const torch::Tensor& mask) {
  return (mask.to(at::kLong).cumsum(-1) - 1).clamp_min(0);
}

KvCache Model::new_cache(int64_t batch, int64_t max_tokens) const {
  return KvCache::allocate(config, batch, max_tokens, dtype(), device());
}

torch::Tensor Model::attention(const DecoderLayer& layer, int64_t index, const torch::Tensor& x, const RopeCosSin& rope,
                               const torch::Tensor& mask, KvCache* cache, const torch::Tensor& slot) const {
  const auto& a = layer.self_attn;
  const int64_t B = x.size(0), T = x.size(1);
  const int64_t H = config.num_attention_heads, Hkv = config.num_key_value_heads;
  const int64_t D = config.head_dim, G = config.n_groups();
  torch::Tensor xl;  // x for the adapters, cast once (Linear::forward)
  auto q = a.q_proj.forward(x, adapters_enabled, training, &xl).view({B, T, H, D});
  auto k = a.k_proj.forward(x, adapters_enabled, training, &xl).view({B, T, Hkv, D});
  auto v = a.v_proj.forward(x, adapters_enabled, training, &xl).view({B, T, Hkv, D});
  if (config.qk_norm) {
    q = rms_norm(q, a.q_norm, config.rms_norm_eps);
    k = rms_norm(k, a.k_norm, config.rms_norm_eps);
  }
  q = apply_rope(q, rope);  // [B, T, H, D]
  k = apply_rope(k, rope);  // [B, T, Hkv, D]
  // Query heads h = kv * G + g share kv head `kv`: group them as [B, Hkv, G*T, D] so one
  // batched matmul per kv head serves all its queries (no repeat of K/V).
  torch::Tensor K, V;  // [B, Hkv, L, D]
  if (cache && slot.defined()) {
    cache->k[index].index_copy_(2, slot, k.transpose(1, 2));
    cache->v[index].index_copy_(2, slot, v.transpose(1, 2));
    K = cache->k[index];
    V = cache->v[index];
  } else if (cache) {
    const int64_t off = cache->len;
    cache->k[index].narrow(2, off, T).copy_(k.transpose(1, 2));
    cache->v[index].narrow(2, off, T).copy_(v.transpose(1, 2));
    K = cache->k[index].narrow(2, 0, off + T);
    V = cache->v[index].narrow(2, 0, off + T);
  } else {
    K = k.transpose(1, 2);
    V = v.transpose(1, 2);
  }
  const int64_t L = K.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  if (x.is_cuda() && T > 1) {
    // Prefill and training on the GPU: ATen's fused attention. Causal alone (no mask: see
    // forward) takes the flash kernel, which groups K/V itself; with padding, the
    // memory-efficient kernel takes the additive mask but not grouped K/V, so they are
    // expanded to every query head.
    at::Tensor out;  // [B, H, T, D]
    if (!mask.defined()) {
      out = at::scaled_dot_product_attention(q.transpose(1, 2), K, V, {}, 0.0, /*is_causal=*/true, scale,
                                             /*enable_gqa=*/true);
    } else {
      auto Ke = G > 1 ? K.repeat_interleave(G, 1) : K, Ve = G > 1 ? V.repeat_interleave(G, 1) : V;
      out = at::scaled_dot_product_attention(q.transpose(1, 2), Ke, Ve, mask.view({B, 1, T, L}), 0.0, false, scale);
    }
    return a.o_proj.forward(out.transpose(1, 2).reshape({B, T, H * D}), adapters_enabled, training);
  }
  auto qg = q.view({B, T, Hkv, G, D}).permute({0, 2, 3, 1, 4}).reshape({B, Hkv, G * T, D});
  auto scores = at::matmul(qg, K.transpose(2, 3)) * scale;
  if (mask.defined()) scores = (scores.view({B, Hkv, G, T, L}) + mask).view({B, Hkv, G * T, L});
  // Low-precision scores are normalized in f32.
  const bool low = x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
  auto probs =
      low ? at::softmax(scores, -1, at::kFloat).to(x.scalar_type()) : at::softmax(scores, -1);  // [B, Hkv, G*T, L]
  auto out = at::matmul(probs, V);                                                              // [B, Hkv, G*T, D]
  out = out.view({B, Hkv, G, T, D}).permute({0, 3, 1, 2, 4}).reshape({B, T, H * D});
  return a.o_proj.forward(out, adapters_enabled, training);  // [B, T, C]
}

torch::Tensor Model::forward(const torch::Tensor& input_ids, const torch::Tensor& positions, KvCache* cache,
                             const torch::Tensor& attn_mask) const {
  TORCH_CHECK(input_ids.dim() == 2, "input_ids must be [B, T]");
  TORCH_CHECK(positions.sizes() == input_ids.sizes(), "positions must match input_ids");
  const int64_t B = input_ids.size(0), T = input_ids.size(1);
  const int64_t off = cache ? cache->len : 0;
  const int64_t L = off + T;
  check_window(L);
  if (cache) {
    TORCH_CHECK(cache->batch() == B, "cache batch ", cache->batch(), " != input batch ", B);
    TORCH_CHECK(L <= cache->capacity(), "KV cache full: ", L, " > ", cache->capacity());
    auto slots = cache->valid.narrow(1, off, T);
    if (attn_mask.defined()) slots.copy_(attn_mask.to(at::kBool));
    else slots.fill_(true);
  }
  // Additive mask [B, 1, 1, T, L]: key j visible to query i iff j <= off + i and j is real.
  // A large finite negative (not -inf) keeps fully masked pad-query rows finite.
  torch::Tensor key_valid;  // [B, L] bool or undefined (all real)
  if (cache) key_valid = cache->valid.narrow(1, 0, L);
  else if (attn_mask.defined()) key_valid = attn_mask.to(at::kBool);
  torch::Tensor mask;
  const bool need_causal = T > 1;
  const bool need_pad = key_valid.defined() && !key_valid.all().item<bool>();
  const auto dev = at::TensorOptions().device(device());
  // On the GPU a causal mask with nothing else to hide (no padding, no cached prefix) is left
  // to the fused kernel's is_causal (attention).
  const bool causal_in_kernel = input_ids.is_cuda() && need_causal && !need_pad && off == 0;
  if ((need_causal || need_pad) && !causal_in_kernel) {
    auto allowed = at::ones({B, T, L}, dev.dtype(at::kBool));
    if (need_causal) {
      auto qi = at::arange(off, L, dev.dtype(at::kLong)).unsqueeze(1);  // [T, 1]
      auto kj = at::arange(0, L, dev.dtype(at::kLong)).unsqueeze(0);    // [1, L]
      allowed = allowed & (kj <= qi).unsqueeze(0);
    }
    if (need_pad) allowed = allowed & key_valid.unsqueeze(1);
    mask = at::zeros({B, T, L}, dev.dtype(dtype())).masked_fill_(allowed.logical_not(), -1e9).view({B, 1, 1, T, L});
  }
  auto h = layers_forward(input_ids, positions, mask, cache, {});
  if (cache) cache->len = L;
  return h;
}

torch::Tensor Model::forward_static(const torch::Tensor& input_ids, const torch::Tensor& positions, KvCache& cache,
                                    const torch::Tensor& slot) const {
  TORCH_CHECK(input_ids.dim() == 2 && input_ids.size(1) == 1, "forward_static takes input_ids [B, 1]");
  TORCH_CHECK(cache.batch() == input_ids.size(0), "cache batch ", cache.batch(), " != input batch ", input_ids.size(0));
  const int64_t B = input_ids.size(0), L = cache.capacity();
  check_window(L);
  cache.valid.index_fill_(1, slot, true);
  // Every slot not yet written is invalid, so validity alone is causal for one new token.
  auto mask = at::zeros({B, L}, at::TensorOptions().dtype(dtype()).device(device()))
                  .masked_fill_(cache.valid.logical_not(), -1e9)
                  .view({B, 1, 1, 1, L});
  return layers_forward(input_ids, positions, mask, &cache, slot);
}

torch::Tensor Model::layers_forward(const torch::Tensor& input_ids, const torch::Tensor& positions,
                                    const torch::Tensor& mask, KvCache* cache, const torch::Tensor& slot) const {
  auto rope = rope_cos_sin(positions, rope_frequencies(config, positions.device()), dtype());
  auto h = at::embedding(embed_tokens, input_ids);  // [B, T, C]
  // Checkpointed layers keep only their input for backward (a cache is for inference only).
  const bool ckpt = gradient_checkpointing && !cache && at::GradMode::is_enabled();
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    auto layer_fn = [this, l, rope, mask, cache, slot](const torch::Tensor& in) {
      const auto& layer = layers[l];
      auto out =
          in + attention(layer, l, rms_norm(in, layer.input_layernorm, config.rms_norm_eps), rope, mask, cache, slot);
      auto x = rms_norm(out, layer.post_attention_layernorm, config.rms_norm_eps);
      const auto& m = layer.mlp;
      torch::Tensor xl;  // x for the adapters, cast once
      auto act = at::silu(m.gate_proj.forward(x, adapters_enabled, training, &xl)) *
                 m.up_proj.forward(x, adapters_enabled, training, &xl);  // [B, T, inter]
      return out + m.down_proj.forward(act, adapters_enabled, training);
    };
    h = ckpt ? checkpoint(layer_fn, h) : layer_fn(h);
  }
  return rms_norm(h, norm, config.rms_norm_eps);  // [B, T, C]
}

torch::Tensor Model::lm_logits(const torch::Tensor& hidden) const {
  if (lm_head_f32.defined()) return fast_linear(hidden.to(at::kFloat), lm_head_f32);
  return fast_linear(hidden, output_weight());  // [..., V]; decode rows: skinny_linear
}

torch::Tensor Model::logits(const torch::Tensor& input_ids) const {
  auto ids = input_ids.dim() == 1 ? input_ids.unsqueeze(0) : input_ids;
  auto pos = at::arange(ids.size(1), at::TensorOptions().dtype(at::kLong).device(ids.device()))
                 .unsqueeze(0)
                 .expand({ids.size(0), ids.size(1)});
  return lm_logits(forward(ids, pos.contiguous()));
}

torch::Tensor Model::token_logprobs(const torch::Tensor& hidden, const torch::Tensor& targets, double temperature,
                                    torch::Tensor* entropy, bool entropy_grad) const {
  const bool f32_head = lm_head_f32.defined();
  const torch::Tensor h = f32_head ? hidden.to(at::kFloat) : hidden;  // its gradient comes back in hidden's dtype
  const torch::Tensor& w = f32_head ? lm_head_f32 : output_weight();
  if (hidden.is_cuda())  // see kChunkTokensCuda
    return chunked_token_logprobs(h, w, targets, temperature, kChunkTokensCuda,
                                  device_free_memory_bytes(hidden.device()) / 4, entropy, entropy_grad);
  return chunked_token_logprobs(h, w, targets, temperature, kChunkTokens, kKeepSoftmaxBytes, entropy, entropy_grad);
}

std::vector<NamedTensor> Model::named_tensors() {
  const auto& c = config;
  const int64_t C = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const int64_t qo = c.num_attention_heads * D, kv = c.num_key_value_heads * D;
  std::vector<NamedTensor> out;
  out.push_back({"model.embed_tokens.weight", &embed_tokens, {c.vocab_size, C}});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    auto& L = layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out.push_back({p + "input_layernorm.weight", &L.input_layernorm, {C}});
    auto lin = [&](const std::string& name, Linear& lin, int64_t o, int64_t i, bool bias) {
      out.push_back({p + name + ".weight", &lin.weight, {o, i}});
      if (bias) out.push_back({p + name + ".bias", &lin.bias, {o}});
    };
    auto& a = L.self_attn;
    lin("self_attn.q_proj", a.q_proj, qo, C, c.attention_bias);
    lin("self_attn.k_proj", a.k_proj, kv, C, c.attention_bias);
    lin("self_attn.v_proj", a.v_proj, kv, C, c.attention_bias);
    lin("self_attn.o_proj", a.o_proj, C, qo, c.o_proj_bias);
    if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", &a.q_norm, {D}});
      out.push_back({p + "self_attn.k_norm.weight", &a.k_norm, {D}});
    }
    out.push_back({p + "post_attention_layernorm.weight", &L.post_attention_layernorm, {C}});
    lin("mlp.gate_proj", L.mlp.gate_proj, I, C, c.mlp_bias);
    lin("mlp.up_proj", L.mlp.up_proj, I, C, c.mlp_bias);
    lin("mlp.down_proj", L.mlp.down_proj, C, I, c.mlp_bias);
  }
  out.push_back({"model.norm.weight", &norm, {C}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", &lm_head, {c.vocab_size, C}});
  return out;
}

std::vector<std::pair<std::string, Linear*>> Model::projections() {
  std::vector<std::pair<std::string, Linear*>> out;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    auto& L = layers[l];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out.emplace_back(p + "self_attn.q_proj", &L.self_attn.q_proj);
    out.emplace_back(p + "self_attn.k_proj", &L.self_attn.k_proj);
    out.emplace_back(p + "self_attn.v_proj", &L.self_attn.v_proj);
    out.emplace_back(p + "self_attn.o_proj", &L.self_attn.o_proj);
    out.emplace_back(p + "mlp.gate_proj", &L.mlp.gate_proj);
    out.emplace_back(p + "mlp.up_proj", &L.mlp.up_proj);
    out.emplace_back(p + "mlp.down_proj", &L.mlp.down_proj);
  }
  return out;
}

void Model::set_requires_grad(bool on) {
  for (auto& nt : named_tensors())
    if (nt.tensor->defined()) nt.tensor->set_requires_grad(on);
}

void Model::to(torch::ScalarType dt) {
  for (auto& nt : named_tensors())
    if (nt.tensor->defined() && nt.tensor->scalar_type() != dt) {
      bool rg = nt.tensor->requires_grad();
      *nt.tensor = nt.tensor->detach().to(dt).set_requires_grad(rg);
    }
  for (auto& [name, lin] : projections())
    if (lin->lora) {
      lin->lora->A = lin->lora->A.to(dt);
      lin->lora->B = lin->lora->B.to(dt);
    }
}

void Model::to(torch::Device dev) {
  auto move = [&](torch::Tensor& t) {
    if (!t.defined() || t.device() == dev) return;
    bool rg = t.requires_grad();
    t = t.detach().to(dev).set_requires_grad(rg);
  };
  for (auto& nt : named_tensors()) move(*nt.tensor);
  move(lm_head_f32);
  for (auto& [name, lin] : projections())
    if (lin->lora) {
      move(lin->lora->A);
      move(lin->lora->B);
    }
}

}  // namespace brl::model
