// Our decoder's logits against Hugging Face transformers (AutoModelForCausalLM, float32, eager
// attention), run live by tools/hf/oracle.py from .venv: random tiny Llama (GQA, untied),
// Qwen2 (qkv biases, tied), Qwen3 (q/k norm, head_dim != C/heads) and Mistral (no biases; a
// sliding window wider than the sequence) checkpoints.
// Both directions of the file format: checkpoints written by Python (tools/hf/random_hf.py,
// numpy) and read by our loader, through the full forward and token by token through our KV
// cache; checkpoints written by our writer (F32 and BF16) and read by transformers.
// Adapters in both directions (PEFT's through our loader, ours through PEFT) are checked in
// tests/lora/peft_oracle_test.cpp, which links src/lora.
// RoPE scalings (Llama 3.x's llama3, YaRN, linear) both ways, and checkpoints in the config form
// transformers itself writes now (5: rope_theta inside rope_parameters, dtype).
// Tolerance: max |ours - HF| <= 1e-4 * max |HF logit| (brl::test::hf::kLogitTol; fp32 both sides).
// A missing oracle is a failure naming scripts/setup.sh --test, not a skip.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/loader.h"
#include "test_util.h"

using namespace brl::model;
using brl::test::TempDir;
namespace hf = brl::test::hf;

namespace {
const int kThreads = brl::test::init_threads();
const std::vector<std::string> kShapes = {"tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-mistral", "tiny-mistral-sw"};
const int64_t kT = static_cast<int64_t>(hf::tiny_tokens().size());

at::Tensor theirs(const TempDir& dir, const std::string& name) { return hf::read_logits(dir.str(name), kT); }
}  // namespace

// Python writes the checkpoint (tools/hf/random_hf.py); our loader reads it.
TEST(HfOracle, PythonCheckpointThroughOurLoader) {
  ASSERT_TRUE(hf::python_installed());
  TempDir dir;
  hf::OracleBatch batch;
  for (auto& shape : kShapes) {
    ASSERT_TRUE(hf::random_hf_model(shape, dir.str(shape), 7));
    batch.logits(dir.str(shape), hf::tiny_tokens(), dir.str(shape + ".f32"));
  }
  ASSERT_TRUE(batch.run(dir));
  for (auto& shape : kShapes) {
    SCOPED_TRACE(shape);
    auto hf_logits = theirs(dir, shape + ".f32");
    auto m = load_model(dir.str(shape));
    EXPECT_LE(hf::rel_diff(hf::model_logits(m, hf::tiny_tokens()), hf_logits, (shape + " full").c_str()),
              hf::kLogitTol);
    EXPECT_LE(hf::rel_diff(hf::decode_logits(m, hf::tiny_tokens()), hf_logits, (shape + " decoded").c_str()),
              hf::kLogitTol);
    // The logits must carry signal, else agreement proves nothing.
    EXPECT_GT(hf_logits.abs().max().item<double>(), 0.5);
  }
}

// Our writer writes the checkpoint (F32 and BF16); transformers reads it.
TEST(HfOracle, OurCheckpointThroughTransformers) {
  ASSERT_TRUE(hf::python_installed());
  TempDir dir;
  hf::OracleBatch batch;
  std::vector<std::string> cases;
  for (std::string type : {"llama", "qwen2", "qwen3", "mistral"}) {
    for (auto dtype : {at::kFloat, at::kBFloat16}) {
      std::string name = type + (dtype == at::kFloat ? "-f32" : "-bf16");
      write_random_checkpoint(brl::test::tiny_config(type), 31, dir.str(name), dtype, 0.15);
      batch.logits(dir.str(name), hf::tiny_tokens(), dir.str(name + ".f32"));
      cases.push_back(name);
    }
  }
  ASSERT_TRUE(batch.run(dir));
  for (auto& name : cases) {
    SCOPED_TRACE(name);
    auto hf_logits = theirs(dir, name + ".f32");
    auto ours = hf::model_logits(load_model(dir.str(name)), hf::tiny_tokens());  // f32 compute from the stored bf16
    EXPECT_LE(hf::rel_diff(ours, hf_logits, name.c_str()), hf::kLogitTol);
    EXPECT_GT(hf_logits.abs().max().item<double>(), 0.5);
  }
}

