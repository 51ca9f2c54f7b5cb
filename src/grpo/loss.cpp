#include "grpo/loss.h"

#include <ATen/core/grad_mode.h>

#include "util/error.h"

namespace brl::grpo {

at::Tensor group_advantages(const at::Tensor& rewards, int64_t group_size, const std::string& scale) {
  BRL_ASSERT(rewards.dim() == 1 && group_size > 0 && rewards.size(0) % group_size == 0);
  at::Tensor r = rewards.to(at::kDouble).view({-1, group_size});  // [N, G]
  at::Tensor adv = r - r.mean(1, /*keepdim=*/true);                 // [N, G]
  if (scale == "group") {
    adv = adv / (r.std(1, /*unbiased=*/true, /*keepdim=*/true) + 1e-4);
  } else if (scale == "batch") {
    adv = adv / (rewards.to(at::kDouble).std(/*unbiased=*/true) + 1e-4);
  } else if (scale != "none") {
    throw UserError("scale_rewards '" + scale + "' is not one of group, batch, none");
  }
  return adv.reshape({-1}).to(at::kFloat);
}

at::Tensor grpo_loss(const LossInputs& in, const LossOptions& opt, LossStats* stats) {
  const at::Tensor& logps = in.logps;  // [B, T]
  at::Tensor mask = in.mask.to(logps.dtype());
  at::Tensor ratio = at::exp(logps - in.old_logps);                                  // [B, T]
  at::Tensor clipped = at::clamp(ratio, 1.0 - opt.epsilon_low, 1.0 + opt.epsilon_high);
  at::Tensor adv = in.advantages.to(logps.dtype()).unsqueeze(1);                    // [B, 1]
  at::Tensor per_token = -at::min(ratio * adv, clipped * adv);                      // [B, T]
  at::Tensor kl;
  if (opt.beta != 0.0) {
    BRL_ASSERT(in.ref_logps.defined(), "beta > 0 needs reference log-probs");
    at::Tensor d = in.ref_logps - logps;
    kl = at::exp(d) - d - 1.0;  // k3: unbiased, always >= 0
    per_token = per_token + opt.beta * kl;
  }
  at::Tensor masked = per_token * mask;
  at::Tensor loss;
  if (opt.loss_type == "grpo") {
    loss = (masked.sum(1) / mask.sum(1).clamp_min(1.0)).mean();
  } else if (opt.loss_type == "bnpo") {
    loss = masked.sum() / mask.sum().clamp_min(1.0);
  } else if (opt.loss_type == "dr_grpo") {
    BRL_ASSERT(opt.max_completion_length > 0, "dr_grpo needs max_completion_length");
    loss = masked.sum() / static_cast<double>(logps.size(0) * opt.max_completion_length);
  } else if (opt.loss_type == "dapo") {
    double n = opt.num_items_in_batch > 0 ? opt.num_items_in_batch : std::max(1.0, mask.sum().item<double>());
    loss = masked.sum() / n;
  } else {
    throw UserError("loss_type '" + opt.loss_type + "' is not one of grpo, bnpo, dr_grpo, dapo");
  }
  if (stats) {
    at::NoGradGuard ng;
    double ntok = std::max(1.0, mask.sum().item<double>());
    // A token is clipped when the clipped branch is the one taken by min().
    at::Tensor is_clipped = ((ratio < 1.0 - opt.epsilon_low) & (adv < 0)) | ((ratio > 1.0 + opt.epsilon_high) & (adv > 0));
    stats->loss = loss.item<double>();
    stats->clip_ratio = (is_clipped.to(mask.dtype()) * mask).sum().item<double>() / ntok;
    stats->mean_ratio = (ratio * mask).sum().item<double>() / ntok;
    stats->kl = kl.defined() ? (kl * mask).sum().item<double>() / ntok : 0.0;
  }
  return loss;
}

}  // namespace brl::grpo
