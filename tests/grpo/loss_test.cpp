// GRPO objective against hand-derived values (derivations in the comments).
#include "grpo/loss.h"

#include <gtest/gtest.h>

#include <cmath>

#include "config/grpo_config.h"
#include "util/error.h"

using namespace brl::grpo;

namespace {
// old_logps = 0, so ratio = exp(logps):
//   row 0 (adv +1): ratios 1.5, 0.5, 1.0 -> min(r*A, clip(r)*A) = 1.2, 0.5, 1.0 -> loss -1.2, -0.5, -1.0
//   row 1 (adv -1): ratios 1.1, 1.0, [masked] -> -1.1, -1.0 -> loss 1.1, 1.0
//   masked sums: row0 -2.7 (3 tokens), row1 2.1 (2 tokens)
LossInputs batch() {
  LossInputs in;
  in.logps = at::log(at::tensor({1.5, 0.5, 1.0, 1.1, 1.0, 1.0}, at::kDouble)).view({2, 3});
  in.old_logps = at::zeros({2, 3}, at::kDouble);
  in.advantages = at::tensor({1.0, -1.0}, at::kDouble);
  in.mask = at::tensor({1.0, 1.0, 1.0, 1.0, 1.0, 0.0}, at::kDouble).view({2, 3});
  return in;
}
double loss_of(const std::string& type, double beta = 0, double nitems = 0, LossOptions o = {}) {
  LossInputs in = batch();
  if (beta > 0) in.ref_logps = at::zeros({2, 3}, at::kDouble);
  o.loss_type = kLossTypes.value(type);
  o.beta = beta;
  o.max_completion_length = 4;
  o.num_items_in_batch = nitems;
  return grpo_loss(in, o).item<double>();
}
}  // namespace

TEST(GrpoLoss, EachLossTypeMatchesHandDerivation) {
  EXPECT_NEAR(loss_of("grpo"), (-2.7 / 3 + 2.1 / 2) / 2, 1e-12);  // mean of per-sequence means = 0.075
  EXPECT_NEAR(loss_of("bnpo"), -0.6 / 5, 1e-12);                  // all tokens of the batch
  EXPECT_NEAR(loss_of("dr_grpo"), -0.6 / (2 * 4), 1e-12);         // B * max_completion_length
  EXPECT_NEAR(loss_of("dapo"), -0.6 / 5, 1e-12);                  // this batch's tokens by default
  EXPECT_NEAR(loss_of("dapo", 0, 10), -0.6 / 10, 1e-12);          // the generation batch's tokens
}

TEST(GrpoLoss, K3KlTerm) {
  // k3(logp) = exp(ref - logp) - (ref - logp) - 1 with ref = 0: 1/r + ln r - 1 per token;
  // with use_bias_correction_kl (the default, as TRL) times the ratio: 1 + r ln r - r.
  double k = 0, kr = 0;
  for (double r : {1.5, 0.5, 1.0, 1.1}) k += 1 / r + std::log(r) - 1, kr += 1 + r * std::log(r) - r;
  LossOptions plain;
  plain.use_bias_correction_kl = false;
  EXPECT_NEAR(loss_of("bnpo", 0.1, 0, plain), (-0.6 + 0.1 * k) / 5, 1e-12);
  EXPECT_NEAR(loss_of("bnpo", 0.1), (-0.6 + 0.1 * kr) / 5, 1e-12);
}

