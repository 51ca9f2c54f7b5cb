// Batched generation against full uncached forward passes: greedy tokens are the argmax and
// every reported log-prob equals log_softmax of the full forward at the sampled token, for
// left-padded multi-prompt batches with per-sequence stops. Seeds repeat; top-k / top-p
// restrict the support and sample in proportion to the renormalized probabilities; the static
// (GPU-shaped) path picks what the dynamic one does, min-p and the repetition penalty included
// (tests/generate/hf_sampling_oracle_test.cpp compares both with transformers).
#include "generate/generate.h"
#include "generate/sample_rows.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <thread>

#include "model/threads.h"
#include "model/loader.h"
#include "util/error.h"

using namespace brl;
using namespace brl::gen;

namespace {
const int kThreads = brl::model::set_compute_threads(0);

model::ModelConfig cfg_of(const std::string& type) {
  auto c = model::named_shape("tiny");  // qwen2, vocab 256, 2 layers, GQA 4/2
  c.model_type = type;
  c.attention_bias = type == "qwen2";
  c.qk_norm = type == "qwen3";
  c.vocab_size = 61;
  return c;
}

const std::vector<std::vector<int32_t>> kPrompts = {{5, 9, 2}, {1, 2, 3, 4, 5, 6, 7}, {40}};

// Full uncached log-softmax of prompt + generated prefix, at each generated position, with the
// logits divided by the sampling temperature (1 when greedy), as TRL's trainer takes them.
void check_against_full_forward(const model::Model& m, const std::vector<int32_t>& prompt, const Completion& c,
                                bool greedy, double temperature = 1.0) {
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  seq.insert(seq.end(), c.tokens.begin(), c.tokens.end());
  auto ids = at::tensor(at::ArrayRef<int64_t>(seq), at::kLong);
  at::Tensor logp;
  {
    at::NoGradGuard ng;
    logp = at::log_softmax(m.logits(ids)[0] / temperature, -1);  // [T, V]
  }
  const int64_t n = prompt.size();
  ASSERT_EQ(c.logprobs.size(), c.tokens.size());
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    auto row = logp[n - 1 + i];
    // Cached decode and the full pass sum in different orders (and thread splits): float32
    // rounding on log-probs of magnitude ~3 reaches ~1.3e-5 (measured), so 5e-5.
    EXPECT_NEAR(c.logprobs[i], row[c.tokens[i]].item<float>(), 5e-5) << "step " << i;
    if (greedy) {
      EXPECT_EQ(c.tokens[i], row.argmax().item<int64_t>()) << "step " << i;
    }
  }
}
}  // namespace

class Families : public ::testing::TestWithParam<std::string> {};

TEST_P(Families, GreedyMatchesFullForwardWithStops) {
  auto m = model::random_model(cfg_of(GetParam()), 31, 0.3);
  GenerateOptions o;
  o.temperature = 0;
  o.max_new_tokens = 12;
  o.num_generations = 2;
  // Stop on the greedy continuation's 3rd token of prompt 0, so rows finish at different steps.
  auto probe = generate(m, {kPrompts[0]}, o);
  o.stop_token_ids = {probe[0].tokens[2]};
  auto out = generate(m, kPrompts, o);
  ASSERT_EQ(out.size(), 6u);
  bool saw_stop = false, saw_length = false;
  for (auto& c : out) {
    check_against_full_forward(m, kPrompts[c.prompt_index], c, true);
    if (c.finish == FinishReason::kStop) {
      saw_stop = true;
      EXPECT_EQ(c.tokens.back(), o.stop_token_ids[0]);
    } else {
      saw_length = true;
      EXPECT_EQ(c.tokens.size(), 12u);
    }
  }
  EXPECT_TRUE(saw_stop);
  EXPECT_EQ(out[0].tokens.size(), 3u);
  (void)saw_length;
  // Greedy: both samples of a prompt agree, and a rerun is identical.
  EXPECT_EQ(out[2].tokens, out[3].tokens);
  auto again = generate(m, kPrompts, o);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(again[i].tokens, out[i].tokens);
}

