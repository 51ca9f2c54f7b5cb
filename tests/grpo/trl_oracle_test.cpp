// Our GRPO objective (src/grpo/loss.h) against TRL's own code: GRPOTrainer._compute_loss and
// GRPOTrainer._generate_and_score_completions, run live by tools/trl/grpo_loss.py (.venv: PyPI
// trl and torch), which stubs only their inputs (the model's log-probs, the generated tokens, the
// rewards). Compared: the loss and d loss / d logps for grpo, bnpo, dr_grpo and dapo, with and
// without the k3 KL term, asymmetric clipping (epsilon 0.2, epsilon_high 0.28) hit on both sides,
// ragged masks and a truncated completion masked out, dapo's num_items_in_batch as TRL's
// generation step counts it (the whole generation batch, also across micro-batches), the logged
// clip ratio and KL, the advantages for scale_rewards group | batch | none, and for three
// weighted reward functions under multi_objective_aggregation sum_then_normalize |
// normalize_then_sum (GDPO), and the adaptive entropy controller (use_adaptive_entropy) over six
// optimizer steps of two micro-batches.
//
// Tolerances. Loss and gradients: float64 on both sides and the same operations, so
//   |ours - TRL| <= 1e-10 * max |TRL| (measured 0: bit-identical on x86-64 with torch 2.11; the
//   margin is for other summation orders, e.g. vectorised reductions on another CPU).
// Advantages: group_advantages returns float32 (it rounds its float64 result once), TRL computes
//   in float64 here, so |ours - TRL| <= 2^-23 |TRL| + 1e-12 per element (measured <= 4.6e-8 |TRL|).
// Clip ratio: TRL counts tokens in float32, so 1e-6 absolute.
//
// The newer objectives (TRL 1.16's names and defaults): cispo, sapo, luspo, vespo, sequence-level
// importance sampling (GSPO), the two-sided cap delta, the off-policy sequence mask, the
// high-entropy token mask (top_entropy_quantile, on given entropies), and the KL
// term with and without use_bias_correction_kl (TRL's default True; ours too); the sampler's
// mismatch correction (vllm_importance_sampling_*: each mode and bound, with TRL's sampling/
// metrics, and ours with the old log-probs left to the training pass). Each case's
// settings go to both sides from one JSON object (options_of), so they cannot drift apart.
// A missing Python or TRL is a failure naming scripts/setup.sh --test, not a skip.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../test_files.h"
#include "grpo/loss.h"

using namespace brl::grpo;
using nlohmann::json;

namespace {

constexpr double kLossTol = 1e-10;  // relative, float64 both sides
// sapo: TRL builds the gate temperatures with torch.where on Python floats, which gives float32
// (1.05 -> 1.0499999523), while ours are float64: measured 3.7e-7 relative, so 1e-6.
constexpr double kSapoTol = 1e-6;
constexpr double kAdvRelTol = 1.0 / (1 << 23);    // one float32 rounding (2^-24) with margin
constexpr double kClipTol = 1e-6;                 // TRL's token count is float32
constexpr double kEpsLow = 0.2, kEpsHigh = 0.28;  // asymmetric, DAPO's recommendation
constexpr double kBeta = 0.04;
constexpr int64_t kB = 8, kT = 9, kG = 4, kMaxLen = 12;  // 2 prompts x 4 completions of <= 9 tokens
const std::vector<std::string> kClippedLossTypes = {"grpo", "bnpo", "dr_grpo", "dapo"};

// ---- the batch -------------------------------------------------------------------------------

struct Batch {
  at::Tensor logps, old_logps, ref_logps;  // [B, T] float64
  at::Tensor sampling_logps;               // [B, T] the sampler's: float32 values (as vLLM gives them)
  at::Tensor entropies;                    // [B, T] in (0, 4): what the loss's entropy mask sees
  at::Tensor mask;                         // [B, T] 1 = completion token, right-padded
  at::Tensor rewards;                      // [B]
  std::vector<bool> truncated;             // [B] hit the length limit (no EOS)
};

// Seeded: log-probs in (-3, 0); old and ref log-probs off by N(0, 0.3^2), so ratios fall below
// 1 - 0.2 and above 1 + 0.28 for tokens of either advantage sign; lengths from 1 to T.
Batch random_batch(uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto f64 = at::TensorOptions().dtype(at::kDouble);
  Batch b;
  b.logps = -3.0 * at::rand({kB, kT}, gen, f64) - 0.01;
  b.old_logps = b.logps + 0.3 * at::randn({kB, kT}, gen, f64);
  b.ref_logps = b.logps + 0.3 * at::randn({kB, kT}, gen, f64);
  at::Tensor len = at::tensor({9, 1, 5, 7, 3, 9, 2, 6}, at::kLong);  // ragged; full and single-token rows
  b.mask = (at::arange(kT, at::kLong).unsqueeze(0) < len.unsqueeze(1)).to(at::kDouble);
  b.rewards = at::randint(0, 2, {kB}, gen, f64) + 0.5 * at::rand({kB}, gen, f64);
  b.truncated.assign(kB, false);
  b.entropies = 4.0 * at::rand({kB, kT}, gen, f64);
  // Drawn last, so the draws above stay as they were. N(0, 0.5^2) per token from the old
  // log-probs: token weights e^d mostly within [1/3, 3], sequence sums (up to 9 tokens) often beyond.
  b.sampling_logps = (b.old_logps + 0.5 * at::randn({kB, kT}, gen, f64)).to(at::kFloat).to(at::kDouble);
  return b;
}

json to_json(const at::Tensor& t) {
  at::Tensor c = t.to(at::kDouble).contiguous();
  if (c.dim() == 1) return json(std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel()));
  json rows = json::array();
  for (int64_t i = 0; i < c.size(0); ++i) rows.push_back(to_json(c[i]));
  return rows;
}