TEST(GrpoLoss, NewerLossTypesMatchHandDerivation) {
  // cispo, cap epsilon_high 1.2: -min(r, 1.2) A ln r per token, over the batch's 5 tokens:
  // row 0 (A +1): -1.2 ln 1.5, -0.5 ln 0.5, 0; row 1 (A -1): +1.1 ln 1.1, 0.
  LossOptions c;
  c.epsilon_high = 1.2;
  EXPECT_NEAR(loss_of("cispo", 0, 0, c), (-1.2 * std::log(1.5) - 0.5 * std::log(0.5) + 1.1 * std::log(1.1)) / 5, 1e-12);
  // luspo: per-sequence sums, averaged over sequences: (-2.7 + 2.1) / 2.
  EXPECT_NEAR(loss_of("luspo"), -0.3, 1e-12);
  // Sequence-level ratios (GSPO): exp of the mean log-ratio, row 0 (1.5 * 0.5 * 1)^(1/3) = 0.75^(1/3),
  // row 1 sqrt(1.1), both inside [0.8, 1.2]; bnpo over 5 tokens: (-3 r0 + 2 r1) / 5.
  LossOptions g;
  g.importance_sampling_level = ImportanceSamplingLevel::sequence;
  EXPECT_NEAR(loss_of("bnpo", 0, 0, g), (-3 * std::cbrt(0.75) + 2 * std::sqrt(1.1)) / 5, 1e-12);
  // sapo: -(4 / t) sigmoid(t (r - 1)) A, t = 1 for A > 0 and 1.05 otherwise; grpo's aggregation.
  auto gate = [](double r, double t) { return 4 / t / (1 + std::exp(-t * (r - 1))); };
  double row0 = -(gate(1.5, 1.0) + gate(0.5, 1.0) + gate(1.0, 1.0)) / 3, row1 = (gate(1.1, 1.05) + gate(1.0, 1.05)) / 2;
  EXPECT_NEAR(loss_of("sapo"), (row0 + row1) / 2, 1e-12);
  // vespo: phi(w) = e^(l + k ln w - l w) of the sequence ratio w = product of the token ratios:
  // row 0 (A +1, k 2, l 3) w = 0.75, row 1 (A -1, k 3, l 2) w = 1.1; then -phi A ln r per token,
  // over the batch's 5 tokens (dapo's normalization): -phi0 (ln 1.5 + ln 0.5) + phi1 ln 1.1.
  auto phi = [](double w, double k, double l) { return std::exp(l + k * std::log(w) - l * w); };
  EXPECT_NEAR(loss_of("vespo"), (-phi(0.75, 2, 3) * std::log(0.75) + phi(1.1, 3, 2) * std::log(1.1)) / 5, 1e-12);
  EXPECT_NEAR(phi(1.0, 2, 3), 1.0, 1e-15);  // an unmoved policy weighs 1
}

TEST(GrpoLoss, TopEntropyQuantileKeepsHighEntropyTokens) {
  // Active tokens' entropies {4, 1, 3, 2, 5} (the padded slot's 9 never counts). rho = 0.5: the
  // 0.5 quantile (linear) of {1, 2, 3, 4, 5} is 3, so tokens with entropy 4, 3, 5 keep their
  // bnpo terms (-1.2, -1.0 of row 0 and 1.0 of row 1) over the 5 active tokens.
  LossInputs in = batch();
  in.entropies = at::tensor({4.0, 1.0, 3.0, 2.0, 5.0, 9.0}, at::kDouble).view({2, 3});
  LossOptions o;
  o.loss_type = LossType::bnpo;
  o.top_entropy_quantile = 0.5;
  EXPECT_NEAR(grpo_loss(in, o).item<double>(), (-1.2 - 1.0 + 1.0) / 5, 1e-12);
  // rho = 0: only the highest (5, row 1's last active token: 1.0).
  o.top_entropy_quantile = 0.0;
  EXPECT_NEAR(grpo_loss(in, o).item<double>(), 1.0 / 5, 1e-12);
  // rho = 0.25: quantile 0.75 of {1..5} = 4: tokens 4 and 5.
  o.top_entropy_quantile = 0.25;
  EXPECT_NEAR(grpo_loss(in, o).item<double>(), (-1.2 + 1.0) / 5, 1e-12);
}

TEST(GrpoLoss, StatsCountClippedTokens) {
  LossStats st;
  LossOptions o;
  o.loss_type = LossType::bnpo;
  grpo_loss(batch(), o, &st);
  // Only row 0 token 0 (ratio 1.5 > 1.2 with A > 0) takes the clipped branch.
  EXPECT_NEAR(st.clip_ratio, 1.0 / 5, 1e-12);
  EXPECT_NEAR(st.mean_ratio, (1.5 + 0.5 + 1 + 1.1 + 1) / 5, 1e-12);
}

TEST(GrpoLoss, GradientMatchesFiniteDifferences) {
  for (std::string type : {"grpo", "bnpo", "dr_grpo", "dapo"}) {
    LossInputs in = batch();
    in.ref_logps = at::full({2, 3}, -0.3, at::kDouble);
    // Move off the clip boundaries' kinks so central differences are valid.
    in.logps = (in.logps + 0.01).detach().requires_grad_(true);
    LossOptions o;
    o.loss_type = kLossTypes.value(type);
    o.beta = 0.05;
    o.max_completion_length = 4;
    grpo_loss(in, o).backward();
    at::Tensor g = in.logps.grad();
    const double h = 1e-6;
    for (int64_t i = 0; i < 6; ++i) {
      LossInputs p = in, m = in;
      p.logps = in.logps.detach().clone();
      m.logps = in.logps.detach().clone();
      p.logps.view({-1})[i] += h;
      m.logps.view({-1})[i] -= h;
      double fd = (grpo_loss(p, o).item<double>() - grpo_loss(m, o).item<double>()) / (2 * h);
      EXPECT_NEAR(g.view({-1})[i].item<double>(), fd, 1e-6) << type << " element " << i;
    }
  }
}

