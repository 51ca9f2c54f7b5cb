// The GRPO objective as pure tensor functions (DeepSeekMath; TRL's GRPOTrainer._compute_loss,
// in its order): group-relative advantages; the importance ratio per token or per sequence
// (GSPO); the per-token objective of each loss type: the clipped surrogate (grpo, bnpo,
// dr_grpo, dapo, luspo; with an optional two-sided cap `delta`, INTELLECT-2), CISPO's clipped
// and detached weight on the log-prob (MiniMax-M1, ScaleRL), SAPO's soft sigmoid gate; the
// off-policy sequence mask (DeepSeek-V3.2); the k3 KL estimator, optionally times the ratio
// (use_bias_correction_kl); and each type's aggregation. Returns the loss plus detached
// statistics (torchtune's habit).
#pragma once

#include <ATen/ATen.h>

#include <string>

#include "config/grpo_config.h"  // is_loss_type, normalizes_by_batch_tokens

namespace brl::grpo {

// rewards [N*G] (N prompts, G completions each, grouped contiguously) -> advantages [N*G].
// scale: "group" divides by the group's std, "batch" by the whole batch's std, "none" not
// at all; std is Bessel-corrected as torch.std (TRL), with +1e-4 so zero-variance groups
// give exactly zero advantage instead of NaN.
at::Tensor group_advantages(const at::Tensor& rewards, int64_t group_size, const std::string& scale);

struct LossInputs {
  at::Tensor logps;      // [B, T] log-probs of the completion tokens under the current policy (grad)
  at::Tensor old_logps;  // [B, T] under the generating policy (no grad)
  at::Tensor ref_logps;  // [B, T] under the reference (adapter off); undefined when beta == 0
  at::Tensor advantages; // [B]
  at::Tensor mask;       // [B, T] 1 for completion tokens, 0 for padding
};

struct LossOptions {
  std::string loss_type = "dapo";
  double epsilon_low = 0.2, epsilon_high = 0.2;  // cispo: epsilon_high caps the weight (ScaleRL: 5)
  double beta = 0.0;
  bool use_bias_correction_kl = true;            // k3 KL times the importance ratio (TRL's default)
  std::string importance_sampling_level = "token";  // token | sequence (GSPO: one ratio per sequence)
  double delta = 0;                                  // > 0: cap the unclipped ratio at delta (two-sided)
  double sapo_temperature_pos = 1.0, sapo_temperature_neg = 1.05;
  double off_policy_mask_threshold = 0;  // > 0: drop negative-advantage sequences whose mean
                                         // old - new log-prob exceeds it (DeepSeek-V3.2)
  int64_t max_completion_length = 0;  // dr_grpo's constant normalizer
  // dapo: active tokens over the whole generation batch (all micro-batches); <= 0 = this batch's.
  double num_items_in_batch = 0;
};

struct LossStats {
  double loss = 0, clip_ratio = 0, kl = 0, mean_ratio = 0;
};

// Returns the scalar loss; fills stats (detached).
at::Tensor grpo_loss(const LossInputs& in, const LossOptions& opt, LossStats* stats = nullptr);

}  // namespace brl::grpo
