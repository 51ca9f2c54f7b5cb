// Our samplers against transformers' own sampling chain (tools/hf/oracle.py: GenerationMixin.
// _get_logits_processor, so HF's order too: the repetition penalty over each row's unpadded
// prompt, then temperature, top-k, top-p, min-p). Both samplers (sample_row on the host,
// sample_rows' tensor ops, what the GPU runs) pick by inverse CDF, so a grid of N uniforms
// u = (j + 1/2) / N maps to each token a count within one of N x its probability: compared with
// HF's probabilities, the grid gives the whole distribution without sampling noise. And greedy
// decoding with a repetition penalty equals model.generate's tokens on a Python-written
// checkpoint (the penalty over the prompt and the completion so far), in both decode modes.
//
// Tolerance per token: |count / N - p_HF| <= 1 / N (the grid's resolution) + 1e-5 (HF's float32
// softmax against our float64 weights).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../model/test_util.h"
#include "generate/generate.h"
#include "generate/sample_rows.h"
#include "generate/sampler.h"
#include "model/loader.h"

using namespace brl;
using namespace brl::gen;
using nlohmann::json;
namespace hf = brl::test::hf;

namespace {
const int kThreads = brl::test::init_threads();
constexpr int64_t kRows = 6, kV = 61, kGrid = 4096;
constexpr double kProbTol = 1.0 / kGrid + 1e-5;

struct Case {
  std::string name;
  SamplerConfig cfg;
};
// min-p alone (no sort: id order), after top-k, after top-p, the penalty alone and with every
// filter; the plain top-k / top-p chain as before (the order of HF's chain).
const std::vector<Case> kCases = {
    {"min_p", {0.7, 0, 1.0, 0.1, 1.0}},        {"top_k+min_p", {1.0, 10, 1.0, 0.2, 1.0}},
    {"top_p+min_p", {0.8, 0, 0.9, 0.05, 1.0}}, {"penalty", {1.0, 0, 1.0, 0.0, 1.3}},
    {"penalty<1", {0.9, 0, 1.0, 0.0, 0.7}},    {"all", {0.6, 20, 0.95, 0.1, 1.5}},
    {"top_k+top_p", {0.7, 5, 0.8, 0.0, 1.0}},
};

// Each row's prompt: left-padded (pad id 0, masked) ids, lengths 1..kL, with repeats.
constexpr int64_t kL = 9;
std::vector<std::vector<int32_t>> row_prompts() {
  std::vector<std::vector<int32_t>> p;
  for (int64_t r = 0; r < kRows; ++r) {
    std::vector<int32_t> ids;
    for (int64_t i = 0; i <= (r * 3) % kL; ++i) ids.push_back(static_cast<int32_t>((r * 7 + i * 13) % 20 + 1));
    p.push_back(ids);
  }
  return p;
}

json to_json(const at::Tensor& t) {
  json rows = json::array();
  auto c = t.to(at::kDouble).contiguous();
  for (int64_t i = 0; i < c.size(0); ++i)
    rows.push_back(std::vector<double>(c[i].data_ptr<double>(), c[i].data_ptr<double>() + c.size(1)));
  return rows;
}

// HF's probabilities [kRows, kV] for each case, from one Python start.
std::vector<at::Tensor> hf_probs(const at::Tensor& logits, const brl::test::TempDir& dir) {
  const auto prompts = row_prompts();
  json ids = json::array(), mask = json::array();
  for (auto& p : prompts) {
    std::vector<int64_t> row(kL - p.size(), 0), m(kL - p.size(), 0);
    for (auto t : p) row.push_back(t), m.push_back(1);
    ids.push_back(row);
    mask.push_back(m);
  }
  hf::OracleBatch batch;
  for (size_t i = 0; i < kCases.size(); ++i) {
    const auto& c = kCases[i].cfg;
    json spec = {{"logits", to_json(logits)},
                 {"input_ids", ids},
                 {"attention_mask", mask},
                 {"temperature", c.temperature},
                 {"top_k", c.top_k},
                 {"top_p", c.top_p},
                 {"min_p", c.min_p > 0 ? json(c.min_p) : json(nullptr)},
                 {"repetition_penalty", c.repetition_penalty}};
    brl::test::write_file(dir.str("spec" + std::to_string(i) + ".json"), spec.dump());
    batch.lines.push_back(
        {"warp", dir.str("spec" + std::to_string(i) + ".json"), dir.str("probs" + std::to_string(i))});
  }
  EXPECT_TRUE(batch.run(dir));
  std::vector<at::Tensor> out;
  for (size_t i = 0; i < kCases.size(); ++i) {
    json j = json::parse(brl::test::read_file(dir.str("probs" + std::to_string(i))));
    std::vector<at::Tensor> rows;
    for (auto& r : j["probs"]) rows.push_back(at::tensor(r.get<std::vector<double>>(), at::kDouble));
    out.push_back(at::stack(rows));
  }
  return out;
}

// The grid's counts per token, as a distribution [kV].
at::Tensor grid_distribution(const std::vector<int64_t>& tokens) {
  auto d = at::zeros({kV}, at::kDouble);
  for (auto t : tokens) d[t] += 1.0 / kGrid;
  return d;
}

// max over tokens of |ours - HF|; also: every token outside HF's support got no grid point.
double compare(const at::Tensor& ours, const at::Tensor& theirs, const std::string& what) {
  EXPECT_EQ(((theirs == 0) & (ours > 0)).sum().item<int64_t>(), 0) << what << ": tokens outside HF's support";
  const double d = (ours - theirs).abs().max().item<double>();
  EXPECT_LE(d, kProbTol) << what;
  return d;
}
}  // namespace