TEST_P(Families, SampledLogprobsMatchFullForward) {
  auto m = model::random_model(cfg_of(GetParam()), 32, 0.3);
  GenerateOptions o;
  o.temperature = 0.8;
  o.top_k = 20;
  o.top_p = 0.9;
  o.max_new_tokens = 10;
  o.num_generations = 4;
  o.stop_token_ids = {7, 11};
  o.seed = 123;
  auto out = generate(m, kPrompts, o);
  ASSERT_EQ(out.size(), 12u);
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].prompt_index, static_cast<int64_t>(i / 4));
    EXPECT_EQ(out[i].sample_index, static_cast<int64_t>(i % 4));
    check_against_full_forward(m, kPrompts[out[i].prompt_index], out[i], false, o.temperature);
  }
}

// Static decoding (the GPU's fixed-shape steps, sampling with tensor ops) against the dynamic
// CPU path and against full forward passes: same tokens, stops and log-probs.
TEST_P(Families, StaticDecodeEqualsDynamic) {
  auto m = model::random_model(cfg_of(GetParam()), 35, 0.3);
  std::vector<GenerateOptions> cases(5);
  cases[0].temperature = 0;
  cases[1].temperature = 0.9;
  cases[2].temperature = 0.8, cases[2].top_k = 20, cases[2].top_p = 0.9;
  // min-p and the repetition penalty (the static path keeps the penalised tokens on the device);
  // log-probs stay the model's own, before both.
  cases[3].temperature = 0.9, cases[3].min_p = 0.1, cases[3].repetition_penalty = 1.4;
  cases[4].temperature = 0, cases[4].repetition_penalty = 1.6;
  for (auto& o : cases) {
    const bool plain_greedy = o.temperature == 0 && o.repetition_penalty == 1.0;
    o.max_new_tokens = 10;
    o.num_generations = 3;
    o.stop_token_ids = {7, 11};
    o.seed = 5;
    o.decode = GenerateOptions::Decode::kDynamic;
    auto dyn = generate(m, kPrompts, o);
    o.decode = GenerateOptions::Decode::kStatic;
    auto st = generate(m, kPrompts, o);
    ASSERT_EQ(st.size(), dyn.size());
    int stops = 0;
    for (size_t i = 0; i < st.size(); ++i) {
      EXPECT_EQ(st[i].tokens, dyn[i].tokens) << "T " << o.temperature << " completion " << i;
      EXPECT_EQ(st[i].finish, dyn[i].finish);
      stops += st[i].finish == FinishReason::kStop;
      ASSERT_EQ(st[i].logprobs.size(), dyn[i].logprobs.size());
      for (size_t k = 0; k < st[i].logprobs.size(); ++k) EXPECT_NEAR(st[i].logprobs[k], dyn[i].logprobs[k], 2e-5);
      check_against_full_forward(m, kPrompts[st[i].prompt_index], st[i], plain_greedy,
                                 o.temperature > 0 ? o.temperature : 1.0);
    }
    if (o.temperature > 0 && o.repetition_penalty == 1.0) {
      EXPECT_GT(stops, 0) << "the cases should exercise stops";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Generate, Families, ::testing::Values("llama", "qwen2", "qwen3"));

TEST(Generate, SeedRepeatsAndDiffers) {
  auto m = model::random_model(cfg_of("qwen2"), 33, 0.3);
  GenerateOptions o;
  o.max_new_tokens = 16;
  o.num_generations = 3;
  o.seed = 7;
  auto a = generate(m, kPrompts, o), b = generate(m, kPrompts, o);
  o.seed = 8;
  auto c = generate(m, kPrompts, o);
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens);
    EXPECT_EQ(a[i].logprobs, b[i].logprobs);
    differ += a[i].tokens != c[i].tokens;
  }
  EXPECT_GT(differ, 0);
  // Samples of one prompt differ from each other (own RNG streams).
  EXPECT_NE(a[0].tokens, a[1].tokens);
}

