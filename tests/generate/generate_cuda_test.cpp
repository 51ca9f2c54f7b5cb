// Generation on the GPU against the CPU: greedy and sampled tokens of random parity models in
// f32 (Llama, Qwen2, Qwen3, Mistral; Llama 3.x's and YaRN's RoPE scaling) equal the CPU's (same
// uniforms per completion), the prefill's fused attention equals the CPU's attention, bf16
// logits stay within bf16's tolerance of f32, and CUDA-graph replay gives bit-identical results
// to the same steps run eagerly. Skips without a GPU.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include "../cuda_util.h"
#include "../model/test_util.h"
#include "generate/generate.h"
#include "model/loader.h"

using namespace brl;
using gen::GenerateOptions;

namespace {
const int kThreads = test::init_threads();
const std::vector<std::vector<int32_t>> kPrompts = {{5, 9, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {40}, {7, 7}};

model::Model on_cuda(const model::ModelConfig& c, uint64_t seed, double std, at::ScalarType dt = at::kFloat) {
  auto m = model::random_model(c, seed, std);
  if (dt != at::kFloat) m.to(dt);
  m.to(at::Device(at::kCUDA));
  return m;
}

// A tiny_config family, or one with RoPE scaling ("llama3": Llama 3.x's; "qwen2-yarn": YaRN's,
// with its attention factor), whose frequencies the GPU computes on the device.
model::ModelConfig family(const std::string& name) {
  const bool llama3 = name == "llama3", yarn = name == "qwen2-yarn";
  auto c = test::tiny_config(llama3 ? "llama" : yarn ? "qwen2" : name);
  if (llama3 || yarn) {
    c.max_position_embeddings = 512;
    c.rope_scaling.type = llama3 ? "llama3" : "yarn";
    c.rope_scaling.factor = llama3 ? 8 : 4;
    c.rope_scaling.original_max_position_embeddings = 16;  // shorter than the sequences here
  }
  return c;
}

void expect_same(const std::vector<gen::Completion>& gpu, const std::vector<gen::Completion>& cpu, double lp_tol,
                 const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < gpu.size(); ++i) {
    EXPECT_EQ(gpu[i].tokens, cpu[i].tokens) << what << " completion " << i;
    EXPECT_EQ(gpu[i].finish, cpu[i].finish) << what << " completion " << i;
    if (gpu[i].tokens != cpu[i].tokens) continue;
    for (size_t k = 0; k < gpu[i].logprobs.size(); ++k)
      EXPECT_NEAR(gpu[i].logprobs[k], cpu[i].logprobs[k], lp_tol) << what << " completion " << i << " step " << k;
  }
}
}  // namespace

class CudaFamilies : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaFamilies, GreedyAndSampledEqualCpuInF32) {
  REQUIRE_GPU();
  test::strict_fp32();
  auto c = family(GetParam());
  auto cpu = model::random_model(c, 41, 0.3);
  auto gpu = on_cuda(c, 41, 0.3);
  std::vector<GenerateOptions> cases(5);
  cases[0].temperature = 0;
  cases[1].temperature = 1.0;
  cases[2].temperature = 0.8, cases[2].top_k = 30, cases[2].top_p = 0.9;
  cases[3].temperature = 0.9, cases[3].min_p = 0.05, cases[3].repetition_penalty = 1.3;  // seen mask on the GPU
  cases[4].temperature = 0, cases[4].repetition_penalty = 1.5;
  for (auto& o : cases) {
    o.max_new_tokens = 24;
    o.num_generations = 4;
    o.stop_token_ids = {3};
    o.seed = 11;
    // The GPU replays CUDA graphs over a static cache; the CPU decodes its dynamic batch.
    expect_same(gen::generate(gpu, kPrompts, o), gen::generate(cpu, kPrompts, o), 1e-4,
                "T " + std::to_string(o.temperature));
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, CudaFamilies,
                         ::testing::Values("llama", "qwen2", "qwen3", "mistral", "llama3", "qwen2-yarn"));

TEST(CudaGenerate, FusedPrefillAttentionEqualsCpu) {
  REQUIRE_GPU();
  test::strict_fp32();
  auto c = test::tiny_config("qwen2");
  auto cpu = model::random_model(c, 42, 0.3);
  auto gpu = on_cuda(c, 42, 0.3);
  c10::InferenceMode g;
  auto ids = at::randint(0, c.vocab_size, {3, 17}, at::kLong);
  for (bool padded : {true, false}) {  // the memory-efficient kernel with a mask; flash, is_causal
    auto mask = at::ones({3, 17}, at::kBool);
    if (padded) mask.narrow(1, 0, 5).select(0, 1).fill_(false);  // left padding on one row
    auto pos = model::positions_from_mask(mask);
    auto want = cpu.forward(ids, pos, nullptr, mask);
    auto got = gpu.forward(ids.cuda(), pos.cuda(), nullptr, mask.cuda());
    EXPECT_LT(test::rel_max_diff(got, want), 1e-5) << (padded ? "padded" : "causal only");
  }
}

TEST(CudaGenerate, GraphReplayEqualsEagerBitForBit) {
  REQUIRE_GPU();
  auto c = model::named_shape("tiny");
  auto gpu = on_cuda(c, 43, 0.05, at::kBFloat16);
  GenerateOptions o;
  o.temperature = 1.0;
  o.top_p = 0.95;
  o.max_new_tokens = 40;
  o.num_generations = 8;
  o.seed = 3;
  auto graphed = gen::generate(gpu, kPrompts, o);
  o.cuda_graphs = false;
  auto eager = gen::generate(gpu, kPrompts, o);
  expect_same(graphed, eager, 0.0, "graph vs eager");
}

// bf16 weights and activations against f32 on the CPU: logits of a full forward within bf16's
// tolerance. bf16 keeps 8 significant bits (relative step 2^-8 = 0.4 %); over 4 layers the
// error grows to a few of those steps, so 4 % of the largest logit.
TEST(CudaGenerate, Bf16LogitsWithinTolerance) {
  REQUIRE_GPU();
  auto c = test::tiny_config("qwen2");
  c.hidden_size = 256, c.intermediate_size = 512, c.num_hidden_layers = 4, c.head_dim = 64, c.vocab_size = 1000;
  auto cpu = model::random_model(c, 44, 0.05);
  auto gpu = on_cuda(c, 44, 0.05, at::kBFloat16);
  c10::InferenceMode g;
  auto ids = at::randint(0, c.vocab_size, {2, 33}, at::kLong);
  auto want = cpu.logits(ids);
  auto got = gpu.logits(ids.cuda()).to(at::kFloat);
  const double rel = test::rel_max_diff(got, want);
  std::printf("bf16 vs f32 logits: max |diff| / max |logit| = %.4f\n", rel);
  EXPECT_LT(rel, 4e-2);
  // The argmax agrees wherever the f32 top-2 margin exceeds that tolerance.
  auto top2 = std::get<0>(want.topk(2, -1));
  auto clear = (top2.select(-1, 0) - top2.select(-1, 1)) > 4e-2 * want.abs().max();
  auto agree = got.argmax(-1).cpu() == want.argmax(-1);
  const bool all_agree = (agree | clear.logical_not()).all().item<bool>();
  EXPECT_TRUE(all_agree);
}
