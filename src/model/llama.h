// Llama-family decoder (Llama, Qwen2, Qwen3) in libtorch: embeddings, N x [RMSNorm ->
// grouped-query attention with RoPE (Qwen2 q/k/v biases, Qwen3 per-head q/k RMSNorm) ->
// residual -> RMSNorm -> SwiGLU MLP -> residual], final RMSNorm, tied or untied LM head.
// Plain structs of tensors (no nn::Module bookkeeping): named_tensors() is the one
// HF <-> internal name map, used by the loader, the saver, optimizers and src/lora.
// Dimension letters: B batch, T new tokens, L attended tokens, C hidden, V vocab.
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

#include "model/config.h"
#include "model/kv_cache.h"
#include "model/layers.h"
#include "model/linear.h"

namespace brl::model {

struct Attention {
  Linear q_proj, k_proj, v_proj, o_proj;
  torch::Tensor q_norm, k_norm;  // [head_dim], Qwen3 only
};

struct Mlp {
  Linear gate_proj, up_proj, down_proj;
};

struct DecoderLayer {
  torch::Tensor input_layernorm;  // [C]
  Attention self_attn;
  torch::Tensor post_attention_layernorm;  // [C]
  Mlp mlp;
};

// One entry of the name map: the HF name, the tensor slot, and the shape it must have.
struct NamedTensor {
  std::string name;
  torch::Tensor* tensor;
  std::vector<int64_t> shape;
};

class Model {
 public:
  explicit Model(ModelConfig cfg);  // structure only; tensors filled by the loader / init

  ModelConfig config;
  torch::Tensor embed_tokens;  // [V, C]
  std::vector<DecoderLayer> layers;
  torch::Tensor norm;            // [C]
  torch::Tensor lm_head;         // [V, C]; undefined when tie_word_embeddings
  bool adapters_enabled = true;  // false: base model only (GRPO's reference policy)
  bool training = false;         // LoRA dropout on
  // Backward recomputes each decoder layer from its input instead of keeping its activations
  // (transformers' gradient_checkpointing; model/checkpoint.h): memory for one layer's
  // activations at a time, for one more forward pass.
  bool gradient_checkpointing = false;

  // TRL's cast_lm_head_to_fp32 (the ScaleRL recipe): the output weight in float32, by which
  // lm_logits and token_logprobs multiply float32 hidden states, so the sampler's logits and the
  // trainer's log-probs both come from an f32 head over a bf16 model. Undefined: the head in the
  // model's dtype. Not a weight of the model (not saved, not converted by to(dtype)); frozen.
  torch::Tensor lm_head_f32;
  void cast_lm_head_to_fp32() { lm_head_f32 = output_weight().detach().to(torch::kFloat); }

  const torch::Tensor& output_weight() const { return lm_head.defined() ? lm_head : embed_tokens; }
  torch::ScalarType dtype() const { return embed_tokens.scalar_type(); }
  torch::Device device() const { return embed_tokens.device(); }

  // input_ids [B, T] int64, positions [B, T] int64 -> final-normed hidden states [B, T, C].
  // cache: appends the T new tokens at slot cache->len (then advances it).
  // attn_mask [B, T] bool/int (true = real token, false = left padding); undefined = all real.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& positions, KvCache* cache = nullptr,
                        const torch::Tensor& attn_mask = {}) const;
  // One decode step with fixed shapes and no host synchronisation, so that it can be captured
  // as a CUDA graph and replayed: input_ids [B, 1], positions [B, 1], slot int64 [1] on the
  // model's device (the cache slot every row writes; the caller advances it and cache.len).
  // Attends over the cache's whole capacity, masked by `valid`. -> hidden states [B, 1, C].
  torch::Tensor forward_static(const torch::Tensor& input_ids, const torch::Tensor& positions, KvCache& cache,
                               const torch::Tensor& slot) const;
  // hidden [..., C] -> logits [..., V]
  torch::Tensor lm_logits(const torch::Tensor& hidden) const;
  // Convenience for tests and oracles: ids [B, T] (or [T]) at positions 0.. -> logits [B, T, V].
  torch::Tensor logits(const torch::Tensor& input_ids) const;
  // log p(targets | hidden) [B, T] at temperature `temperature`, computed in chunks of rows
  // (chunked_token_logprobs) without materializing [B, T, V]; differentiable w.r.t. hidden and
  // the LM head. entropy: optionally set to each position's softmax entropy [B, T] (detached,
  // or differentiable with entropy_grad).
  torch::Tensor token_logprobs(const torch::Tensor& hidden, const torch::Tensor& targets, double temperature = 1.0,
                               torch::Tensor* entropy = nullptr, bool entropy_grad = false) const;

  KvCache new_cache(int64_t batch, int64_t max_tokens) const;

  // Every weight with its HF name ("model.layers.3.self_attn.q_proj.weight") and shape.
  std::vector<NamedTensor> named_tensors();
  // Every projection by its HF module name ("model.layers.3.self_attn.q_proj").
  std::vector<std::pair<std::string, Linear*>> projections();
  // Base weights trainable (pretraining) or frozen (LoRA).
  void set_requires_grad(bool on);
  // Converts every weight (and LoRA slot) to dtype.
  void to(torch::ScalarType dtype);
  // Moves every weight and LoRA slot to device (keeping dtypes and requires_grad).
  void to(torch::Device device);

  // UserError where a sequence of `slots` positions exceeds config.sliding_window (sliding-
  // window attention is not implemented; within the window it would hide nothing).
  void check_window(int64_t slots) const;

 private:
  // mask: additive [B, 1, 1, T, L] or undefined. slot defined: static-cache write (forward_static).
  torch::Tensor attention(const DecoderLayer& layer, int64_t index, const torch::Tensor& x, const RopeCosSin& rope,
                          const torch::Tensor& mask, KvCache* cache, const torch::Tensor& slot) const;
  torch::Tensor layers_forward(const torch::Tensor& input_ids, const torch::Tensor& positions,
                               const torch::Tensor& mask, KvCache* cache, const torch::Tensor& slot) const;
};

// Left-padded positions: cumsum(mask) - 1, clamped at 0. mask [B, T] -> [B, T] int64.
torch::Tensor positions_from_mask(const torch::Tensor& mask);

}  // namespace brl::model