at::Tensor from_json(const json& j) {
  if (!j.is_array() || j.empty() || !j[0].is_array()) return at::tensor(j.get<std::vector<double>>(), at::kDouble);
  std::vector<at::Tensor> rows;
  for (auto& r : j) rows.push_back(from_json(r));
  return at::stack(rows);
}

// ---- TRL, run once for all cases ---------------------------------------------------------------

// extra: more GRPOConfig settings (delta, importance_sampling_level, ...), given to both sides.
json loss_case(const Batch& b, const std::string& type, double beta, const json& extra = json::object()) {
  json c = {{"loss_type", type},
            {"beta", beta},
            {"epsilon", kEpsLow},
            {"epsilon_high", kEpsHigh},
            {"max_completion_length", kMaxLen},
            {"num_generations", kG},
            {"scale_rewards", "group"},
            {"completion_mask", to_json(b.mask)},
            {"rewards", to_json(b.rewards)},
            {"truncated", b.truncated},
            {"logps", to_json(b.logps)},
            {"old_logps", to_json(b.old_logps)},
            {"entropies", to_json(b.entropies)}};
  if (beta != 0) {
    c["ref_logps"] = to_json(b.ref_logps);
    c["use_bias_correction_kl"] = false;  // the plain k3 term; the default (true) has its own cases
  }
  c.update(extra);
  return c;
}

// The newer objectives and knobs: name -> extra settings (type and beta in the name's case below).
struct NewerCase {
  std::string type;
  double beta;
  json extra;
};
const std::map<std::string, NewerCase>& newer_cases() {
  static const std::map<std::string, NewerCase> cases = {
      {"cispo", {"cispo", 0.0, {{"epsilon_high", 1.3}}}},  // a cap that bites on this batch (ScaleRL: 5)
      {"cispo/beta", {"cispo", kBeta, {{"epsilon_high", 1.3}}}},
      {"sapo", {"sapo", 0.0, json::object()}},
      {"sapo/temps", {"sapo", 0.0, {{"sapo_temperature_pos", 0.7}, {"sapo_temperature_neg", 1.6}}}},
      {"luspo/sequence", {"luspo", 0.0, {{"importance_sampling_level", "sequence"}}}},
      {"luspo/token", {"luspo", 0.0, json::object()}},
      {"gspo/grpo", {"grpo", 0.0, {{"importance_sampling_level", "sequence"}}}},
      {"gspo/dapo/beta", {"dapo", kBeta, {{"importance_sampling_level", "sequence"}}}},
      {"delta/dapo", {"dapo", 0.0, {{"delta", 1.5}}}},
      {"opsm/bnpo", {"bnpo", 0.0, {{"off_policy_mask_threshold", 0.05}}}},
      {"bias_kl/bnpo", {"bnpo", kBeta, {{"use_bias_correction_kl", true}}}},
      {"bias_kl/grpo", {"grpo", kBeta, {{"use_bias_correction_kl", true}}}},
      {"vespo", {"vespo", 0.0, json::object()}},
      {"vespo/beta", {"vespo", kBeta, {{"use_bias_correction_kl", true}}}},
      // float32-exact values: TRL builds k and lambda with torch.where on Python floats (float32).
      {"vespo/params",
       {"vespo",
        0.0,
        {{"vespo_k_pos", 1.5}, {"vespo_lambda_pos", 2.5}, {"vespo_k_neg", 4.0}, {"vespo_lambda_neg", 1.25}}}},
      {"entropy/grpo", {"grpo", 0.0, {{"top_entropy_quantile", 0.2}}}},
      {"entropy/dapo/beta", {"dapo", kBeta, {{"top_entropy_quantile", 0.5}}}},
      {"entropy/vespo", {"vespo", 0.0, {{"top_entropy_quantile", 0.3}}}},
      {"entropy/top_only", {"bnpo", 0.0, {{"top_entropy_quantile", 0.0}}}},
      // The entropy bonus: the mean entropy over the tokens the policy term keeps, divided by
      // the accumulation steps whatever the loss type; micro-batch 1 of 2 (TRL's split).
      {"bonus/grpo", {"grpo", 0.0, {{"entropy_coef", 0.05}}}},
      {"bonus/dapo/quantile", {"dapo", kBeta, {{"entropy_coef", 0.1}, {"top_entropy_quantile", 0.5}}}},
      {"bonus/bnpo/micro",
       {"bnpo",
        0.0,
        {{"entropy_coef", 0.02}, {"gradient_accumulation_steps", 2}, {"steps_per_generation", 2}, {"micro_batch", 1}}}},
      {"bonus/dapo/micro",
       {"dapo",
        0.0,
        {{"entropy_coef", 0.3}, {"gradient_accumulation_steps", 2}, {"steps_per_generation", 2}, {"micro_batch", 1}}}},
  };
  return cases;
}

