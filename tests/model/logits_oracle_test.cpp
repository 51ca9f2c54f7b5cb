// Our decoder's logits against llama.cpp, an implementation nobody here wrote: random tiny
// Llama (GQA, untied), Qwen2 (qkv biases, tied) and Qwen3 (q/k norm, head_dim != C/heads)
// checkpoints, converted by tools/llamacpp/hf_to_gguf.py and evaluated by .oracles/bin/
// llamacpp-logits (F32 KV cache, no flash attention). Both directions of the file format:
// checkpoints written by the Python tool and read by our loader, and checkpoints written by
// our writer (F32 and BF16) and read by the Python converter. Also the LoRA branch of our
// Linear against llama.cpp's adapter path (PEFT adapter -> LoRA GGUF).
// Tolerance: max |ours - llama.cpp| <= 1e-4 * max |logit| (measured ~1e-6; fp32 both sides).
// A missing oracle is a failure naming scripts/oracles.sh, not a skip.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/loader.h"
#include "model/tensor_io.h"
#include "test_util.h"

using namespace brl::model;
using brl::test::TempDir;

namespace {
const int kThreads = brl::test::init_threads();
constexpr double kTol = 1e-4;

std::string src(const std::string& rel) { return std::string(BRL_SOURCE_DIR) + "/" + rel; }
const std::string kLogitsBin = src(".oracles/bin/llamacpp-logits");
const std::string kPython = "PYTHONPATH='" + src(".oracles/llama.cpp/gguf-py") + "' /usr/bin/python3 ";

::testing::AssertionResult oracle_installed() {
  for (const auto& p : {kLogitsBin, src(".oracles/llama.cpp/gguf-py/gguf/__init__.py"), std::string("/usr/bin/python3")})
    if (!std::filesystem::exists(p))
      return ::testing::AssertionFailure() << "llama.cpp oracle missing: " << p
                                           << "\n  run scripts/oracles.sh (installs it into .oracles/)";
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult run(const std::string& cmd) {
  int rc = std::system((cmd + " > /dev/null").c_str());
  if (rc == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "command failed (" << rc << "): " << cmd;
}

std::string tool(const std::string& name) { return kPython + "'" + src("tools/llamacpp/" + name) + "' "; }

// Fixed ids below every tiny vocabulary (>= 97), 40 positions so RoPE is exercised well.
const std::vector<int64_t>& tokens() {
  static const std::vector<int64_t> t = [] {
    std::vector<int64_t> v;
    for (int i = 0; i < 40; ++i) v.push_back((i * 37 + 11) % 97);
    return v;
  }();
  return t;
}

std::string tokens_arg() {
  std::string s;
  for (auto t : tokens()) {
    if (!s.empty()) s += ',';
    s += std::to_string(t);
  }
  return s;
}

// llama.cpp's logits [T, V] for a GGUF (and optional LoRA GGUF).
at::Tensor llamacpp_logits(const TempDir& dir, const std::string& gguf, const std::string& lora_gguf = "") {
  std::string out = dir.str("llamacpp.f32");
  std::string cmd = "'" + kLogitsBin + "' '" + gguf + "' " + tokens_arg() + " '" + out + "'";
  if (!lora_gguf.empty()) cmd += " --lora '" + lora_gguf + "'";
  EXPECT_TRUE(run(cmd));
  auto bytes = brl::test::read_file(out);
  auto n = static_cast<int64_t>(bytes.size() / sizeof(float));
  return at::from_blob(bytes.data(), {n}, at::kFloat).clone();
}

// max |ours - theirs| / max |theirs|, with the shapes checked.
double rel_diff(const at::Tensor& ours, const at::Tensor& theirs_flat) {
  auto o = ours.reshape({-1}).to(at::kFloat);
  EXPECT_EQ(o.numel(), theirs_flat.numel()) << "logit counts differ (vocab or T mismatch)";
  if (o.numel() != theirs_flat.numel()) return 1e9;
  double d = (o - theirs_flat).abs().max().item<double>() / theirs_flat.abs().max().item<double>();
  std::printf("    relative max diff %.2e\n", d);
  return d;
}

at::Tensor our_logits(const Model& m) {
  return m.logits(at::tensor(tokens(), at::kLong).unsqueeze(0)).squeeze(0);  // [T, V]
}

// The same logits token by token through the KV cache, as generation computes them (one row
// per linear: the few-row path, src/model/skinny_linear.h).
at::Tensor our_decode_logits(const Model& m) {
  at::NoGradGuard no_grad;
  const auto& t = tokens();
  auto cache = m.new_cache(1, t.size());
  std::vector<at::Tensor> rows;
  for (size_t i = 0; i < t.size(); ++i) {
    auto id = at::full({1, 1}, t[i], at::kLong), pos = at::full({1, 1}, int64_t(i), at::kLong);
    rows.push_back(m.lm_logits(m.forward(id, pos, &cache).select(1, 0)));  // [1, V]
  }
  return at::cat(rows, 0);  // [T, V]
}

std::string convert(const std::string& hf_dir, const std::string& gguf) {
  EXPECT_TRUE(run(tool("hf_to_gguf.py") + "model '" + hf_dir + "' '" + gguf + "'"));
  return gguf;
}
}  // namespace

// Python writes the checkpoint (tools/llamacpp/random_hf.py); our loader reads it.
TEST(LogitsOracle, PythonCheckpointThroughOurLoader) {
  ASSERT_TRUE(oracle_installed());
  for (std::string shape : {"tiny-llama", "tiny-qwen2", "tiny-qwen3"}) {
    SCOPED_TRACE(shape);
    TempDir dir;
    ASSERT_TRUE(run(tool("random_hf.py") + "model " + shape + " '" + dir.str("hf") + "' --seed 7"));
    auto theirs = llamacpp_logits(dir, convert(dir.str("hf"), dir.str("m.gguf")));
    auto m = load_model(dir.str("hf"));
    double d = rel_diff(our_logits(m), theirs);
    EXPECT_LE(d, kTol) << shape << ": relative max diff " << d;
    d = rel_diff(our_decode_logits(m), theirs);
    EXPECT_LE(d, kTol) << shape << " (decoded token by token): relative max diff " << d;
    // The logits must carry signal, else agreement proves nothing.
    EXPECT_GT(theirs.abs().max().item<double>(), 0.5);
  }
}

// Our writer writes the checkpoint (F32 and BF16); the Python converter reads it.
TEST(LogitsOracle, OurCheckpointThroughLlamaCpp) {
  ASSERT_TRUE(oracle_installed());
  for (std::string type : {"llama", "qwen2", "qwen3"}) {
    for (auto dtype : {at::kFloat, at::kBFloat16}) {
      SCOPED_TRACE(type + (dtype == at::kFloat ? " f32" : " bf16"));
      TempDir dir;
      write_random_checkpoint(brl::test::tiny_config(type), 31, dir.str("hf"), dtype, 0.15);
      auto theirs = llamacpp_logits(dir, convert(dir.str("hf"), dir.str("m.gguf")));
      auto ours = our_logits(load_model(dir.str("hf")));  // computes in f32 from the stored bf16
      double d = rel_diff(ours, theirs);
      EXPECT_LE(d, kTol) << type << ": relative max diff " << d;
      EXPECT_GT(theirs.abs().max().item<double>(), 0.5);
    }
  }
}

// A PEFT adapter (random A and B, alpha/r and rsLoRA scaling) through our Linear's LoRA slot
// against llama.cpp's adapter path. The slots are filled here from the adapter file directly
// (PEFT loading itself belongs to src/lora and its tests).
TEST(LogitsOracle, LoraAdapter) {
  ASSERT_TRUE(oracle_installed());
  for (std::string shape : {"tiny-llama", "tiny-qwen2", "tiny-qwen3"}) {
    bool rslora = shape == "tiny-qwen3";
    SCOPED_TRACE(shape);
    TempDir dir;
    std::string hf = dir.str("hf"), ad = dir.str("adapter");
    ASSERT_TRUE(run(tool("random_hf.py") + "model " + shape + " '" + hf + "' --seed 8"));
    ASSERT_TRUE(run(tool("random_hf.py") + "lora '" + hf + "' '" + ad + "' --seed 9 --r 4 --alpha 8" +
                    (rslora ? " --rslora" : "")));
    ASSERT_TRUE(run(tool("hf_to_gguf.py") + "lora '" + ad + "' '" + hf + "' '" + dir.str("lora.gguf") + "'"));
    std::string gguf = convert(hf, dir.str("m.gguf"));
    auto base = llamacpp_logits(dir, gguf);
    auto theirs = llamacpp_logits(dir, gguf, dir.str("lora.gguf"));

    auto m = load_model(hf);
    auto cfg = nlohmann::json::parse(brl::test::read_file(ad + "/adapter_config.json"));
    double r = cfg["r"].get<double>(), alpha = cfg["lora_alpha"].get<double>();
    double scale = rslora ? alpha / std::sqrt(r) : alpha / r;
    auto tensors = load_tensors(ad + "/adapter_model.safetensors", at::kFloat);
    int filled = 0;
    for (auto& [name, lin] : m.projections()) {
      std::string p = "base_model.model." + name;
      if (!tensors.count(p + ".lora_A.weight")) continue;
      lin->lora = LoraSlot{tensors.at(p + ".lora_A.weight"), tensors.at(p + ".lora_B.weight"), scale, 0.0};
      ++filled;
    }
    EXPECT_EQ(filled, 7 * m.config.num_hidden_layers);
    auto ours = our_logits(m);
    double d = rel_diff(ours, theirs);
    EXPECT_LE(d, kTol) << shape << ": relative max diff with LoRA " << d;
    // The adapter must move the logits well beyond the tolerance, or the test proves nothing.
    EXPECT_GT(rel_diff(ours, base), 100 * kTol);
    m.adapters_enabled = false;
    EXPECT_LE(rel_diff(our_logits(m), base), kTol) << "adapters switched off must give the base logits";
  }
}
