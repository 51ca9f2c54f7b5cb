// Shared helpers for the model tests: thread set-up, tiny configs (temp folders and files:
// ../test_files.h).
#pragma once

#include <ATen/Parallel.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "../test_files.h"
#include "model/config.h"

namespace brl::test {

inline int init_threads() {
  at::set_num_threads(std::max(1u, std::thread::hardware_concurrency()));
  return 0;
}

// A tiny model of each family: GQA (4 heads, 2 kv heads), odd sizes to catch transposes.
inline model::ModelConfig tiny_config(const std::string& type) {
  model::ModelConfig c;
  c.model_type = type;
  c.vocab_size = 97;
  c.hidden_size = 48;
  c.intermediate_size = 80;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = type == "qwen3" ? 16 : 12;  // qwen3: head_dim != hidden/heads, as in Qwen3
  c.rms_norm_eps = 1e-6;
  c.rope_theta = type == "llama" ? 10000.0 : 1000000.0;
  c.attention_bias = type == "qwen2";
  c.qk_norm = type == "qwen3";
  c.tie_word_embeddings = type != "llama";
  c.eos_token_ids = {3};
  return c;
}

}  // namespace brl::test