// The sampler's mismatch correction (TRL's vllm_importance_sampling_*; TRL's generation step
// computes the weights, so these cases go through it): each mode, bounds that bite on this batch,
// several loss types; "ours_on_policy" (read by this file only): TRL's old log-probs are the
// policy's own, ours are left undefined (the training pass's, detached).
struct SamplingCase {
  std::string type;
  double beta;
  json extra;
  std::string bites;  // what TRL's metrics must show: "masked" (min weight 0), "clamped" (max = clip_max)
};
const std::map<std::string, SamplingCase>& sampling_cases() {
  static const std::map<std::string, SamplingCase> cases = [] {
    const auto mode = [](const std::string& m, json more = json::object()) {
      more["vllm_importance_sampling_mode"] = m;
      return more;
    };
    const json kMin = {"vllm_importance_sampling_clip_min", 0.3};  // drops some sequences of this batch
    std::map<std::string, SamplingCase> m = {
        {"sequence_mask/dapo", {"dapo", 0.0, json::object(), ""}},  // TRL's defaults: sequence_mask, at most 3
        {"sequence_mask/gspo", {"grpo", kBeta, {{"importance_sampling_level", "sequence"}, kMin}, "masked"}},
        {"sequence_mask/min_only",
         {"bnpo",
          0.0,
          {{"vllm_importance_sampling_clip_max", nullptr}, {"vllm_importance_sampling_clip_min", 0.5}},
          "masked"}},
        {"sequence_truncate/bnpo",
         {"bnpo", 0.0, mode("sequence_truncate", {{"vllm_importance_sampling_clip_max", 2.0}}), "clamped"}},
        {"token_truncate/dapo",
         {"dapo", kBeta,
          mode("token_truncate",
               {{"vllm_importance_sampling_clip_max", 1.25}, {"vllm_importance_sampling_clip_min", 0.8}}),
          "clamped"}},
        {"token_truncate/no_max",
         {"dr_grpo", 0.0,
          mode("token_truncate",
               {{"vllm_importance_sampling_clip_max", nullptr}, {"vllm_importance_sampling_clip_min", 0.9}}),
          ""}},
        {"token_mask/grpo",
         {"grpo", 0.0,
          mode("token_mask", {{"vllm_importance_sampling_clip_max", 1.25}, {"vllm_importance_sampling_clip_min", 0.8}}),
          "masked"}},
        {"token_mask/cispo",
         {"cispo", 0.0, mode("token_mask", {{"epsilon_high", 1.3}, {"vllm_importance_sampling_clip_max", 1.25}}),
          "masked"}},
        {"sequence_truncate/sapo",
         {"sapo", 0.0, mode("sequence_truncate", {{"vllm_importance_sampling_clip_max", 2.0}}), "clamped"}},
        {"sequence_mask/luspo", {"luspo", 0.0, {{"importance_sampling_level", "sequence"}, kMin}, "masked"}},
        {"token_truncate/vespo",
         {"vespo", 0.0, mode("token_truncate", {{"vllm_importance_sampling_clip_max", 1.25}}), "clamped"}},
        {"token_mask/vespo",
         {"vespo", kBeta, mode("token_mask", {{"vllm_importance_sampling_clip_max", 1.25}}), "masked"}},
        // The off-policy mask measures the drift from the sampler's log-probs, not the old ones.
        {"opsm/dapo", {"dapo", 0.0, {{"off_policy_mask_threshold", 0.05}, kMin}, "masked"}},
        {"on_policy/dapo", {"dapo", 0.0, {{"ours_on_policy", true}, kMin}, "masked"}},
        {"on_policy/token_truncate",
         {"grpo", kBeta,
          mode("token_truncate", {{"ours_on_policy", true}, {"vllm_importance_sampling_clip_max", 1.25}}), "clamped"}},
        // The second of two micro-batches: the generation batch's weights, split.
        {"micro/sequence_mask",
         {"dapo", 0.0, {{"gradient_accumulation_steps", 2}, {"steps_per_generation", 2}, {"micro_batch", 1}}, ""}},
    };
    return m;
  }();
  return cases;
}

// A sampling case as TRL runs it.
json sampling_case(const Batch& b, const SamplingCase& sc) {
  json c = loss_case(b, sc.type, sc.beta, sc.extra);
  c["vllm_importance_sampling_correction"] = true;
  c["sampling_logps"] = to_json(b.sampling_logps);
  if (c.value("ours_on_policy", false)) c["old_logps"] = c["logps"];
  return c;
}

std::string case_name(const std::string& type, double beta) { return type + (beta != 0 ? "/beta" : "/no_kl"); }

Batch truncated_batch() {
  Batch b = random_batch(7);
  b.truncated[3] = true;  // a 7-token completion that hit the limit: TRL zeroes its mask row
  return b;
}

at::Tensor advantage_rewards() {  // [24] = 6 groups of 4; group 2 constant (zero std), ties elsewhere
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(11);
  at::Tensor r = at::randint(0, 3, {24}, gen, at::TensorOptions().dtype(at::kDouble)) +
                 0.25 * at::rand({24}, gen, at::TensorOptions().dtype(at::kDouble));
  r.slice(0, 8, 12).fill_(1.0);
  return r;
}

// [24, 3]: three reward functions over the same 6 groups of 4; the first is constant in group
// 2 (zero std inside a group for one function only), the third is 0/1 like a correctness reward.
at::Tensor multi_rewards() {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(12);
  at::Tensor r = at::rand({24, 3}, gen, at::TensorOptions().dtype(at::kDouble)) * 2 - 0.5;
  r.slice(0, 8, 12).select(1, 0).fill_(0.75);
  r.select(1, 2).copy_(at::randint(0, 2, {24}, gen, at::TensorOptions().dtype(at::kDouble)));
  return r;
}
const std::vector<double> kMultiWeights = {1.0, 0.5, 2.0};

// Adaptive entropy control over six optimizer steps of two micro-batches each, on entropies
// whose means (~0.5, 2, 1, 0.5, 3, 3 nats) against entropy_target 1.5 (bnpo) make the controller skip the
// bonus (the first step: no measurement yet; after a step above the target), apply it, step the
// coefficient up and down, and hit both bounds (0.02 -> 0.07, 0.02, 0.07, 0.1 capped, 0.05, 0.01
// floored).
std::vector<at::Tensor> adaptive_entropies() {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(99);
  std::vector<at::Tensor> e;
  for (double scale : {1.0, 4.0, 2.0, 1.0, 6.0, 6.0})
    e.push_back(scale * at::rand({kB, kT}, gen, at::TensorOptions().dtype(at::kDouble)));
  return e;
}
const std::map<std::string, json>& adaptive_cases() {
  static const std::map<std::string, json> cases = [] {
    const json control = {{"use_adaptive_entropy", true},     {"entropy_coef", 0.02},       {"entropy_coef_min", 0.01},
                          {"entropy_coef_max", 0.1},          {"entropy_coef_delta", 0.05}, {"entropy_target", 1.5},
                          {"gradient_accumulation_steps", 2}, {"steps_per_generation", 2}};
    std::map<std::string, json> m;
    json bnpo = control, dapo = control;
    bnpo["loss_type"] = "bnpo";
    dapo["loss_type"] = "dapo";
    // The controller measures the kept tokens only: the top half, whose means are ~3/2 of the
    // whole's, against a target raised as much.
    dapo["top_entropy_quantile"] = 0.5;
    dapo["entropy_target"] = 2.0;
    m["bnpo"] = bnpo;
    m["dapo/quantile"] = dapo;
    return m;
  }();
  return cases;
}