TEST(HfSamplingOracle, SamplersGiveTransformersDistributions) {
  ASSERT_TRUE(hf::python_installed());
  brl::test::TempDir dir;
  at::manual_seed(5);
  const at::Tensor logits = at::randn({kRows, kV}) * 2.5;
  const auto theirs = hf_probs(logits, dir);
  const auto prompts = row_prompts();
  std::vector<double> u(kGrid);
  for (int64_t j = 0; j < kGrid; ++j) u[j] = (static_cast<double>(j) + 0.5) / kGrid;
  const at::Tensor ut = at::tensor(u, at::kDouble);
  for (size_t i = 0; i < kCases.size(); ++i) {
    const auto& [name, cfg] = kCases[i];
    SCOPED_TRACE(name);
    double worst = 0;
    // HF's chain must move the distribution away from plain sampling at the temperature, else
    // the case tests nothing.
    const double moved =
        (theirs[i] - at::softmax(logits.to(at::kDouble) / cfg.temperature, -1)).abs().max().item<double>();
    EXPECT_GT(moved, 0.02) << "HF's chain changed nothing";
    for (int64_t r = 0; r < kRows; ++r) {
      const at::Tensor want = theirs[i][r];
      std::vector<int32_t> seen = prompts[r];
      std::sort(seen.begin(), seen.end());
      seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
      // The host sampler, on the row as the dynamic decode path penalises it.
      std::vector<float> row(logits[r].data_ptr<float>(), logits[r].data_ptr<float>() + kV);
      if (cfg.repetition_penalty != 1.0) apply_repetition_penalty(row.data(), seen, cfg.repetition_penalty);
      std::vector<int64_t> host;
      for (double x : u) host.push_back(sample_row(row.data(), kV, cfg, x));
      worst = std::max(worst, compare(grid_distribution(host), want, "sample_row row " + std::to_string(r)));
      // The tensor sampler on kGrid copies of the row with its seen mask.
      auto mask = at::zeros({kV}, at::kBool);
      for (auto t : seen) mask[t] = true;
      auto [tok, lp] =
          sample_rows(logits[r].expand({kGrid, kV}).contiguous(), ut, cfg, mask.expand({kGrid, kV}).contiguous());
      std::vector<int64_t> batched(tok.data_ptr<int64_t>(), tok.data_ptr<int64_t>() + kGrid);
      worst = std::max(worst, compare(grid_distribution(batched), want, "sample_rows row " + std::to_string(r)));
    }
    std::printf("    %-12s max |ours - HF| per token %.2e (grid 1/%lld; HF against plain sampling %.2f)\n",
                name.c_str(), worst, static_cast<long long>(kGrid), moved);
  }
}

// Greedy decoding with a repetition penalty (the penalty applies to greedy too: HF runs it as a
// logits processor) equals transformers' generate on a checkpoint written by Python, token for
// token, in the dynamic (CPU) and static (GPU-shaped) decode paths; without the penalty the
// tokens differ, so the penalty is what the comparison sees.
TEST(HfSamplingOracle, GreedyRepetitionPenaltyEqualsTransformersGenerate) {
  ASSERT_TRUE(hf::python_installed());
  brl::test::TempDir dir;
  ASSERT_TRUE(hf::random_hf_model("tiny-qwen2", dir.str("m"), 17));
  const std::vector<std::vector<int64_t>> prompts = {{5, 9, 2, 9}, {40, 41, 42, 43, 44, 45}};
  constexpr int kNew = 24;
  constexpr double kPenalty = 1.8;
  hf::OracleBatch batch;
  for (size_t i = 0; i < prompts.size(); ++i)
    for (double pen : {1.0, kPenalty})
      batch.lines.push_back({"generate", dir.str("m"), hf::join_ids(prompts[i]),
                             dir.str("gen" + std::to_string(i) + "_" + std::to_string(pen != 1.0)), "--max-new-tokens",
                             std::to_string(kNew), "--repetition-penalty", std::to_string(pen)});
  ASSERT_TRUE(batch.run(dir));
  auto m = model::load_model(dir.str("m"));
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    std::vector<int32_t> p(prompts[i].begin(), prompts[i].end());
    std::vector<std::vector<int32_t>> ours_by_penalty;
    for (double pen : {1.0, kPenalty}) {
      auto theirs =
          json::parse(brl::test::read_file(dir.str("gen" + std::to_string(i) + "_" + std::to_string(pen != 1.0))))
              .get<std::vector<int32_t>>();
      for (auto decode : {GenerateOptions::Decode::kDynamic, GenerateOptions::Decode::kStatic}) {
        GenerateOptions o;
        o.temperature = 0;
        o.max_new_tokens = kNew;
        o.repetition_penalty = pen;
        o.stop_token_ids = m.config.eos_token_ids;
        o.decode = decode;
        auto c = generate(m, {p}, o);
        EXPECT_EQ(c[0].tokens, theirs) << "penalty " << pen
                                       << (decode == GenerateOptions::Decode::kStatic ? " static" : " dynamic");
        if (decode == GenerateOptions::Decode::kDynamic) ours_by_penalty.push_back(c[0].tokens);
      }
    }
    EXPECT_NE(ours_by_penalty[0], ours_by_penalty[1]) << "the penalty changed nothing: the comparison tests nothing";
  }
}
