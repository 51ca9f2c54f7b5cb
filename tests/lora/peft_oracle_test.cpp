// LoRA adapters against Hugging Face PEFT in both directions, run live by tools/hf/oracle.py
// (.venv: transformers + peft), on random tiny Llama (GQA, untied), Qwen2 (qkv biases, tied) and
// Qwen3 (q/k norm, head_dim != C/heads) bases:
//  - PEFT writes: LoraConfig + get_peft_model + save_pretrained on a Python-written base, A and B
//    random; our loader (lora::load_peft) attaches it and must give PEFT's logits, in the full
//    forward and decoded through the KV cache, and the base logits with adapters switched off.
//  - bucketrl writes: lora::attach (PEFT's init; B then made random, a fresh B = 0 would prove
//    nothing) and lora::save_peft, the writer of the adapters `bucketrl train` leaves; the same
//    adapter with BF16 tensors, the layout `bucketrl export` gives a version published in bf16
//    (export_adapter copies the payload, encode_adapter's BF16 safetensors, beside
//    write_peft_config's adapter_config.json; src/protocol is not linked here, so the file is
//    written by model::save_tensors); and lora::merge + save_model, as `bucketrl merge` does.
//    PeftModel.from_pretrained loads the adapters, AutoModelForCausalLM the merged model; their
//    logits must equal ours with the adapter.
// Tolerance: max |ours - HF| <= 1e-4 * max |HF logit| (brl::test::hf::kLogitTol; fp32 both sides).
// A missing oracle is a failure naming scripts/setup.sh --test, not a skip.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "../model/test_util.h"
#include "lora/lora.h"
#include "model/loader.h"
#include "model/tensor_io.h"

using namespace brl;
using test::TempDir;
namespace hf = test::hf;