std::map<std::string, json> all_cases() {
  std::map<std::string, json> cases;
  Batch b = random_batch(2024);
  for (auto& type : kClippedLossTypes)
    for (double beta : {0.0, kBeta}) cases[case_name(type, beta)] = loss_case(b, type, beta);
  // Micro-batches: 2 accumulation steps per generation batch; TRL computes the loss on its second split.
  for (double beta : {0.0, kBeta}) {
    json c = loss_case(b, "dapo", beta);
    c["gradient_accumulation_steps"] = 2;
    c["steps_per_generation"] = 2;
    c["micro_batch"] = 1;
    cases["micro/" + case_name("dapo", beta)] = c;
  }
  // steps_per_generation 4 over gradient_accumulation_steps 2: one generation batch feeds two
  // optimizer steps; TRL computes the loss on its fourth split (the second step's last micro-batch).
  for (auto& type : kClippedLossTypes) {
    json c = loss_case(b, type, kBeta);
    c["gradient_accumulation_steps"] = 2;
    c["steps_per_generation"] = 4;
    c["micro_batch"] = 3;
    cases["spg/" + type] = c;
  }
  Batch t = truncated_batch();
  for (auto& type : kClippedLossTypes) {
    json c = loss_case(t, type, kBeta);
    c["mask_truncated_completions"] = true;
    cases["truncated/" + type] = c;
  }
  at::Tensor r = advantage_rewards();
  json mask = to_json(at::ones({24, 3}, at::kDouble));
  for (std::string scale : {"group", "batch", "none"})
    cases["advantages/" + scale] = {
        {"rewards", to_json(r)}, {"num_generations", kG}, {"scale_rewards", scale}, {"completion_mask", mask}};
  for (std::string agg : {"sum_then_normalize", "normalize_then_sum"})
    cases["multi/" + agg] = {{"rewards", to_json(multi_rewards())},
                             {"reward_weights", kMultiWeights},
                             {"multi_objective_aggregation", agg},
                             {"num_generations", kG},
                             {"completion_mask", mask}};
  for (auto& [name, nc] : newer_cases()) cases["newer/" + name] = loss_case(b, nc.type, nc.beta, nc.extra);
  for (auto& [name, sc] : sampling_cases()) cases["sampling/" + name] = sampling_case(b, sc);
  for (auto& [name, extra] : adaptive_cases()) {
    json c = loss_case(b, extra.at("loss_type"), 0.0, extra);
    c["entropy_steps"] = json::array();
    for (auto& e : adaptive_entropies()) c["entropy_steps"].push_back(to_json(e));
    cases["adaptive/" + name] = c;
  }
  // TRL's defaults for the KL term (use_bias_correction_kl unset = True): ours' default too.
  json d = loss_case(b, "bnpo", kBeta);
  d.erase("use_bias_correction_kl");
  cases["default_kl/bnpo"] = d;
  return cases;
}

struct TrlRun {
  std::map<std::string, json> cases;  // what TRL was asked (the settings ours must use too)
  std::map<std::string, json> results;
  std::string error;  // non-empty: why TRL gave nothing
};

const TrlRun& trl() {
  static const TrlRun run = [] {
    TrlRun r;
    if (!std::filesystem::exists(BRL_PYTHON)) {
      r.error = std::string("no Python at ") + BRL_PYTHON + ": run scripts/setup.sh --test (makes .venv with trl)";
      return r;
    }
    auto cases = all_cases();
    r.cases = cases;
    json req = {{"cases", json::array()}};
    std::vector<std::string> names;
    for (auto& [name, c] : cases) {
      names.push_back(name);
      req["cases"].push_back(c);
    }
    brl::test::TempDir dir;
    brl::test::write_file(dir.str("cases.json"), req.dump());
    std::string cmd = std::string("'") + BRL_PYTHON + "' '" + BRL_SOURCE_DIR + "/tools/trl/grpo_loss.py' < '" +
                      dir.str("cases.json") + "' > '" + dir.str("out.json") + "'";
    int rc = std::system(cmd.c_str());
    if (rc != 0) {
      r.error = "TRL oracle failed (" + std::to_string(rc) + "): " + cmd +
                "\n  TRL missing or broken in .venv? run scripts/setup.sh --test";
      return r;
    }
    json out = json::parse(brl::test::read_file(dir.str("out.json")));
    for (size_t i = 0; i < names.size(); ++i) r.results[names[i]] = out["results"][i];
    return r;
  }();
  return run;
}

