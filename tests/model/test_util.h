// Shared helpers for the model tests: thread set-up, tiny configs (temp folders and files:
// ../test_files.h); and, for the *_oracle_test files, Hugging Face's libraries run through
// tools/hf/oracle.py (brl::test::hf below).
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../test_files.h"
#include "model/config.h"
#include "model/llama.h"
#include "model/threads.h"

namespace brl::test {

inline int init_threads() { return model::set_compute_threads(0); }

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

// ---- Hugging Face as the oracle: transformers, PEFT and tokenizers (.venv, tools/hf/oracle.py) ----

namespace hf {

// max |ours - theirs| <= kLogitTol * max |theirs|: float32 on both sides. Measured with torch
// 2.11 on x86-64: 0 for the full forward (transformers' eager path runs the same ATen kernels
// in the same order), <= 1.2e-6 decoded through our KV cache and for merged weights (other
// kernels, another summation order). The margin is for other CPUs and libraries.
constexpr double kLogitTol = 1e-4;

inline std::string source(const std::string& rel) { return std::string(BRL_SOURCE_DIR) + "/" + rel; }

// A missing Python is a failure naming the set-up command, not a skip.
inline ::testing::AssertionResult python_installed() {
  if (std::filesystem::exists(BRL_PYTHON)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "no Python at " << BRL_PYTHON
         << "\n  run scripts/setup.sh --test (makes .venv with torch, transformers, peft)";
}

inline ::testing::AssertionResult run_command(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  if (rc == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "command failed (" << rc << "): " << cmd
         << "\n  transformers or peft missing or broken in .venv? run scripts/setup.sh --test";
}

// A random HF checkpoint written by Python (tools/hf/random_hf.py, numpy), not by our writer.
inline ::testing::AssertionResult random_hf_model(const std::string& shape, const std::string& dir, int seed) {
  return run_command("'" BRL_PYTHON "' '" + source("tools/hf/random_hf.py") + "' model " + shape + " '" + dir +
                     "' --seed " + std::to_string(seed) + " > /dev/null");
}

inline std::string join_ids(const std::vector<int64_t>& ids) {
  std::string s;
  for (auto t : ids) {
    if (!s.empty()) s += ',';
    s += std::to_string(t);
  }
  return s;
}

// Fixed ids below every tiny vocabulary (>= 97), 40 positions so RoPE is exercised well.
inline const std::vector<int64_t>& tiny_tokens() {
  static const std::vector<int64_t> t = [] {
    std::vector<int64_t> v;
    for (int i = 0; i < 40; ++i) v.push_back((i * 37 + 11) % 97);
    return v;
  }();
  return t;
}

// Requests for one start of tools/hf/oracle.py (importing transformers takes seconds).
struct OracleBatch {
  std::vector<nlohmann::json> lines;

  // transformers' (+ PEFT's) logits [T, V] of ids as one sequence, written to out.
  void logits(const std::string& model_dir, const std::vector<int64_t>& ids, const std::string& out,
              const std::string& adapter = "") {
    nlohmann::json l = {"logits", model_dir, join_ids(ids), out};
    if (!adapter.empty()) l.insert(l.end(), {"--adapter", adapter});
    lines.push_back(l);
  }
  // A LoRA adapter made by PEFT (get_peft_model + save_pretrained) with seeded random A and B.
  void peft_lora(const std::string& base, const std::string& out, int seed, int r, double alpha, bool rslora,
                 const std::string& targets) {
    nlohmann::json l = {
        "peft-lora",           base,        out,    "--seed", std::to_string(seed), "--r", std::to_string(r), "--alpha",
        std::to_string(alpha), "--targets", targets};
    if (rslora) l.push_back("--rslora");
    lines.push_back(l);
  }
  // The checkpoint as transformers saves it (its own current config.json form).
  void resave(const std::string& model_dir, const std::string& out) { lines.push_back({"resave", model_dir, out}); }
  // AutoTokenizer's ids of each text (no special tokens added): one JSON list per line of stdout.
  void tokenize(const std::string& dir, const std::vector<std::string>& texts) {
    nlohmann::json l = {"tokenize", dir, "--"};
    for (auto& t : texts) l.push_back(t);
    lines.push_back(l);
  }
  // Runs every request in order; the tokenize results (stdout) in *out_lines when given.
  ::testing::AssertionResult run(const TempDir& dir, std::vector<std::string>* out_lines = nullptr) const {
    std::string in = dir.str("oracle_in.jsonl"), out = dir.str("oracle_out.txt");
    {
      std::ofstream f(in);
      for (auto& l : lines) f << l.dump() << "\n";
    }
    auto r =
        run_command("'" BRL_PYTHON "' '" + source("tools/hf/oracle.py") + "' batch < '" + in + "' > '" + out + "'");
    if (r && out_lines) {
      std::ifstream f(out);
      for (std::string line; std::getline(f, line);) out_lines->push_back(line);
    }
    return r;
  }
};

// The logits file written by OracleBatch::logits as [T, V] for a T-token sequence.
inline at::Tensor read_logits(const std::string& path, int64_t T) {
  std::string bytes = read_file(path);
  auto n = static_cast<int64_t>(bytes.size() / sizeof(float));
  EXPECT_TRUE(n > 0 && n % T == 0) << path << ": " << bytes.size() << " bytes is no [" << T << ", V] float32 array";
  if (n == 0 || n % T != 0) return at::full({T, 1}, NAN);
  return at::from_blob(bytes.data(), {T, n / T}, at::kFloat).clone();
}

// max |ours - theirs| / max |theirs|, printed; shapes must match.
inline double rel_diff(const at::Tensor& ours, const at::Tensor& theirs, const char* what = "") {
  auto o = ours.to(at::kFloat);
  EXPECT_EQ(o.sizes(), theirs.sizes()) << "logit shapes differ (vocab or T mismatch)";
  if (o.sizes() != theirs.sizes()) return 1e9;
  double d = (o - theirs).abs().max().item<double>() / theirs.abs().max().item<double>();
  std::printf("    %-40s relative max diff %.2e\n", what, d);
  return d;
}

// Our logits [T, V] of ids as one sequence (the full-sequence path).
inline at::Tensor model_logits(const model::Model& m, const std::vector<int64_t>& ids) {
  at::NoGradGuard no_grad;
  return m.logits(at::tensor(ids, at::kLong).unsqueeze(0)).squeeze(0);
}

// The same logits token by token through the KV cache, as generation computes them (one row
// per linear: the few-row path, src/model/skinny_linear.h).
inline at::Tensor decode_logits(const model::Model& m, const std::vector<int64_t>& ids) {
  at::NoGradGuard no_grad;
  auto cache = m.new_cache(1, static_cast<int64_t>(ids.size()));
  std::vector<at::Tensor> rows;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto id = at::full({1, 1}, ids[i], at::kLong), pos = at::full({1, 1}, static_cast<int64_t>(i), at::kLong);
    rows.push_back(m.lm_logits(m.forward(id, pos, &cache).select(1, 0)));  // [1, V]
  }
  return at::cat(rows, 0);  // [T, V]
}

}  // namespace hf

}  // namespace brl::test
