#include "grpo/loss.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "util/error.h"

namespace brl::grpo {

at::Tensor group_advantages(const at::Tensor& rewards, int64_t group_size, ScaleRewards scale) {
  BRL_ASSERT(rewards.dim() == 1 && group_size > 0 && rewards.size(0) % group_size == 0);
  at::Tensor r = rewards.to(at::kDouble).view({-1, group_size});  // [N, G]
  at::Tensor adv = r - r.mean(1, /*keepdim=*/true);               // [N, G]
  if (scale == ScaleRewards::group) adv = adv / (r.std(1, /*unbiased=*/true, /*keepdim=*/true) + 1e-4);
  if (scale == ScaleRewards::batch) adv = adv / (rewards.to(at::kDouble).std(/*unbiased=*/true) + 1e-4);
  return adv.reshape({-1}).to(at::kFloat);
}

at::Tensor decoupled_advantages(const at::Tensor& rewards_per_func, const std::vector<double>& weights,
                                int64_t group_size) {
  BRL_ASSERT(rewards_per_func.dim() == 2 && group_size > 0 && rewards_per_func.size(0) % group_size == 0 &&
             rewards_per_func.size(1) == static_cast<int64_t>(weights.size()));
  const int64_t K = rewards_per_func.size(1);
  at::Tensor g = rewards_per_func.to(at::kDouble).view({-1, group_size, K});  // [N, G, K]
  at::Tensor z = (g - g.mean(1, /*keepdim=*/true)) / (g.std(1, /*unbiased=*/true, /*keepdim=*/true) + 1e-4);
  at::Tensor w = at::tensor(weights, at::TensorOptions().dtype(at::kDouble));
  at::Tensor r = (z.view({-1, K}) * w).sum(1);  // [N*G]
  return ((r - r.mean()) / (r.std(/*unbiased=*/true) + 1e-4)).to(at::kFloat);
}

namespace {

// VESPO's weight per sequence [B, 1] (TRL's get_gamma_weights): w = exp of the summed token
// log-ratios (each clamped to [-20, 20], the sum to [log 1e-8, 20]), phi(w) = e^(lambda + k log w
// - lambda w), computed in log space; detached (a gradient scale only), non-finite -> 0.
// With the sampler's mismatch weights is_w [B, T], their logs (clamped to [log 1e-8, 20]) join the sum.
at::Tensor vespo_weights(const at::Tensor& log_ratio, const at::Tensor& mask, const at::Tensor& adv,
                         const LossOptions& o, const at::Tensor& is_w) {
  at::NoGradGuard ng;
  at::Tensor log_w = (at::clamp(log_ratio, -20.0, 20.0) * mask).sum(1, true);  // [B, 1]
  if (is_w.defined()) log_w = log_w + at::clamp(at::log(is_w), std::log(1e-8), 20.0).sum(1, true);
  log_w = log_w.clamp(std::log(1e-8), 20.0);
  at::Tensor pos = adv >= 0;
  at::Tensor k = at::where(pos, at::full_like(adv, o.vespo_k_pos), at::full_like(adv, o.vespo_k_neg));
  at::Tensor lam =
      at::where(pos, at::full_like(adv, o.vespo_lambda_pos), at::full_like(adv, o.vespo_lambda_neg)).clamp_min(1e-4);
  return at::nan_to_num(at::exp(lam + k * log_w - lam * at::exp(log_w)), 0.0, 0.0, 0.0);
}

// 1 for active tokens whose entropy is >= the (1 - rho) quantile of the active tokens'
// entropies, else 0 (TRL's get_high_entropy_mask: the quantile over float32 values).
at::Tensor high_entropy_mask(const at::Tensor& entropies, const at::Tensor& mask, double rho) {
  BRL_ASSERT(entropies.defined() && entropies.sizes() == mask.sizes(),
             "top_entropy_quantile < 1 needs entropies [B, T]");
  at::Tensor active = mask > 0;
  at::Tensor local = entropies.masked_select(active).to(at::kFloat);
  if (local.numel() == 0) return at::zeros_like(mask);
  at::Tensor threshold = at::quantile(local, 1.0 - rho);
  return ((entropies * mask >= threshold) & active).to(mask.dtype());
}

bool per_sequence(SamplingCorrectionMode m) {
  return m == SamplingCorrectionMode::sequence_truncate || m == SamplingCorrectionMode::sequence_mask;
}

// TRL's vLLM importance-sampling ratio: exp(old - sampling) per active token (or of the sum per
// sequence, [B, 1]), NaN differences read as 0, then clamped into or zeroed outside the bounds.
at::Tensor sampling_weights(const at::Tensor& old, const at::Tensor& sampling, const at::Tensor& mask,
                            const LossOptions& o) {
  at::NoGradGuard ng;
  at::Tensor d = at::nan_to_num((old - sampling.to(old.dtype())) * mask, 0.0);
  if (per_sequence(o.sampling_correction_mode)) d = d.sum(1, true);
  at::Tensor w = at::exp(d);
  const bool bounded_above = std::isfinite(o.sampling_clip_max);
  if (o.sampling_correction_mode == SamplingCorrectionMode::token_truncate ||
      o.sampling_correction_mode == SamplingCorrectionMode::sequence_truncate)
    return at::clamp(w, o.sampling_clip_min,
                     bounded_above ? std::optional<at::Scalar>(o.sampling_clip_max) : std::nullopt);
  return w.masked_fill((w < o.sampling_clip_min) | (w > o.sampling_clip_max), 0.0);
}

}  // namespace

double tokens_per_optimizer_step(double generation_tokens, int gradient_accumulation_steps, int steps_per_generation) {
  return std::max(1.0, generation_tokens) * gradient_accumulation_steps / steps_per_generation;
}

at::Tensor grpo_loss(const LossInputs& in, const LossOptions& opt, LossStats* stats) {
  const at::Tensor& logps = in.logps;  // [B, T]
  at::Tensor mask = in.mask.to(logps.dtype());
  at::Tensor adv = in.advantages.to(logps.dtype()).unsqueeze(1);  // [B, 1]
  const at::Tensor old = in.old_logps.defined() ? in.old_logps : logps.detach();
  at::Tensor log_ratio = logps - old;  // [B, T]
  at::Tensor log_w;                    // [B, T] per token, [B, 1] per sequence
  if (opt.importance_sampling_level == ImportanceSamplingLevel::sequence)
    log_w = ((log_ratio * mask).sum(1) / mask.sum(1).clamp_min(1.0)).unsqueeze(1);
  else log_w = log_ratio;
  at::Tensor ratio = at::exp(log_w);
  at::Tensor is_w;  // the sampler's mismatch weight: [B, T] per token, [B, 1] per sequence
  if (opt.sampling_correction) {
    BRL_ASSERT(in.sampling_logps.defined(), "sampling_correction needs the sampler's log-probs");
    is_w = sampling_weights(old, in.sampling_logps, mask, opt);
  }
  at::Tensor kl;
  if (opt.beta != 0.0) {
    BRL_ASSERT(in.ref_logps.defined(), "beta > 0 needs reference log-probs");
    at::Tensor d = in.ref_logps - logps;
    kl = at::exp(d) - d - 1.0;  // k3: unbiased, always >= 0
    if (opt.use_bias_correction_kl) kl = kl * ratio;
  }
  at::Tensor per_token;
  const LossType type = opt.loss_type;
  switch (type) {
    case LossType::cispo: per_token = -at::clamp_max(ratio, opt.epsilon_high).detach() * adv * logps; break;
    case LossType::grpo:
    case LossType::bnpo:
    case LossType::dr_grpo:
    case LossType::dapo:
    case LossType::luspo: {
      at::Tensor clipped = at::clamp(ratio, 1.0 - opt.epsilon_low, 1.0 + opt.epsilon_high);
      at::Tensor capped = opt.delta > 0 ? at::clamp_max(ratio, opt.delta) : ratio;
      per_token = -at::min(capped * adv, clipped * adv);
      break;
    }
    case LossType::sapo: {
      at::Tensor temp = at::where(adv > 0, at::full_like(adv, opt.sapo_temperature_pos),
                                  at::full_like(adv, opt.sapo_temperature_neg));
      per_token = -(at::sigmoid(temp * (ratio - 1.0)) * 4.0 / temp) * adv;
      break;
    }
    case LossType::vespo: per_token = -vespo_weights(log_ratio, mask, adv, opt, is_w) * adv * logps; break;
  }
  if (opt.off_policy_mask_threshold > 0) {
    // Against the sampler's log-probs where they are not the old ones: both drifts (TRL).
    const at::Tensor& behaviour = in.sampling_logps.defined() ? in.sampling_logps : old;
    at::Tensor seq_kl = at::nan_to_num((behaviour.to(logps.dtype()) - logps.detach()) * mask, 0.0).sum(1, true) /
                        mask.sum(1, true).clamp_min(1.0);  // [B, 1]
    per_token = per_token * ((adv >= 0) | (seq_kl <= opt.off_policy_mask_threshold)).to(mask.dtype());
  }
  at::Tensor kept = mask;  // the tokens the policy term acts on (the entropy bonus too)
  if (opt.top_entropy_quantile < 1.0) {
    kept = mask * high_entropy_mask(in.entropies.detach(), mask, opt.top_entropy_quantile);
    per_token = per_token * kept;
  }
  if (is_w.defined() && type != LossType::vespo) per_token = per_token * is_w;
  if (kl.defined()) per_token = per_token + opt.beta * kl;
  at::Tensor masked = per_token * mask;  // [B, T] (a per-sequence term broadcasts over its tokens)
  at::Tensor loss;
  if (type == LossType::grpo || type == LossType::sapo) {
    loss = (masked.sum(1) / mask.sum(1).clamp_min(1.0)).mean();
  } else if (type == LossType::bnpo) {
    loss = masked.sum() / mask.sum().clamp_min(1.0);
  } else if (type == LossType::dr_grpo) {
    BRL_ASSERT(opt.max_completion_length > 0, "dr_grpo needs max_completion_length");
    loss = masked.sum() / static_cast<double>(logps.size(0) * opt.max_completion_length);
  } else if (type == LossType::luspo) {
    loss = masked.sum(1).mean();
  } else {  // normalizes_by_batch_tokens: dapo, cispo, vespo
    double n = opt.num_items_in_batch > 0 ? opt.num_items_in_batch : std::max(1.0, mask.sum().item<double>());
    loss = masked.sum() / n;
  }
  const auto steps = static_cast<double>(opt.accumulation_steps);
  if (!normalizes_by_batch_tokens(type) && steps != 1.0) loss = loss / steps;
  if (opt.entropy_coef != 0.0) {
    BRL_ASSERT(in.entropies.defined() && in.entropies.sizes() == mask.sizes(), "entropy_coef needs entropies [B, T]");
    loss = loss - opt.entropy_coef * (in.entropies.to(logps.dtype()) * kept).sum() / kept.sum().clamp_min(1.0) / steps;
  }
  if (stats) {
    at::NoGradGuard ng;
    // Means over the active tokens, or over the sequences for a per-sequence value (TRL's
    // global_masked_mean): sums and counts in f64, read back in one copy (on a GPU one wait,
    // not seven).
    const at::Tensor tokens = mask.sum(at::kDouble).clamp_min(1.0);
    auto masked_mean = [&](const at::Tensor& x) {
      if (x.size(1) == 1 && mask.size(1) != 1) return x.to(at::kDouble).mean();
      return (x.to(mask.dtype()) * mask).sum(at::kDouble) / tokens;
    };
    // A token is clipped when the clipped branch is the one taken by min() (cispo: its cap bites).
    const bool clips = type != LossType::sapo && type != LossType::vespo;
    at::Tensor is_clipped = type == LossType::cispo ? (ratio > opt.epsilon_high) & (adv > 0)
                                                    : ((ratio < 1.0 - opt.epsilon_low) & (adv < 0)) |
                                                          ((ratio > 1.0 + opt.epsilon_high) & (adv > 0));
    const at::Tensor zero = at::zeros({}, tokens.options());
    std::vector<at::Tensor> parts{loss.detach().to(at::kDouble), clips ? masked_mean(is_clipped) : zero,
                                  masked_mean(ratio), kl.defined() ? masked_mean(kl) : zero};
    if (in.entropies.defined()) {
      const at::Tensor e = in.entropies.detach().to(at::kDouble);
      parts.insert(parts.end(), {masked_mean(e), (e * kept).sum(), kept.sum(at::kDouble)});
    }
    if (is_w.defined()) {
      // Over the sequences (per-sequence weights) or the active tokens; min and max 0 when none.
      const at::Tensor active = is_w.size(1) == 1 ? at::ones_like(is_w, at::kBool) : mask > 0;
      const at::Tensor w = is_w.to(at::kDouble), inf = at::full({}, INFINITY, w.options());
      const at::Tensor delta = at::abs(old - in.sampling_logps.to(old.dtype())).to(at::kDouble);
      const at::Tensor scored = (mask > 0) & ~at::isnan(delta);
      const at::Tensor nd = scored.sum(at::kDouble);
      parts.insert(parts.end(), {at::where(active, w, inf).amin(), masked_mean(is_w), at::where(active, w, -inf).amax(),
                                 at::where(scored, delta, 0.0).sum() / nd.clamp_min(1.0),
                                 at::where(scored, delta, -inf).amax(), active.sum(at::kDouble), nd});
    }
    const at::Tensor all = at::stack(parts).cpu();
    const double* v = all.const_data_ptr<double>();
    stats->loss = v[0], stats->clip_ratio = v[1], stats->mean_ratio = v[2], stats->kl = v[3];
    if (in.entropies.defined()) stats->entropy = v[4], stats->kept_entropy_sum = v[5], stats->kept_tokens = v[6];
    if (is_w.defined()) {
      const double* s = v + (in.entropies.defined() ? 7 : 4);
      const bool any = s[5] > 0, scored_any = s[6] > 0;
      stats->is_ratio_min = any ? s[0] : 0, stats->is_ratio_mean = s[1], stats->is_ratio_max = any ? s[2] : 0;
      stats->sampling_logp_diff_mean = s[3], stats->sampling_logp_diff_max = scored_any ? s[4] : 0;
      stats->is_ratio_count = s[5], stats->sampling_logp_diff_count = s[6];
    }
  }
  return loss;
}

EntropyControl::EntropyControl(const GrpoConfig& g)
    : adaptive_(g.use_adaptive_entropy),
      coef_(g.entropy_coef),
      min_(g.entropy_coef_min),
      max_(g.entropy_coef_max),
      delta_(g.entropy_coef_delta),
      target_(g.entropy_target),
      last_entropy_(std::numeric_limits<double>::infinity()) {}

double EntropyControl::applied() const {
  if (!adaptive_) return coef_;
  return last_entropy_ <= target_ ? coef_ : 0.0;
}

void EntropyControl::end_step(double kept_entropy_sum, double kept_tokens) {
  if (!adaptive_) return;
  last_entropy_ = kept_entropy_sum / std::max(1.0, kept_tokens);
  coef_ = last_entropy_ <= target_ ? std::min(coef_ + delta_, max_) : std::max(coef_ - delta_, min_);
}

}  // namespace brl::grpo