::testing::AssertionResult trl_ran() {
  if (trl().error.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << trl().error;
}

// ---- ours --------------------------------------------------------------------------------------

struct Ours {
  double loss = 0;
  at::Tensor grad;          // [B, T] d loss / d logps, zero outside the micro-batch
  at::Tensor entropy_grad;  // [B, T] d loss / d entropies (the bonus), likewise
  LossStats stats;
};

// grpo_loss on rows [r0, r1) of the batch, differentiated with respect to the whole logps tensor.
// on_policy: old_logps left undefined (the loss takes logps, detached).
Ours ours(const Batch& b, const at::Tensor& mask, const at::Tensor& advantages, const LossOptions& o, int64_t r0,
          int64_t r1, bool on_policy = false) {
  at::Tensor leaf = b.logps.clone().requires_grad_(true);
  at::Tensor ent = b.entropies.clone().requires_grad_(o.entropy_coef != 0);
  LossInputs in;
  in.logps = leaf.slice(0, r0, r1);
  if (!on_policy) in.old_logps = b.old_logps.slice(0, r0, r1);
  if (o.sampling_correction) in.sampling_logps = b.sampling_logps.slice(0, r0, r1);
  if (o.beta != 0) in.ref_logps = b.ref_logps.slice(0, r0, r1);
  in.advantages = advantages.slice(0, r0, r1);
  in.mask = mask.slice(0, r0, r1);
  in.entropies = ent.slice(0, r0, r1);
  Ours r;
  at::Tensor loss = grpo_loss(in, o, &r.stats);
  loss.backward();
  r.loss = loss.item<double>();
  r.grad = leaf.grad();
  r.entropy_grad = ent.grad().defined() ? ent.grad() : at::zeros_like(ent);
  return r;
}

// Our options from a case's settings; an absent key keeps our default (which must be TRL's).
LossOptions options_of(const json& c, double num_items_in_batch) {
  LossOptions o;
  o.loss_type = kLossTypes.value(c.at("loss_type"));
  o.epsilon_low = c.at("epsilon");
  o.epsilon_high = c.at("epsilon_high");
  o.beta = c.at("beta");
  o.max_completion_length = c.at("max_completion_length");
  o.use_bias_correction_kl = c.value("use_bias_correction_kl", o.use_bias_correction_kl);
  o.importance_sampling_level = kImportanceSamplingLevels.value(c.value("importance_sampling_level", "token"));
  o.delta = c.value("delta", o.delta);
  o.sapo_temperature_pos = c.value("sapo_temperature_pos", o.sapo_temperature_pos);
  o.sapo_temperature_neg = c.value("sapo_temperature_neg", o.sapo_temperature_neg);
  o.off_policy_mask_threshold = c.value("off_policy_mask_threshold", o.off_policy_mask_threshold);
  o.vespo_k_pos = c.value("vespo_k_pos", o.vespo_k_pos);
  o.vespo_lambda_pos = c.value("vespo_lambda_pos", o.vespo_lambda_pos);
  o.vespo_k_neg = c.value("vespo_k_neg", o.vespo_k_neg);
  o.vespo_lambda_neg = c.value("vespo_lambda_neg", o.vespo_lambda_neg);
  o.top_entropy_quantile = c.value("top_entropy_quantile", o.top_entropy_quantile);
  o.entropy_coef = c.value("entropy_coef", o.entropy_coef);
  o.accumulation_steps = c.value("gradient_accumulation_steps", int64_t{1});
  o.sampling_correction = c.value("vllm_importance_sampling_correction", false);
  o.sampling_correction_mode =
      kSamplingCorrectionModes.value(c.value("vllm_importance_sampling_mode", std::string("sequence_mask")));
  const json clip_max = c.value("vllm_importance_sampling_clip_max", json(3.0));  // TRL's default
  if (!clip_max.is_null()) o.sampling_clip_max = clip_max.get<double>();
  o.sampling_clip_min = c.value("vllm_importance_sampling_clip_min", 0.0);
  // What trainer.cpp passes for a micro-batch of a generation batch of num_items_in_batch tokens.
  o.num_items_in_batch = num_items_in_batch > 0 ? tokens_per_optimizer_step(num_items_in_batch, o.accumulation_steps,
                                                                            c.value("steps_per_generation", 1))
                                                : 0;
  return o;
}

double rel(double ours, double theirs) { return std::abs(ours - theirs) / std::max(std::abs(theirs), 1e-300); }
double rel(const at::Tensor& ours, const at::Tensor& theirs) {
  return (ours - theirs).abs().max().item<double>() / std::max(theirs.abs().max().item<double>(), 1e-300);
}

// Compares ours with TRL's result `t` for the rows TRL computed, with the settings of `c` (the
// case TRL ran); returns the worst relative diff.
double expect_matches(const Batch& b, const json& t, const at::Tensor& mask, double num_items_in_batch, const json& c) {
  int64_t r0 = t["rows"][0], r1 = t["rows"][1];
  const LossOptions opt = options_of(c, num_items_in_batch);
  // TRL's advantages (float64) as the input, so the loss comparison is not blurred by ours being float32.
  Ours o = ours(b, mask, from_json(t["advantages"]), opt, r0, r1, c.value("ours_on_policy", false));
  double dl = rel(o.loss, t["loss"].get<double>());
  double dg = rel(o.grad, from_json(t["grad"]));
  const double tol = opt.loss_type == LossType::sapo ? kSapoTol : kLossTol;
  EXPECT_LE(dl, tol) << "loss: ours " << o.loss << ", TRL " << t["loss"];
  EXPECT_LE(dg, tol) << "gradient";
  const double de = rel(o.entropy_grad, from_json(t["entropy_grad"]));
  if (opt.entropy_coef != 0) {
    EXPECT_LE(de, tol) << "gradient w.r.t. the entropies";
    EXPECT_GT(from_json(t["entropy_grad"]).abs().max().item<double>(), 0) << "the bonus has a gradient";
  } else {
    EXPECT_EQ(o.entropy_grad.abs().max().item<double>(), 0);
  }
  const json& m = t["metrics"];
  if (m.contains("clip_ratio/region_mean")) {
    EXPECT_NEAR(o.stats.clip_ratio, m["clip_ratio/region_mean"].get<double>(), kClipTol);
  }
  if (m.contains("cispo_clip_ratio")) {
    EXPECT_NEAR(o.stats.clip_ratio, m["cispo_clip_ratio"].get<double>(), kClipTol);
  }
  if (opt.beta != 0) {
    EXPECT_LE(rel(o.stats.kl, t["metrics"]["kl"].get<double>()), kLossTol) << "logged KL";
  }
  // TRL logs the sampler's statistics over the generation batch: comparable when the loss saw all of it.
  if (opt.sampling_correction && r0 == 0 && r1 == b.logps.size(0)) {
    const std::pair<const char*, double> logged[] = {
        {"sampling/importance_sampling_ratio/min", o.stats.is_ratio_min},
        {"sampling/importance_sampling_ratio/mean", o.stats.is_ratio_mean},
        {"sampling/importance_sampling_ratio/max", o.stats.is_ratio_max},
        {"sampling/sampling_logp_difference/mean", o.stats.sampling_logp_diff_mean},
        {"sampling/sampling_logp_difference/max", o.stats.sampling_logp_diff_max}};
    for (const auto& [name, mine] : logged) {
      EXPECT_TRUE(m.contains(name)) << name;
      if (m.contains(name)) EXPECT_NEAR(mine, m[name].get<double>(), kLossTol * std::max(1.0, std::abs(mine))) << name;
    }
  }
  return std::max({dl, dg, opt.entropy_coef != 0 ? de : 0.0});
}

}  // namespace

