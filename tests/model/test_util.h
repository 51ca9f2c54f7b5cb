// Shared helpers for the model tests: temp folders, thread set-up, tiny configs.
#pragma once

#include <ATen/Parallel.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "model/config.h"

namespace brl::test {

inline int init_threads() {
  at::set_num_threads(std::max(1u, std::thread::hardware_concurrency()));
  return 0;
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/brl_model_test_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string str(const std::string& sub = "") const { return (path / sub).string(); }
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
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