// A batch generated in parts (first_prompt_index: what the trainer does after running out of
// memory) gives what one call gives: the same prompt indices, tokens and finish, in both decode
// modes; log-probs within the rounding of a different batch shape.
TEST(Generate, PartsEqualOneCall) {
  auto m = model::random_model(cfg_of("qwen2"), 36, 0.3);
  for (auto decode : {GenerateOptions::Decode::kDynamic, GenerateOptions::Decode::kStatic}) {
    GenerateOptions o;
    o.max_new_tokens = 12;
    o.num_generations = 3;
    o.temperature = 0.9;
    o.stop_token_ids = {7, 11};
    o.seed = 9;
    o.decode = decode;
    auto whole = generate(m, kPrompts, o);
    std::vector<Completion> parts;
    for (size_t s = 0; s < kPrompts.size(); s += 2) {  // prompts {0, 1}, then {2}
      std::vector<std::vector<int32_t>> part(kPrompts.begin() + s, kPrompts.begin() + std::min(kPrompts.size(), s + 2));
      o.first_prompt_index = static_cast<int64_t>(s);
      for (auto& c : generate(m, part, o)) parts.push_back(std::move(c));
    }
    ASSERT_EQ(parts.size(), whole.size());
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_EQ(parts[i].prompt_index, whole[i].prompt_index) << i;
      EXPECT_EQ(parts[i].sample_index, whole[i].sample_index) << i;
      EXPECT_EQ(parts[i].tokens, whole[i].tokens) << "completion " << i;
      EXPECT_EQ(parts[i].finish, whole[i].finish) << i;
      ASSERT_EQ(parts[i].logprobs.size(), whole[i].logprobs.size());
      for (size_t k = 0; k < whole[i].logprobs.size(); ++k)
        EXPECT_NEAR(parts[i].logprobs[k], whole[i].logprobs[k], 2e-5);
    }
    o.first_prompt_index = 0;  // and without the offset the third prompt draws the first's numbers
    auto alone = generate(m, {kPrompts[2]}, o);
    int differ = 0;
    for (size_t k = 0; k < alone.size(); ++k) differ += alone[k].tokens != whole[6 + k].tokens;
    EXPECT_GT(differ, 0) << "the offset changed nothing: the test would pass without it";
  }
}

// First-token frequencies over many samples follow the (filtered, renormalized) softmax.
TEST(Generate, SamplingFollowsDistribution) {
  auto m = model::random_model(cfg_of("qwen2"), 34, 1.0);
  const std::vector<int32_t> prompt = {3, 1, 4};
  at::Tensor p;
  {
    at::NoGradGuard ng;
    p = at::softmax(m.logits(at::tensor({3, 1, 4}, at::kLong))[0][2] / 0.7, -1);  // [V]
  }
  const int64_t N = 4000, V = p.size(0);
  auto sorted = std::get<1>(p.sort(-1, /*descending=*/true));
  struct Case {
    int64_t top_k;
    double top_p;
  };
  for (auto cs : {Case{0, 1.0}, Case{5, 1.0}, Case{0, 0.6}}) {
    GenerateOptions o;
    o.temperature = 0.7;
    o.top_k = cs.top_k;
    o.top_p = cs.top_p;
    o.max_new_tokens = 1;
    o.num_generations = N;
    o.seed = 99;
    auto out = generate(m, {prompt}, o);
    // The expected support and renormalized probabilities.
    std::vector<double> q(V, 0.0);
    double mass = 0;
    for (int64_t i = 0; i < V; ++i) {
      int64_t t = sorted[i].item<int64_t>();
      if (cs.top_k && i >= cs.top_k) break;
      if (cs.top_p < 1 && mass >= cs.top_p) break;
      q[t] = p[t].item<double>();
      mass += q[t];
    }
    std::vector<int64_t> count(V, 0);
    for (auto& c : out) count[c.tokens[0]]++;
    for (int64_t t = 0; t < V; ++t) {
      const double want = q[t] / mass;
      if (want == 0) {
        EXPECT_EQ(count[t], 0) << "token " << t << " outside the support (k " << cs.top_k << ", p " << cs.top_p << ")";
        continue;
      }
      const double sd = std::sqrt(N * want * (1 - want));
      EXPECT_NEAR(count[t], N * want, 5 * sd + 2) << "token " << t;
    }
  }
}