TEST(Advantages, GroupScaledAndZeroVarianceGroups) {
  at::Tensor r = at::tensor({1.0, 0.0, 1.0, 0.0, 2.0, 2.0, 2.0, 2.0});
  at::Tensor a = group_advantages(r, 4, ScaleRewards::group);
  // group 0: mean 0.5, Bessel std sqrt(1/3); group 1: constant -> exactly 0, never NaN.
  double s = std::sqrt(1.0 / 3.0) + 1e-4;
  EXPECT_NEAR(a[0].item<float>(), 0.5 / s, 1e-6);
  EXPECT_NEAR(a[1].item<float>(), -0.5 / s, 1e-6);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(a[i].item<float>(), 0.0f);
  EXPECT_FALSE(at::isnan(a).any().item<bool>());
}

TEST(Advantages, BatchAndNone) {
  at::Tensor r = at::tensor({1.0, 0.0, 3.0, 3.0});
  at::Tensor none = group_advantages(r, 2, ScaleRewards::none);
  EXPECT_NEAR(none[0].item<float>(), 0.5, 1e-6);
  EXPECT_NEAR(none[2].item<float>(), 0.0, 1e-6);
  at::Tensor batch = group_advantages(r, 2, ScaleRewards::batch);
  double sd = at::tensor({1.0, 0.0, 3.0, 3.0}).std().item<double>();  // whole-batch Bessel std
  EXPECT_NEAR(batch[1].item<float>(), -0.5 / (sd + 1e-4), 1e-6);
}

TEST(GrpoConfig, ValidationQuotesValues) {
  GrpoConfig c;
  c.validate();
  c.num_generations = 3;
  try {
    c.validate();
    FAIL() << "expected an error";
  } catch (const brl::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("(8) must be divisible by num_generations (3)"), std::string::npos)
        << e.what();
  }
  for (auto [key, want] : std::vector<std::pair<std::string, std::string>>{
           {"loss_type=gspo",
            "loss_type = \"gspo\": must be one of grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo"},
           {"loss_type=vespo;importance_sampling_level=sequence",
            "importance_sampling_level must be 'token', not 'sequence'"},
           {"vespo_lambda_neg=-1", "lambda_neg -1) must be finite and >= 0"},
           {"top_entropy_quantile=1.5", "top_entropy_quantile (1.5) must be in [0, 1]"},
           {"importance_sampling_level=seq", "importance_sampling_level = \"seq\": must be token or sequence"},
           {"importance_sampling_level=seq", "did you mean \"sequence\"?"},
           {"loss_type=dr-grpo", "did you mean \"dr_grpo\"?"},
           {"delta=1.1", "delta (1.1) must be > 1 + epsilon_high (1.2)"},
           {"off_policy_mask_threshold=-1", "off_policy_mask_threshold (-1) must be > 0"}}) {
    GrpoConfig e;
    auto t = e.table();
    try {  // a name that is none of a field's is refused as it is set, a bad combination by validate()
      for (size_t at = 0; at != std::string::npos;) {  // ';' separates overrides
        size_t end = key.find(';', at);
        t.set_from_override(key.substr(at, end == std::string::npos ? end : end - at));
        at = end == std::string::npos ? end : end + 1;
      }
      e.validate();
      ADD_FAILURE() << key << ": no error";
    } catch (const brl::UserError& err) {
      EXPECT_NE(std::string(err.what()).find(want), std::string::npos) << err.what();
    }
  }
  GrpoConfig d;
  auto t = d.table();
  t.set_from_override("loss_type=grpo");
  t.set_from_override("epsilon_high=0.28");
  EXPECT_EQ(d.loss_type, LossType::grpo);
  EXPECT_EQ(t.to_json()["loss_type"], "grpo");
  EXPECT_DOUBLE_EQ(d.eps_high(), 0.28);
  EXPECT_THROW(t.set_from_override("learning_rte=1e-5"), brl::UserError);
  EXPECT_THROW(t.set_from_override("num_generations=two"), brl::UserError);
  EXPECT_THROW(t.set_from_override("loss_type=ppo"), brl::UserError);
  EXPECT_EQ(d.loss_type, LossType::grpo);  // unchanged by the refused value
}