// RoPE scaling through our loader (transformers 4's rope_scaling, as published Llama 3.x configs
// have it), the same checkpoints resaved by transformers (5's rope_parameters, holding rope_theta
// too), and ours with a scaling read back by transformers.
TEST(HfOracle, RopeScalingAndTransformersOwnConfigForm) {
  ASSERT_TRUE(hf::python_installed());
  TempDir dir;
  hf::OracleBatch batch;
  const std::map<std::string, std::string> kType = {{"tiny-llama3", "llama3"},
                                                    {"tiny-qwen2-yarn", "yarn"},
                                                    {"tiny-qwen3-linear", "linear"},
                                                    {"tiny-qwen2", "default"}};
  std::vector<std::string> shapes;
  for (auto& [shape, type] : kType) shapes.push_back(shape);
  for (auto& shape : shapes) {
    ASSERT_TRUE(hf::random_hf_model(shape, dir.str(shape), 7));
    batch.resave(dir.str(shape), dir.str(shape + "-resaved"));
    batch.logits(dir.str(shape), hf::tiny_tokens(), dir.str(shape + ".f32"));
  }
  std::vector<std::pair<std::string, ModelConfig>> ours;
  {
    ModelConfig c = brl::test::tiny_config("llama");
    c.max_position_embeddings = 512;
    c.rope_scaling.type = "llama3", c.rope_scaling.factor = 8, c.rope_scaling.original_max_position_embeddings = 64;
    ours.emplace_back("ours-llama3", c);
    c = brl::test::tiny_config("qwen2");
    c.max_position_embeddings = 512;
    c.rope_scaling.type = "yarn", c.rope_scaling.factor = 4, c.rope_scaling.original_max_position_embeddings = 128;
    ours.emplace_back("ours-yarn", c);
  }
  for (auto& [name, c] : ours) {
    write_random_checkpoint(c, 31, dir.str(name), at::kFloat, 0.15);
    batch.logits(dir.str(name), hf::tiny_tokens(), dir.str(name + ".f32"));
  }
  ASSERT_TRUE(batch.run(dir));
  for (auto& shape : shapes) {
    SCOPED_TRACE(shape);
    auto hf_logits = theirs(dir, shape + ".f32");
    EXPECT_GT(hf_logits.abs().max().item<double>(), 0.5);
    // transformers' own form: no top-level rope_theta, so a reader of only 4's keys falls back to
    // 10000 and is wrong for every model here but Llama's.
    auto saved = nlohmann::json::parse(std::ifstream(dir.str(shape + "-resaved/config.json")));
    EXPECT_FALSE(saved.contains("rope_theta")) << saved.dump();
    EXPECT_TRUE(saved.contains("rope_parameters")) << saved.dump();
    for (const std::string name : {shape, shape + "-resaved"}) {
      auto m = load_model(dir.str(name));
      EXPECT_EQ(m.config.rope_scaling.type, kType.at(shape));
      EXPECT_LE(hf::rel_diff(hf::model_logits(m, hf::tiny_tokens()), hf_logits, (name + " full").c_str()),
                hf::kLogitTol);
      EXPECT_LE(hf::rel_diff(hf::decode_logits(m, hf::tiny_tokens()), hf_logits, (name + " decoded").c_str()),
                hf::kLogitTol);
      // The scaling (or the base) must show in these logits, else agreement proves nothing.
      if (m.config.rope_scaling.type != "default") m.config.rope_scaling = {};
      else m.config.rope_theta = 10000.0;
      EXPECT_GT(hf::rel_diff(hf::model_logits(m, hf::tiny_tokens()), hf_logits, (name + " unscaled").c_str()),
                10 * hf::kLogitTol);
    }
  }
  for (auto& [name, c] : ours) {
    SCOPED_TRACE(name);
    auto hf_logits = theirs(dir, name + ".f32");
    auto m = load_model(dir.str(name));
    EXPECT_EQ(m.config.rope_scaling, c.rope_scaling);
    EXPECT_LE(hf::rel_diff(hf::model_logits(m, hf::tiny_tokens()), hf_logits, name.c_str()), hf::kLogitTol);
  }
}