TEST(Generate, TopKOneAndTinyTopPAreGreedy) {
  auto m = model::random_model(cfg_of("qwen3"), 35, 0.3);
  GenerateOptions g;
  g.temperature = 0;
  g.max_new_tokens = 8;
  auto greedy = generate(m, kPrompts, g);
  for (auto [k, p] : {std::pair<int64_t, double>{1, 1.0}, {0, 1e-6}}) {
    GenerateOptions o = g;
    o.temperature = 1.0;
    o.top_k = k;
    o.top_p = p;
    o.seed = 5;
    auto out = generate(m, kPrompts, o);
    for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].tokens, greedy[i].tokens);
  }
}

TEST(Generate, BadOptionsAndPrompts) {
  auto m = model::random_model(cfg_of("qwen2"), 36);
  GenerateOptions o;
  o.top_p = 0;
  EXPECT_THROW(generate(m, kPrompts, o), UserError);
  o = {};
  o.num_generations = 0;
  EXPECT_THROW(generate(m, kPrompts, o), UserError);
  o = {};
  o.min_p = 1.5;
  EXPECT_THROW(generate(m, kPrompts, o), UserError);
  o = {};
  o.repetition_penalty = 0;
  EXPECT_THROW(generate(m, kPrompts, o), UserError);
  o = {};
  EXPECT_THROW(generate(m, {{}}, o), UserError);
  EXPECT_THROW(generate(m, {{1, 500}}, o), UserError);
  EXPECT_TRUE(generate(m, {}, o).empty());
}

// The batched sampler picks what the row sampler picks for the same uniform, for every mode.
TEST(SampleRows, MatchesSampleRow) {
  at::manual_seed(9);
  for (int64_t V : {61, 1000}) {
    auto logits = at::randn({300, V}) * 2.0;
    auto u = at::rand({300}, at::kDouble);
    // Each row's penalised tokens: a random tenth of the vocabulary.
    auto seen = at::rand({300, V}) < 0.1;
    std::vector<std::vector<int32_t>> seen_ids(300);
    auto sa = seen.accessor<bool, 2>();
    for (int64_t b = 0; b < 300; ++b)
      for (int64_t i = 0; i < V; ++i)
        if (sa[b][i]) seen_ids[b].push_back(static_cast<int32_t>(i));
    std::vector<SamplerConfig> cfgs = {{0, 0, 1},           {1.0, 0, 1},       {0.7, 0, 1},
                                       {1.0, 5, 1},         {1.0, 0, 0.8},     {0.6, 10, 0.9},
                                       {1.3, 1, 1},         {0.8, 0, 1, 0.05}, {1.0, 20, 0.95, 0.1},
                                       {0.9, 0, 1, 0, 1.3}, {0, 0, 1, 0, 1.5}, {0.7, 10, 0.9, 0.02, 1.2}};
    for (auto& c : cfgs) {
      auto [tok, lp] = sample_rows(logits, u, c, seen);
      const double t = c.temperature > 0 ? c.temperature : 1.0;
      auto ref_lp = at::log_softmax(logits / t, -1);
      int mismatches = 0;
      for (int64_t b = 0; b < logits.size(0); ++b) {
        auto row_t = logits[b].contiguous();
        std::vector<float> row(row_t.data_ptr<float>(), row_t.data_ptr<float>() + V);
        if (c.repetition_penalty != 1.0) apply_repetition_penalty(row.data(), seen_ids[b], c.repetition_penalty);
        int64_t want = sample_row(row.data(), V, c, u[b].item<double>());
        mismatches += tok[b].item<int64_t>() != want;
        EXPECT_NEAR(lp[b].item<float>(), ref_lp[b][tok[b].item<int64_t>()].item<float>(), 1e-5);
      }
      // f32 exponentials against sample_row's f64 ones: a uniform within ~1e-7 of a boundary
      // may fall either side; none did at this seed.
      EXPECT_EQ(mismatches, 0) << "V " << V << " T " << c.temperature << " k " << c.top_k << " p " << c.top_p
                               << " min_p " << c.min_p << " penalty " << c.repetition_penalty;
    }
  }
}
