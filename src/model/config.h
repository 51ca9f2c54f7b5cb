// ModelConfig: the hyper-parameters of a Llama-family decoder (Llama, Mistral, Qwen2, Qwen3), read
// from and written to a Hugging Face config.json. Torch-free.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace brl::model {

// RoPE's frequency scaling, HF's rope_scaling (transformers 4) or rope_parameters (5): Llama
// 3.x's "llama3", YaRN ("yarn", long-context Qwen) and position interpolation ("linear"). The
// frequencies themselves are model/layers.h's rope_frequencies.
struct RopeScaling {
  std::string type = "default";  // default | linear | llama3 | yarn
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;            // llama3
  int64_t original_max_position_embeddings = 0;                    // llama3, yarn: the pretraining context
  double beta_fast = 32.0, beta_slow = 1.0;                        // yarn
  bool truncate = true;                                            // yarn: correction range rounded outwards
  std::optional<double> attention_factor, mscale, mscale_all_dim;  // yarn
  bool operator==(const RopeScaling&) const = default;
};

struct ModelConfig {
  std::string model_type = "qwen2";  // llama | mistral | qwen2 | qwen3
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;        // C
  int64_t intermediate_size = 0;  // SwiGLU inner width
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // GQA: heads / kv_heads queries share one k/v head
  int64_t head_dim = 0;             // default hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;  // rotary on the first head_dim * factor dims
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 32768;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (qwen2: always; llama: also o_proj)
  bool o_proj_bias = false;     // llama's attention_bias covers o_proj too
  bool mlp_bias = false;        // llama's mlp_bias
  bool qk_norm = false;         // qwen3: per-head RMSNorm of q and k before RoPE
  // mistral: each token attends to the last sliding_window positions (itself included). Only
  // sequences that fit it are run (then it changes nothing): Model::forward refuses longer ones.
  std::optional<int64_t> sliding_window;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::string torch_dtype = "float32";

  int64_t n_rot() const;  // rotary dims per head (even)
  int64_t n_groups() const { return num_attention_heads / num_key_value_heads; }
  int64_t num_parameters() const;  // total weights, counting tied embeddings once

  // Throws UserError quoting the offending values; `source` names the file.
  void validate(const std::string& source = "config") const;
  nlohmann::json to_json() const;
  // Parses an HF config.json object; unknown model_type -> UserError listing the supported.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source = "config.json");
  static ModelConfig from_file(const std::string& path);
};

// Named shapes for tests and benches ("qwen2.5-0.5b", "small", "tiny"; "thin24" is the
// 0.5B's layer count at tiny widths, so a step there costs mostly dispatch and launches).
ModelConfig named_shape(const std::string& name);
std::vector<std::string> named_shapes();

}  // namespace brl::model