// Every loss type, beta 0 and beta > 0, the whole generation batch as one micro-batch; dapo with
// num_items_in_batch as TRL's generation step passes it, and with ours' default (this batch's tokens).
TEST(TrlOracle, LossAndGradientMatchTrlForEachLossType) {
  ASSERT_TRUE(trl_ran());
  Batch b = random_batch(2024);
  double worst = 0;
  for (auto& type : kClippedLossTypes) {
    for (double beta : {0.0, kBeta}) {
      SCOPED_TRACE(case_name(type, beta));
      const json& t = trl().results.at(case_name(type, beta));
      ASSERT_TRUE(t.contains("loss")) << t.dump();
      // The batch exercises both clip branches (TRL's own count, on the masked tokens).
      EXPECT_GT(t["metrics"]["clip_ratio/low_mean"].get<double>(), 0);
      EXPECT_GT(t["metrics"]["clip_ratio/high_mean"].get<double>(), 0);
      EXPECT_EQ(t["num_items_in_batch"].get<double>(), b.mask.sum().item<double>());
      const json& c = trl().cases.at(case_name(type, beta));
      worst = std::max(worst, expect_matches(b, t, b.mask, t["num_items_in_batch"].get<double>(), c));
      if (type == "dapo") worst = std::max(worst, expect_matches(b, t, b.mask, 0, c));
    }
  }
  std::printf("    max relative diff (loss, gradient) %.2e\n", worst);
}

// dapo on the second of two micro-batches: TRL divides by the generation batch's tokens
// (num_items_in_batch, rescaled by gradient_accumulation_steps / steps_per_generation = 1), which is
// what trainer.cpp passes as num_items_in_batch.
TEST(TrlOracle, DapoMicroBatchNormalizesByGenerationBatchTokens) {
  ASSERT_TRUE(trl_ran());
  Batch b = random_batch(2024);
  double worst = 0;
  for (double beta : {0.0, kBeta}) {
    SCOPED_TRACE(case_name("dapo", beta));
    const json& t = trl().results.at("micro/" + case_name("dapo", beta));
    ASSERT_TRUE(t.contains("loss")) << t.dump();
    EXPECT_EQ(t["rows"], json({kB / 2, kB}));
    EXPECT_EQ(t["num_items_in_batch"].get<double>(), b.mask.sum().item<double>());
    worst = std::max(worst, expect_matches(b, t, b.mask, t["num_items_in_batch"].get<double>(),
                                           trl().cases.at("micro/" + case_name("dapo", beta))));
  }
  std::printf("    max relative diff (loss, gradient) %.2e\n", worst);
}

// A generation batch that feeds several optimizer steps (steps_per_generation 4, grad_acc 2): dapo
// divides by the generation batch's tokens x 2 / 4 (TRL's rescaling to one accumulation window),
// the others by grad_acc; each type's loss and gradient on the last micro-batch match TRL's.
TEST(TrlOracle, StepsPerGenerationMicroBatchMatchesTrl) {
  ASSERT_TRUE(trl_ran());
  Batch b = random_batch(2024);
  double worst = 0;
  for (auto& type : kClippedLossTypes) {
    SCOPED_TRACE(type);
    const json& t = trl().results.at("spg/" + type);
    ASSERT_TRUE(t.contains("loss")) << t.dump();
    EXPECT_EQ(t["rows"], json({3 * kB / 4, kB}));
    worst = std::max(
        worst, expect_matches(b, t, b.mask, t["num_items_in_batch"].get<double>(), trl().cases.at("spg/" + type)));
  }
  std::printf("    max relative diff (loss, gradient) %.2e\n", worst);
}

// mask_truncated_completions: TRL zeroes the truncated row's mask and leaves it out of
// num_items_in_batch; an all-masked row must count as 0 / clamp(0, 1) for grpo's per-sequence mean.
TEST(TrlOracle, TruncatedCompletionMaskedOutMatchesTrl) {
  ASSERT_TRUE(trl_ran());
  Batch b = truncated_batch();
  at::Tensor kept = b.mask.clone();
  kept[3].zero_();  // as trainer.cpp drops a completion that hit the length limit
  double worst = 0;
  for (auto& type : kClippedLossTypes) {
    SCOPED_TRACE(type);
    const json& t = trl().results.at("truncated/" + type);
    ASSERT_TRUE(t.contains("loss")) << t.dump();
    EXPECT_TRUE(at::equal(from_json(t["completion_mask"]), kept));
    EXPECT_EQ(t["num_items_in_batch"].get<double>(), kept.sum().item<double>());
    worst = std::max(
        worst, expect_matches(b, t, kept, t["num_items_in_batch"].get<double>(), trl().cases.at("truncated/" + type)));
  }
  std::printf("    max relative diff (loss, gradient) %.2e\n", worst);
}

