// LoRA: PEFT init and layout, the adapter switch, merge equivalence, save/load round trip.
#include "lora/lora.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "../model/test_util.h"
#include "model/loader.h"
#include "util/safetensors.h"
#include "util/error.h"

using namespace brl;

namespace {
const int kThreads = test::init_threads();

// Random B so the adapter changes the output (fresh adapters are the identity).
void randomize_b(model::Model& m, uint64_t seed) {
  torch::NoGradGuard ng;
  auto gen = at::detail::createCPUGenerator(seed);
  for (auto& [name, lin] : m.projections())
    if (lin->lora) lin->lora->B.normal_(0, 0.2, gen);
}
torch::Tensor ids() { return torch::tensor({5, 17, 3, 42, 8, 61, 2, 9}, torch::kLong).unsqueeze(0); }
double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }
}  // namespace

TEST(Lora, PeftInitIsIdentityAndKeysMatchPeft) {
  auto m = model::random_model(test::tiny_config("qwen2"), 1, 0.2);
  auto base = m.logits(ids());
  LoraConfig c;
  c.r = 4;
  c.target_modules = {"all-linear"};
  lora::attach(m, c);
  // B = 0: the same logits up to float summation order (the base products may now take
  // another kernel: with trainable adapters they record autograd, see skinny_linear.h).
  EXPECT_LT(max_diff(m.logits(ids()), base) / base.abs().max().item<double>(), 1e-6);
  auto ts = lora::adapter_tensors(m);
  ASSERT_EQ(ts.size(), 2u * 7 * 2);  // 2 layers x 7 modules x {A, B}
  EXPECT_EQ(ts[0].first, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(ts[1].first, "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight");
  // q_proj: in = hidden 48, out = heads 4 * head_dim 12 = 48; A [r, in], B [out, r].
  EXPECT_EQ(ts[0].second.sizes(), (std::vector<int64_t>{4, 48}));
  EXPECT_EQ(ts[1].second.sizes(), (std::vector<int64_t>{48, 4}));
  EXPECT_LE(ts[0].second.abs().max().item<double>(), 1.0 / std::sqrt(48.0));  // kaiming_uniform(a=sqrt 5)
  EXPECT_EQ(ts[1].second.abs().max().item<double>(), 0.0);
  EXPECT_EQ(lora::parameters(m).size(), ts.size());
  EXPECT_THROW(lora::attach(m, c), UserError);
}

TEST(Lora, AdapterSwitchAndMergeEquivalence) {
  for (std::string type : {"llama", "qwen2", "qwen3"}) {
    auto m = model::random_model(test::tiny_config(type), 2, 0.2);
    auto base = m.logits(ids());
    LoraConfig c;
    c.r = 3;
    c.lora_alpha = 7;
    c.target_modules = {"q", "k", "v", "o", "gate", "up", "down"};
    lora::attach(m, c);
    randomize_b(m, 3);
    auto adapted = m.logits(ids());
    EXPECT_GT(max_diff(adapted, base), 1e-2) << type;
    m.adapters_enabled = false;  // the reference policy
    EXPECT_LT(max_diff(m.logits(ids()), base), 1e-6) << type;
    m.adapters_enabled = true;
    // Independent of the LoRA branch's code path: W' = W + (alpha/r) B A, computed here.
    auto m2 = model::random_model(test::tiny_config(type), 2, 0.2);
    {
      torch::NoGradGuard ng;
      auto p1 = m.projections(), p2 = m2.projections();
      for (size_t i = 0; i < p1.size(); ++i)
        p2[i].second->weight.add_(torch::matmul(p1[i].second->lora->B, p1[i].second->lora->A) * (7.0 / 3.0));
    }
    EXPECT_LT(max_diff(m2.logits(ids()), adapted), 1e-4) << type;
    lora::merge(m);
    EXPECT_LT(max_diff(m.logits(ids()), adapted), 1e-4) << type;
    EXPECT_TRUE(lora::adapter_tensors(m).empty());
  }
}

TEST(Lora, RsLoraScale) {
  LoraConfig c;
  c.r = 16;
  c.lora_alpha = 8;
  EXPECT_DOUBLE_EQ(c.scale(), 0.5);
  c.use_rslora = true;
  EXPECT_DOUBLE_EQ(c.scale(), 2.0);
}

TEST(Lora, SaveLoadPeftRoundTrip) {
  test::TempDir tmp;
  auto m = model::random_model(test::tiny_config("qwen3"), 4, 0.2);
  LoraConfig c;
  c.r = 2;
  c.lora_alpha = 5;
  c.target_modules = {"q_proj", "v_proj", "down_proj"};
  lora::attach(m, c);
  randomize_b(m, 5);
  auto want = m.logits(ids());
  lora::save_peft(m, c, tmp.str("adapter"), "tiny-qwen3");
  // The files as PEFT writes them.
  auto j = nlohmann::json::parse(test::read_file(tmp.str("adapter/adapter_config.json")));
  EXPECT_EQ(j["peft_type"], "LORA");
  EXPECT_EQ(j["task_type"], "CAUSAL_LM");
  EXPECT_EQ(j["r"], 2);
  EXPECT_EQ(j["lora_alpha"], 5.0);
  auto st = st::SafetensorsFile::open(tmp.str("adapter/adapter_model.safetensors"));
  EXPECT_EQ(st.names().size(), 2u * 3 * 2);
  EXPECT_EQ(st.get("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight").shape, (std::vector<int64_t>{48, 2}));

  auto fresh = model::random_model(test::tiny_config("qwen3"), 4, 0.2);
  auto got = lora::load_peft(fresh, tmp.str("adapter"));
  EXPECT_EQ(got.r, 2);
  EXPECT_DOUBLE_EQ(got.scale(), 2.5);
  EXPECT_LT(max_diff(fresh.logits(ids()), want), 1e-6);

  // A rank mismatch names the tensor.
  auto other = model::random_model(test::tiny_config("qwen3"), 4, 0.2);
  LoraConfig c4 = c;
  c4.r = 4;
  lora::attach(other, c4);
  std::map<std::string, torch::Tensor> vals;
  for (auto& [k, t] : lora::adapter_tensors(fresh)) vals[k] = t.detach();
  try {
    lora::set_adapter_tensors(other, vals, "x.safetensors");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("lora_A.weight' has shape [2, 48], expected [4, 48]"), std::string::npos)
        << e.what();
  }
  test::write_file(tmp.str("adapter/adapter_config.json"), "{\"peft_type\": \"IA3\"}");
  EXPECT_THROW(lora::read_peft_config(tmp.str("adapter")), UserError);
}
