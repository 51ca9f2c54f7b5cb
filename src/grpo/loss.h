// The GRPO objective as pure tensor functions (DeepSeekMath; TRL's GRPOTrainer._compute_loss,
// in its order): group-relative advantages; the importance ratio per token or per sequence
// (GSPO); the per-token objective of each loss type: the clipped surrogate (grpo, bnpo,
// dr_grpo, dapo, luspo; with an optional two-sided cap `delta`, INTELLECT-2), CISPO's clipped
// and detached weight on the log-prob (MiniMax-M1, ScaleRL), SAPO's soft sigmoid gate, VESPO's
// detached gamma weight of the sequence ratio on the log-prob; the off-policy sequence mask
// (DeepSeek-V3.2); the high-entropy token mask (top_entropy_quantile, "Beyond the 80/20
// Rule"); the k3 KL estimator, optionally times the ratio
// (use_bias_correction_kl); the sampler's mismatch weight (TRL's vllm_importance_sampling_*,
// truncated or masked importance sampling); and each type's aggregation. Returns the loss plus detached
// statistics (torchtune's habit).
#pragma once

#include <ATen/ATen.h>

#include <limits>
#include <string>

#include "config/grpo_config.h"  // LossType, ImportanceSamplingLevel, ScaleRewards

namespace brl::grpo {

// rewards [N*G] (N prompts, G completions each, grouped contiguously) -> advantages [N*G].
// scale: group divides by the group's std, batch by the whole batch's std, none not at
// all; std is Bessel-corrected as torch.std (TRL), with +1e-4 so zero-variance groups
// give exactly zero advantage instead of NaN.
at::Tensor group_advantages(const at::Tensor& rewards, int64_t group_size, ScaleRewards scale);
// GDPO (TRL's multi_objective_aggregation = normalize_then_sum): rewards_per_func [N*G, K],
// each function centred and scaled within its group, summed with weights [K], then the sum
// centred and scaled over the whole batch (std Bessel-corrected, +1e-4, as above).
at::Tensor decoupled_advantages(const at::Tensor& rewards_per_func, const std::vector<double>& weights,
                                int64_t group_size);

struct LossInputs {
  at::Tensor logps;           // [B, T] log-probs of the completion tokens under the current policy (grad)
  at::Tensor old_logps;       // [B, T] under the old policy (no grad); undefined: logps detached (on-policy)
  at::Tensor sampling_logps;  // [B, T] the sampler's, with sampling_correction (old_logps are then the trainer's)
  at::Tensor ref_logps;       // [B, T] under the reference (adapter off); undefined when beta == 0
  at::Tensor advantages;      // [B]
  at::Tensor mask;            // [B, T] 1 for completion tokens, 0 for padding
  at::Tensor entropies;       // [B, T] policy entropy per position: for top_entropy_quantile < 1, and
                              // with its gradient for the entropy bonus (entropy_coef != 0)
};

struct LossOptions {
  LossType loss_type = LossType::dapo;
  double epsilon_low = 0.2, epsilon_high = 0.2;  // cispo: epsilon_high caps the weight (ScaleRL: 5)
  double beta = 0.0;
  bool use_bias_correction_kl = true;  // k3 KL times the importance ratio (TRL's default)
  ImportanceSamplingLevel importance_sampling_level = ImportanceSamplingLevel::token;
  double delta = 0;  // > 0: cap the unclipped ratio at delta (two-sided)
  double sapo_temperature_pos = 1.0, sapo_temperature_neg = 1.05;
  // vespo: phi(w) = exp(lambda + k log w - lambda w) of the sequence ratio w (phi(1) = 1), with
  // (k, lambda) by the advantage's sign (>= 0: pos).
  double vespo_k_pos = 2.0, vespo_lambda_pos = 3.0, vespo_k_neg = 3.0, vespo_lambda_neg = 2.0;
  // < 1: the policy term keeps only tokens whose entropy is at or above this batch's
  // (1 - top_entropy_quantile) quantile (linear interpolation, as torch.quantile).
  double top_entropy_quantile = 1.0;
  double off_policy_mask_threshold = 0;  // > 0: drop negative-advantage sequences whose mean
                                         // old - new log-prob exceeds it (DeepSeek-V3.2)
  int64_t max_completion_length = 0;     // dr_grpo's constant normalizer
  // TRL's vllm_importance_sampling_correction: each token's loss times w = exp(old - sampling
  // log-probs) (per sequence: exp of their sum over the completion), clamped to [clip_min,
  // clip_max] (truncate) or zeroed outside it (mask); vespo adds log w to its sequence ratio
  // instead. Detached. Needs sampling_logps.
  bool sampling_correction = false;
  SamplingCorrectionMode sampling_correction_mode = SamplingCorrectionMode::sequence_mask;
  double sampling_clip_min = 0, sampling_clip_max = std::numeric_limits<double>::infinity();
  // dapo, cispo, vespo: the normalizer, the active tokens of one optimizer step's micro-batches
  // (tokens_per_optimizer_step); <= 0 = this micro-batch's.
  double num_items_in_batch = 0;
  // TRL's entropy bonus: minus entropy_coef x the mean entropy over the tokens the policy term
  // keeps (whatever the loss type's normalisation).
  double entropy_coef = 0;
  // Micro-batches per optimizer step (TRL's gradient accumulation steps): the loss is one
  // micro-batch's share. Types normalised by the batch's tokens (dapo, cispo, vespo) have it
  // already; the others, and the entropy bonus, are divided by it.
  int64_t accumulation_steps = 1;
};

struct LossStats {
  double loss = 0, clip_ratio = 0, kl = 0, mean_ratio = 0;
  // With entropies given: their mean over the completion tokens (TRL's "entropy" metric), and
  // their sum and count over the tokens the policy term keeps (adaptive entropy control).
  double entropy = 0, kept_entropy_sum = 0, kept_tokens = 0;
  // With sampling_correction (TRL's sampling/ metrics): the weights' min, mean and max (over the
  // active tokens, or the sequences), and |old - sampling log-prob| over the active tokens; how
  // many weights and tokens the means are over (to weight them across micro-batches).
  double is_ratio_min = 0, is_ratio_mean = 0, is_ratio_max = 0, sampling_logp_diff_mean = 0, sampling_logp_diff_max = 0;
  double is_ratio_count = 0, sampling_logp_diff_count = 0;
};

// TRL's normalizer for the types normalised by the batch's tokens: num_items_in_batch (the active
// tokens of the whole generation batch) x gradient_accumulation_steps / steps_per_generation,
// the mean tokens of one optimizer step when a generation batch feeds several.
double tokens_per_optimizer_step(double generation_tokens, int gradient_accumulation_steps, int steps_per_generation);

// Returns the scalar loss; fills stats (detached).
at::Tensor grpo_loss(const LossInputs& in, const LossOptions& opt, LossStats* stats = nullptr);

// The entropy bonus's coefficient across optimizer steps. Static (use_adaptive_entropy off):
// entropy_coef throughout. Adaptive (TRL's use_adaptive_entropy, Skywork-OR1): every micro-batch
// of a step applies entropy_coef while the previous step's mean entropy is at or below
// entropy_target, else 0 (none is known before the first step: 0); after each step the
// coefficient moves by entropy_coef_delta, up when that step's entropy (token-weighted over all
// its micro-batches, over the tokens the policy term keeps) is at or below the target, down
// otherwise, within [entropy_coef_min, entropy_coef_max].
class EntropyControl {
 public:
  explicit EntropyControl(const GrpoConfig& g);
  bool enabled() const { return adaptive_ || coef_ != 0.0; }  // the loss needs entropies
  double applied() const;                                     // for this step's micro-batches
  // The optimizer step ended; its micro-batches' LossStats kept_entropy_sum and kept_tokens summed.
  void end_step(double kept_entropy_sum, double kept_tokens);
  double coef() const { return coef_; }
  double last_entropy() const { return last_entropy_; }  // +inf before the first step
  // A saved state (coef(), last_entropy()); adaptive control only: static keeps the configured one.
  void restore(double coef, double last_entropy) {
    if (adaptive_) coef_ = coef, last_entropy_ = last_entropy;
  }

 private:
  bool adaptive_;
  double coef_, min_, max_, delta_, target_;
  double last_entropy_;
};

}  // namespace brl::grpo