// Several reward functions (weights 1, 0.5, 2): sum_then_normalize is group_advantages of the
// weighted sum (as the trainer forms it); normalize_then_sum (GDPO) is decoupled_advantages.
TEST(TrlOracle, MultiRewardAdvantagesMatchTrlForEachAggregation) {
  ASSERT_TRUE(trl_ran());
  at::Tensor per_func = multi_rewards();
  at::Tensor w = at::tensor(kMultiWeights, at::TensorOptions().dtype(at::kDouble));
  for (std::string agg : {"sum_then_normalize", "normalize_then_sum"}) {
    SCOPED_TRACE(agg);
    const json& t = trl().results.at("multi/" + agg);
    ASSERT_TRUE(t.contains("advantages")) << t.dump();
    at::Tensor theirs = from_json(t["advantages"]);
    at::Tensor mine = (agg == "normalize_then_sum" ? decoupled_advantages(per_func, kMultiWeights, kG)
                                                   : group_advantages((per_func * w).sum(1), kG, ScaleRewards::group))
                          .to(at::kDouble);
    ASSERT_EQ(mine.numel(), theirs.numel());
    at::Tensor bound = kAdvRelTol * theirs.abs() + 1e-12;
    EXPECT_TRUE(((mine - theirs).abs() <= bound).all().item<bool>()) << "ours " << mine << "\nTRL " << theirs;
    std::printf("    %s: max |ours - TRL| / max |TRL| %.2e\n", agg.c_str(), rel(mine, theirs));
  }
  // The two differ on this data (else the comparison would not tell them apart).
  EXPECT_GT(rel(from_json(trl().results.at("multi/sum_then_normalize")["advantages"]),
                from_json(trl().results.at("multi/normalize_then_sum")["advantages"])),
            0.05);
}

// group_advantages against the advantages TRL's generation step computes from the same rewards.
TEST(TrlOracle, AdvantagesMatchTrlForEachScaleRewards) {
  ASSERT_TRUE(trl_ran());
  at::Tensor r = advantage_rewards();
  for (std::string scale : {"group", "batch", "none"}) {
    SCOPED_TRACE(scale);
    const json& t = trl().results.at("advantages/" + scale);
    ASSERT_TRUE(t.contains("advantages")) << t.dump();
    at::Tensor theirs = from_json(t["advantages"]);
    at::Tensor mine = group_advantages(r, kG, kScaleRewards.value(scale)).to(at::kDouble);
    ASSERT_EQ(mine.numel(), theirs.numel());
    at::Tensor bound = kAdvRelTol * theirs.abs() + 1e-12;
    EXPECT_TRUE(((mine - theirs).abs() <= bound).all().item<bool>()) << "ours " << mine << "\nTRL " << theirs;
    // The constant group gives exactly zero on both sides (r - its mean = 0 whatever the scale).
    EXPECT_TRUE((theirs.slice(0, 8, 12) == 0).all().item<bool>());
    EXPECT_TRUE((mine.slice(0, 8, 12) == 0).all().item<bool>());
    std::printf("    %s: max |ours - TRL| / max |TRL| %.2e\n", scale.c_str(), rel(mine, theirs));
  }
}

// The sampler's mismatch correction (vllm_importance_sampling_*), each mode and bound, against
// TRL's generation step (which computes the weights) and _compute_loss; each case's bounds bite.
TEST(TrlOracle, SamplerCorrectionMatchesTrl) {
  ASSERT_TRUE(trl_ran());
  Batch b = random_batch(2024);
  double worst = 0;
  for (auto& [name, sc] : sampling_cases()) {
    SCOPED_TRACE(name);
    const json& t = trl().results.at("sampling/" + name);
    ASSERT_TRUE(t.contains("loss")) << t.dump();
    const json& c = trl().cases.at("sampling/" + name);
    worst = std::max(worst, expect_matches(b, t, b.mask, t["num_items_in_batch"].get<double>(), c));
    const json& m = t["metrics"];
    if (sc.bites == "masked") EXPECT_EQ(m["sampling/importance_sampling_ratio/min"].get<double>(), 0);
    if (sc.bites == "clamped")
      EXPECT_EQ(m["sampling/importance_sampling_ratio/max"].get<double>(),
                c.value("vllm_importance_sampling_clip_max", 3.0));
  }
  std::printf("    max relative diff (loss, gradient) %.2e\n", worst);
}

// The newer loss types and knobs, each against TRL's own _compute_loss on the same batch.
TEST(TrlOracle, NewerLossTypesAndKnobsMatchTrl) {
  ASSERT_TRUE(trl_ran());
  Batch b = random_batch(2024);
  double worst = 0;
  for (auto& [name, nc] : newer_cases()) {
    SCOPED_TRACE(name);
    const json& t = trl().results.at("newer/" + name);
    ASSERT_TRUE(t.contains("loss")) << t.dump();
    worst = std::max(
        worst, expect_matches(b, t, b.mask, t["num_items_in_batch"].get<double>(), trl().cases.at("newer/" + name)));
  }
  // The knobs must change something on this batch, else agreement proves little: the cap bites
  // in cispo, the mask drops a sequence, delta caps a ratio, the sequence level differs.
  auto loss_of = [&](const std::string& n) { return trl().results.at(n)["loss"].get<double>(); };
  EXPECT_GT(trl().results.at("newer/cispo")["metrics"]["cispo_clip_ratio"].get<double>(), 0);
  EXPECT_NE(loss_of("newer/opsm/bnpo"), loss_of("bnpo/no_kl"));
  EXPECT_NE(loss_of("newer/delta/dapo"), loss_of("dapo/no_kl"));
  EXPECT_NE(loss_of("newer/gspo/grpo"), loss_of("grpo/no_kl"));
  EXPECT_NE(loss_of("newer/bias_kl/bnpo"), loss_of("bnpo/beta"));
  EXPECT_NE(loss_of("newer/entropy/grpo"), loss_of("grpo/no_kl"));
  EXPECT_NE(loss_of("newer/entropy/top_only"), loss_of("bnpo/no_kl"));
  EXPECT_NE(loss_of("newer/vespo/params"), loss_of("newer/vespo"));
  EXPECT_NE(loss_of("newer/bonus/grpo"), loss_of("grpo/no_kl"));
  // VESPO's weights are not all 1 on this batch (the ratios moved).
  EXPECT_GT(std::abs(trl().results.at("newer/vespo")["metrics"]["vespo/phi_seq_mean"].get<double>() - 1.0), 0.01);
  std::printf("    max relative diff (loss, gradient) %.2e over %zu cases\n", worst, newer_cases().size());
}