namespace {
const int kThreads = test::init_threads();
const int64_t kT = static_cast<int64_t>(hf::tiny_tokens().size());
const std::vector<std::string> kTypes = {"llama", "qwen2", "qwen3", "mistral"};

// ---- bucketrl's adapters and merged models, and what transformers/PEFT make of them ---------------

struct OursAndTheirs {
  at::Tensor ours_adapter, ours_bf16_adapter, ours_merged;  // [T, V]
  at::Tensor hf_base, peft_adapter, peft_bf16_adapter, hf_merged;
};

struct ExportRun {
  std::map<std::string, OursAndTheirs> by_type;
  std::string error;  // non-empty: why the oracle gave nothing
};

LoraConfig our_lora(const std::string& type) {
  LoraConfig c;
  c.r = 4;
  c.lora_alpha = 8;
  c.target_modules = {"all-linear"};
  c.use_rslora = type == "qwen3";  // alpha / sqrt(r) on one of the four
  c.init_seed = 5;
  return c;
}

// Writes base, adapter (F32 and BF16) and merged model for `type` under dir; our logits in r.
void write_ours(const TempDir& dir, const std::string& type, OursAndTheirs& r) {
  const std::string base = dir.str(type), ad = dir.str(type + "-adapter"), ad16 = dir.str(type + "-adapter-bf16");
  model::write_random_checkpoint(test::tiny_config(type), 41, base, at::kFloat, 0.15);
  auto m = model::load_model(base);
  LoraConfig c = our_lora(type);
  lora::attach(m, c);
  {
    at::NoGradGuard ng;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(17);
    for (auto& [name, lin] : m.projections())
      if (lin->lora) lin->lora->B.normal_(0, 0.05, gen);
  }
  lora::save_peft(m, c, ad, base);
  std::vector<std::pair<std::string, at::Tensor>> bf16;
  for (auto& [key, t] : lora::adapter_tensors(m)) bf16.emplace_back(key, t.detach().to(at::kBFloat16));
  std::filesystem::create_directories(ad16);
  model::save_tensors(ad16 + "/adapter_model.safetensors", bf16, {{"format", "pt"}});
  lora::write_peft_config(c, ad16, base);
  r.ours_adapter = hf::model_logits(m, hf::tiny_tokens());

  auto m16 = model::load_model(base);
  lora::load_peft(m16, ad16);  // the bf16-rounded adapter, computed in f32
  r.ours_bf16_adapter = hf::model_logits(m16, hf::tiny_tokens());

  lora::merge(m);
  model::save_model(m, dir.str(type + "-merged"));
  r.ours_merged = hf::model_logits(m, hf::tiny_tokens());
}

const ExportRun& export_run() {
  static const TempDir dir;
  static const ExportRun run = [] {
    ExportRun r;
    if (auto ok = hf::python_installed(); !ok) {
      r.error = ok.message();
      return r;
    }
    hf::OracleBatch batch;
    for (auto& type : kTypes) {
      write_ours(dir, type, r.by_type[type]);
      const auto& ids = hf::tiny_tokens();
      batch.logits(dir.str(type), ids, dir.str(type + "-base.f32"));
      batch.logits(dir.str(type), ids, dir.str(type + "-peft.f32"), dir.str(type + "-adapter"));
      batch.logits(dir.str(type), ids, dir.str(type + "-peft-bf16.f32"), dir.str(type + "-adapter-bf16"));
      batch.logits(dir.str(type + "-merged"), ids, dir.str(type + "-merged.f32"));
    }
    if (auto ok = batch.run(dir); !ok) {
      r.error = ok.message();
      return r;
    }
    for (auto& type : kTypes) {
      auto& t = r.by_type[type];
      t.hf_base = hf::read_logits(dir.str(type + "-base.f32"), kT);
      t.peft_adapter = hf::read_logits(dir.str(type + "-peft.f32"), kT);
      t.peft_bf16_adapter = hf::read_logits(dir.str(type + "-peft-bf16.f32"), kT);
      t.hf_merged = hf::read_logits(dir.str(type + "-merged.f32"), kT);
    }
    return r;
  }();
  return run;
}

::testing::AssertionResult export_ran() {
  if (export_run().error.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << export_run().error;
}

// The adapter must move the logits well beyond the tolerance, or agreement proves nothing.
void expect_adapter_matters(const at::Tensor& with, const at::Tensor& base, const std::string& what) {
  EXPECT_GT(hf::rel_diff(with, base, (what + ": adapter vs base").c_str()), 100 * hf::kLogitTol);
}
}  // namespace

// PEFT makes and saves the adapter (alpha/r and rsLoRA's alpha/sqrt(r) scaling, all or some target
// modules, r 4 and 8); our PEFT loader attaches it; PEFT's logits are the reference.
TEST(PeftOracle, PeftWrittenAdapterThroughOurPeftLoader) {
  ASSERT_TRUE(hf::python_installed());
  struct Case {
    std::string shape, targets;
    int r;
    double alpha;
    bool rslora;
    int64_t n_modules;  // adapted projections per layer
  };
  const std::string all = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj";
  const std::vector<Case> cases = {{"tiny-llama", all, 4, 8, false, 7},
                                   {"tiny-qwen2", "q_proj,v_proj,down_proj", 8, 16, false, 3},
                                   {"tiny-qwen3", all, 4, 8, true, 7},
                                   {"tiny-mistral", "q_proj,k_proj,v_proj,o_proj", 4, 8, false, 4}};
  TempDir dir;
  hf::OracleBatch batch;
  for (auto& c : cases) {
    std::string base = dir.str(c.shape), ad = dir.str(c.shape + "-adapter");
    ASSERT_TRUE(hf::random_hf_model(c.shape, base, 8));
    batch.peft_lora(base, ad, 9, c.r, c.alpha, c.rslora, c.targets);
    batch.logits(base, hf::tiny_tokens(), dir.str(c.shape + "-base.f32"));
    batch.logits(base, hf::tiny_tokens(), dir.str(c.shape + "-peft.f32"), ad);
  }
  ASSERT_TRUE(batch.run(dir));
  for (auto& c : cases) {
    SCOPED_TRACE(c.shape);
    auto base = hf::read_logits(dir.str(c.shape + "-base.f32"), kT);
    auto peft = hf::read_logits(dir.str(c.shape + "-peft.f32"), kT);
    auto m = model::load_model(dir.str(c.shape));
    LoraConfig cfg = lora::load_peft(m, dir.str(c.shape + "-adapter"));
    EXPECT_EQ(cfg.r, c.r);
    EXPECT_EQ(cfg.use_rslora, c.rslora);
    int64_t filled = 0;
    for (auto& [name, lin] : m.projections()) filled += lin->lora.has_value();
    EXPECT_EQ(filled, c.n_modules * m.config.num_hidden_layers);

    EXPECT_LE(hf::rel_diff(hf::model_logits(m, hf::tiny_tokens()), peft, (c.shape + " full").c_str()), hf::kLogitTol);
    EXPECT_LE(hf::rel_diff(hf::decode_logits(m, hf::tiny_tokens()), peft, (c.shape + " decoded").c_str()),
              hf::kLogitTol);
    expect_adapter_matters(peft, base, c.shape);
    m.adapters_enabled = false;
    EXPECT_LE(hf::rel_diff(hf::model_logits(m, hf::tiny_tokens()), base, (c.shape + " adapters off").c_str()),
              hf::kLogitTol)
        << "adapters switched off must give the base logits";
  }
}

// lora::save_peft's folder (adapter_model.safetensors + adapter_config.json) through
// PeftModel.from_pretrained.
TEST(PeftOracle, OurSavedAdapterThroughPeft) {
  ASSERT_TRUE(export_ran());
  for (auto& type : kTypes) {
    SCOPED_TRACE(type);
    auto& t = export_run().by_type.at(type);
    EXPECT_LE(hf::rel_diff(t.ours_adapter, t.peft_adapter, type.c_str()), hf::kLogitTol);
    expect_adapter_matters(t.peft_adapter, t.hf_base, type);
  }
}

// The same adapter with BF16 tensors (a bf16-published version's export): PEFT and our loader
// both widen the bf16 values to f32.
TEST(PeftOracle, OurBf16AdapterThroughPeft) {
  ASSERT_TRUE(export_ran());
  for (auto& type : kTypes) {
    SCOPED_TRACE(type);
    auto& t = export_run().by_type.at(type);
    EXPECT_LE(hf::rel_diff(t.ours_bf16_adapter, t.peft_bf16_adapter, type.c_str()), hf::kLogitTol);
    expect_adapter_matters(t.peft_bf16_adapter, t.hf_base, type);
    // The bf16 rounding shows in PEFT's logits: the file PEFT read held the rounded values.
    EXPECT_GT(hf::rel_diff(t.peft_bf16_adapter, t.peft_adapter, (type + " PEFT: bf16 vs f32 adapter").c_str()), 0);
  }
}

// lora::merge + save_model (`bucketrl merge`) through AutoModelForCausalLM: the merged model
// computes what the base with the adapter computes (W + scale B A, rounded once to f32).
TEST(PeftOracle, OurMergedModelThroughTransformers) {
  ASSERT_TRUE(export_ran());
  for (auto& type : kTypes) {
    SCOPED_TRACE(type);
    auto& t = export_run().by_type.at(type);
    EXPECT_LE(hf::rel_diff(t.ours_adapter, t.hf_merged, (type + " ours with adapter").c_str()), hf::kLogitTol);
    EXPECT_LE(hf::rel_diff(t.ours_merged, t.hf_merged, (type + " ours merged").c_str()), hf::kLogitTol);
    EXPECT_LE(hf::rel_diff(t.peft_adapter, t.hf_merged, (type + " PEFT with adapter").c_str()), hf::kLogitTol);
    expect_adapter_matters(t.hf_merged, t.hf_base, type);
  }
}
