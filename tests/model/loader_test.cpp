// Loading HF folders: round trip, sharded index, F16/BF16 conversion, and errors naming the
// tensor (missing, extra, wrong shape), the model_type and the file.
#include "model/loader.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "model/tensor_io.h"
#include "test_util.h"
#include "util/error.h"

using namespace brl::model;
using brl::test::TempDir;
using brl::test::tiny_config;

namespace {
const int kThreads = brl::test::init_threads();

at::Tensor some_ids() { return at::arange(0, 60, 7, at::kLong).unsqueeze(0); }

std::string load_error(const std::string& dir) {
  try {
    load_model(dir);
  } catch (const brl::UserError& e) {
    return e.what();
  }
  return "";
}

// All tensors of a saved folder, name -> tensor (f32).
std::vector<std::pair<std::string, at::Tensor>> tensors_of(const std::string& dir) {
  std::vector<std::pair<std::string, at::Tensor>> v;
  for (auto& [n, t] : load_tensors(dir + "/model.safetensors")) v.emplace_back(n, t);
  return v;
}
}  // namespace

TEST(Loader, RoundTripEachFamily) {
  for (std::string type : {"llama", "qwen2", "qwen3"}) {
    TempDir dir;
    auto m = random_model(tiny_config(type), 21, 0.2);
    save_model(m, dir.str());
    auto l = load_model(dir.str());
    EXPECT_EQ(l.config.to_json(), m.config.to_json());
    EXPECT_TRUE(at::equal(l.logits(some_ids()), m.logits(some_ids()))) << type;
    EXPECT_EQ(l.lm_head.defined(), type == "llama");  // llama tiny config is untied
  }
}

TEST(Loader, Sharded) {
  TempDir src, dir;
  auto m = random_model(tiny_config("qwen3"), 22, 0.2);
  save_model(m, src.str());
  auto all = tensors_of(src.str());
  std::vector<std::pair<std::string, at::Tensor>> a(all.begin(), all.begin() + all.size() / 2),
      b(all.begin() + all.size() / 2, all.end());
  save_tensors(dir.str("model-00001-of-00002.safetensors"), a);
  save_tensors(dir.str("model-00002-of-00002.safetensors"), b);
  nlohmann::json idx = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (auto& [n, t] : a) idx["weight_map"][n] = "model-00001-of-00002.safetensors";
  for (auto& [n, t] : b) idx["weight_map"][n] = "model-00002-of-00002.safetensors";
  brl::test::write_file(dir.str("model.safetensors.index.json"), idx.dump());
  std::filesystem::copy_file(src.str("config.json"), dir.str("config.json"));
  auto l = load_model(dir.str());
  EXPECT_TRUE(at::equal(l.logits(some_ids()), m.logits(some_ids())));

  // A shard the index names but that is absent.
  idx["weight_map"]["model.norm.weight"] = "model-00003-of-00002.safetensors";
  brl::test::write_file(dir.str("model.safetensors.index.json"), idx.dump());
  auto e = load_error(dir.str());
  EXPECT_NE(e.find("model-00003-of-00002.safetensors"), std::string::npos) << e;
}

TEST(Loader, HalfAndBFloat16MatchWithinRounding) {
  auto m = random_model(tiny_config("qwen2"), 23, 0.2);
  for (auto dt : {at::kHalf, at::kBFloat16}) {
    TempDir dir;
    save_model(m, dir.str(), dt);
    auto l = load_model(dir.str());
    EXPECT_EQ(l.dtype(), at::kFloat);
    // Each weight is exactly the f32 weight rounded to dt and widened back.
    auto want = m.named_tensors();
    auto got = l.named_tensors();
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(at::equal(*got[i].tensor, want[i].tensor->to(dt).to(at::kFloat))) << want[i].name;
    // Logits move by no more than the rounding allows (bf16: 8 mantissa bits).
    auto d = (l.logits(some_ids()) - m.logits(some_ids())).abs().max().item<double>();
    auto scale = m.logits(some_ids()).abs().max().item<double>();
    EXPECT_LT(d / scale, dt == at::kHalf ? 5e-3 : 5e-2);
    EXPECT_GT(d, 0.0);  // the conversion did happen
    // And a bf16 compute dtype loads too.
    auto lb = load_model(dir.str(), {at::kBFloat16});
    EXPECT_EQ(lb.dtype(), at::kBFloat16);
  }
}