// TRL's default KL term (use_bias_correction_kl unset = True) is ours' default too: a case that
// leaves the key out on both sides matches.
TEST(TrlOracle, KlTermMatchesTrlDefaultBiasCorrection) {
  ASSERT_TRUE(trl_ran());
  Batch b = random_batch(2024);
  const json& t = trl().results.at("default_kl/bnpo");
  ASSERT_TRUE(t.contains("loss")) << t.dump();
  const json& c = trl().cases.at("default_kl/bnpo");
  ASSERT_FALSE(c.contains("use_bias_correction_kl"));
  EXPECT_TRUE(LossOptions{}.use_bias_correction_kl);
  std::printf("    max relative diff (loss, gradient) %.2e\n", expect_matches(b, t, b.mask, 0, c));
}

// TRL's adaptive entropy control (use_adaptive_entropy): EntropyControl, driven as the trainer
// drives it (the applied coefficient for every micro-batch of a step, end_step with the step's
// kept-token entropy sums), against GRPOTrainer._compute_loss run over the same six optimizer
// steps of two micro-batches: each micro-batch's loss, each step's d loss / d entropies, and the
// controller's coefficient and measured entropy after each step.
TEST(TrlOracle, AdaptiveEntropyControlMatchesTrlStepByStep) {
  ASSERT_TRUE(trl_ran());
  const std::vector<at::Tensor> entropies = adaptive_entropies();
  for (auto& [name, extra] : adaptive_cases()) {
    SCOPED_TRACE(name);
    const json& c = trl().cases.at("adaptive/" + name);
    const json& t = trl().results.at("adaptive/" + name);
    ASSERT_TRUE(t.contains("steps")) << t.dump();
    ASSERT_EQ(t["steps"].size(), entropies.size());
    GrpoConfig g;
    g.use_adaptive_entropy = true;
    g.entropy_coef = c.at("entropy_coef");
    g.entropy_coef_min = c.at("entropy_coef_min");
    g.entropy_coef_max = c.at("entropy_coef_max");
    g.entropy_coef_delta = c.at("entropy_coef_delta");
    g.entropy_target = c.at("entropy_target");
    EntropyControl ctl(g);
    Batch b = random_batch(2024);
    const at::Tensor adv = from_json(t["advantages"]);
    std::vector<double> applied;
    double worst = 0;
    for (size_t s = 0; s < entropies.size(); ++s) {
      SCOPED_TRACE("step " + std::to_string(s));
      const json& ts = t["steps"][s];
      b.entropies = entropies[s];
      LossOptions o = options_of(c, t["num_items_in_batch"].get<double>());
      o.entropy_coef = ctl.applied();
      applied.push_back(o.entropy_coef);
      at::Tensor entropy_grad = at::zeros_like(b.entropies);
      double kept_sum = 0, kept_tokens = 0;
      for (int64_t k = 0; k < 2; ++k) {
        Ours r = ours(b, b.mask, adv, o, k * kB / 2, (k + 1) * kB / 2);
        const double dl = rel(r.loss, ts["losses"][k].get<double>());
        EXPECT_LE(dl, kLossTol) << "micro-batch " << k << ": ours " << r.loss << ", TRL " << ts["losses"][k];
        worst = std::max(worst, dl);
        entropy_grad += r.entropy_grad;
        kept_sum += r.stats.kept_entropy_sum;
        kept_tokens += r.stats.kept_tokens;
      }
      const at::Tensor theirs = from_json(ts["entropy_grad"]);
      if (o.entropy_coef != 0) {
        worst = std::max(worst, rel(entropy_grad, theirs));
        EXPECT_LE(rel(entropy_grad, theirs), kLossTol) << "d loss / d entropies";
      } else {
        EXPECT_EQ(theirs.abs().max().item<double>(), 0) << "TRL applied a bonus where ours did not";
        EXPECT_EQ(entropy_grad.abs().max().item<double>(), 0);
      }
      ctl.end_step(kept_sum, kept_tokens);
      EXPECT_LE(rel(ctl.coef(), ts["entropy_coef"].get<double>()), kLossTol)
          << "coefficient: ours " << ctl.coef() << ", TRL " << ts["entropy_coef"];
      EXPECT_LE(rel(ctl.last_entropy(), ts["last_world_entropy"].get<double>()), kLossTol)
          << "measured entropy: ours " << ctl.last_entropy() << ", TRL " << ts["last_world_entropy"];
    }
    // The steps exercised what they were chosen for: skipped and applied bonuses, both bounds.
    EXPECT_EQ(applied.front(), 0.0) << "no measurement before the first step";
    EXPECT_EQ(std::count(applied.begin(), applied.end(), 0.0), 3);  // steps 0, 2 and 5
    std::vector<double> coefs;
    for (auto& ts : t["steps"]) coefs.push_back(ts["entropy_coef"]);
    EXPECT_NEAR(*std::max_element(coefs.begin(), coefs.end()), 0.1, 1e-12);
    EXPECT_NEAR(*std::min_element(coefs.begin(), coefs.end()), 0.01, 1e-12);
    std::printf("    %s: max relative diff (loss, entropy gradient, controller) %.2e\n", name.c_str(), worst);
  }
}