TEST(Loader, ErrorsNameTheTensor) {
  TempDir src;
  auto m = random_model(tiny_config("qwen2"), 24);
  save_model(m, src.str());
  auto all = tensors_of(src.str());

  {  // missing tensor
    TempDir d;
    std::filesystem::copy_file(src.str("config.json"), d.str("config.json"));
    auto v = all;
    v.erase(
        std::remove_if(v.begin(), v.end(), [](auto& p) { return p.first == "model.layers.1.self_attn.k_proj.bias"; }),
        v.end());
    save_tensors(d.str("model.safetensors"), v);
    auto e = load_error(d.str());
    EXPECT_NE(e.find("missing tensor \"model.layers.1.self_attn.k_proj.bias\""), std::string::npos) << e;
    EXPECT_NE(e.find("[24]"), std::string::npos) << e;
  }
  {  // extra tensor
    TempDir d;
    std::filesystem::copy_file(src.str("config.json"), d.str("config.json"));
    auto v = all;
    v.emplace_back("model.layers.2.mlp.up_proj.weight", at::zeros({2, 2}));
    save_tensors(d.str("model.safetensors"), v);
    auto e = load_error(d.str());
    EXPECT_NE(e.find("unexpected tensor \"model.layers.2.mlp.up_proj.weight\""), std::string::npos) << e;
  }
  {  // wrong shape
    TempDir d;
    std::filesystem::copy_file(src.str("config.json"), d.str("config.json"));
    auto v = all;
    for (auto& [n, t] : v)
      if (n == "model.layers.0.mlp.gate_proj.weight") t = at::zeros({81, 48});
    save_tensors(d.str("model.safetensors"), v);
    auto e = load_error(d.str());
    EXPECT_NE(e.find("\"model.layers.0.mlp.gate_proj.weight\""), std::string::npos) << e;
    EXPECT_NE(e.find("shape [81, 48], expected [80, 48]"), std::string::npos) << e;
  }
  {  // unsupported dtype for a weight
    TempDir d;
    std::filesystem::copy_file(src.str("config.json"), d.str("config.json"));
    auto v = all;
    for (auto& [n, t] : v)
      if (n == "model.norm.weight") t = t.to(at::kInt);
    save_tensors(d.str("model.safetensors"), v);
    auto e = load_error(d.str());
    EXPECT_NE(e.find("\"model.norm.weight\""), std::string::npos) << e;
    EXPECT_NE(e.find("I32"), std::string::npos) << e;
  }
  {  // unknown model_type
    TempDir d;
    std::filesystem::copy_file(src.str("model.safetensors"), d.str("model.safetensors"));
    auto j = m.config.to_json();
    j["model_type"] = "mamba";
    brl::test::write_file(d.str("config.json"), j.dump());
    auto e = load_error(d.str());
    EXPECT_NE(e.find("mamba"), std::string::npos) << e;
    EXPECT_NE(e.find("llama, mistral, qwen2, qwen3"), std::string::npos) << e;
  }
  {  // truncated weights file names the file
    TempDir d;
    std::filesystem::copy_file(src.str("config.json"), d.str("config.json"));
    auto bytes = brl::test::read_file(src.str("model.safetensors"));
    brl::test::write_file(d.str("model.safetensors"), bytes.substr(0, bytes.size() - 100));
    auto e = load_error(d.str());
    EXPECT_NE(e.find(d.str("model.safetensors")), std::string::npos) << e;
  }
  {  // no weights, no folder
    TempDir d;
    std::filesystem::copy_file(src.str("config.json"), d.str("config.json"));
    EXPECT_NE(load_error(d.str()).find("neither model.safetensors"), std::string::npos);
    EXPECT_NE(load_error("/nonexistent/model").find("/nonexistent/model"), std::string::npos);
  }
}

TEST(Loader, TiedCheckpointWithLmHeadCopyLoads) {
  // Some tied checkpoints still carry lm_head.weight (HF ignores it); so do we.
  TempDir src;
  auto m = random_model(tiny_config("qwen2"), 25);
  save_model(m, src.str());
  auto v = tensors_of(src.str());
  v.emplace_back("lm_head.weight", m.embed_tokens);
  save_tensors(src.str("model.safetensors"), v);
  EXPECT_TRUE(at::equal(load_model(src.str()).logits(some_ids()), m.logits(some_ids())));
}

TEST(Loader, RandomModelIsSeeded) {
  auto a = random_model(tiny_config("llama"), 5), b = random_model(tiny_config("llama"), 5),
       c = random_model(tiny_config("llama"), 6);
  EXPECT_TRUE(at::equal(a.layers[1].mlp.up_proj.weight, b.layers[1].mlp.up_proj.weight));
  EXPECT_FALSE(at::equal(a.layers[1].mlp.up_proj.weight, c.layers[1].mlp.up_proj.weight));
}
