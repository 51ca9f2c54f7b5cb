// Batched inverse-CDF sampling; cumulative sums in f64 as sample_row accumulates.
#include "generate/sample_rows.h"

#include <ATen/ATen.h>

namespace brl::gen {

std::pair<at::Tensor, at::Tensor> sample_rows(const at::Tensor& logits, const at::Tensor& u, const SamplerConfig& cfg,
                                              const at::Tensor& seen) {
  const int64_t V = logits.size(-1);
  const bool greedy = cfg.temperature <= 0 || cfg.top_k == 1;
  const double inv_t = cfg.temperature > 0 ? 1.0 / cfg.temperature : 1.0;
  auto z = inv_t == 1.0 ? logits : logits * inv_t;  // [B, V]
  auto logp_of = [&](const at::Tensor& tok) { return z.gather(1, tok.unsqueeze(1)).squeeze(1) - at::logsumexp(z, -1); };
  // The logits sampled from: penalised (on the raw logits, as apply_repetition_penalty), then scaled.
  at::Tensor raw = logits, zs = z;
  if (cfg.repetition_penalty != 1.0) {
    TORCH_CHECK(seen.defined() && seen.sizes() == logits.sizes(),
                "sample_rows: the repetition penalty needs seen [B, V]");
    const auto p = static_cast<float>(cfg.repetition_penalty);
    raw = at::where(seen, at::where(logits < 0, logits * p, logits / p), logits);
    zs = inv_t == 1.0 ? raw : raw * inv_t;
  }
  if (greedy) {
    auto tok = raw.argmax(-1);
    return {tok, logp_of(tok)};
  }
  const bool use_k = cfg.top_k > 0 && cfg.top_k < V, use_p = cfg.top_p < 1.0;
  const auto r_of = [&](const at::Tensor& cdf) {
    return (u.to(at::kDouble).unsqueeze(1) * cdf.narrow(1, cdf.size(1) - 1, 1));
  };
  // min-p as sample_row: a token stays when its weight relative to the top one is >= min_p.
  const auto min_p = [&](const at::Tensor& w) { return cfg.min_p > 0 ? w * (w >= cfg.min_p) : w; };
  if (!use_k && !use_p) {
    auto cdf = min_p((zs - zs.amax(-1, true)).exp().to(at::kDouble)).cumsum(-1);  // [B, V]
    auto tok = at::searchsorted(cdf, r_of(cdf), false, /*right=*/true).squeeze(1).clamp_max(V - 1);
    return {tok, logp_of(tok)};
  }
  // Candidates by probability, descending: the top k (topk's order), or every id (stable sort:
  // equal logits keep id order, as sample_row breaks ties).
  at::Tensor vals, idx;
  if (use_k) std::tie(vals, idx) = zs.topk(cfg.top_k, -1, true, true);
  else std::tie(vals, idx) = zs.sort(true, -1, true);
  auto w = (vals - vals.narrow(1, 0, 1)).exp().to(at::kDouble);  // [B, n]
  auto cdf = w.cumsum(-1);
  if (use_p) {
    // Keep the shortest prefix whose mass reaches top_p: a candidate stays while the mass
    // before it is below top_p of the total (the first always stays).
    auto keep = (cdf - w) < cdf.narrow(1, cdf.size(1) - 1, 1) * cfg.top_p;
    w = w * keep;
    cdf = w.cumsum(-1);
  }
  if (cfg.min_p > 0) {
    w = min_p(w);
    cdf = w.cumsum(-1);
  }
  auto n_kept = (w > 0).sum(-1, true).clamp_min(1);  // [B, 1]
  auto j = at::searchsorted(cdf, r_of(cdf), false, true);
  j = at::minimum(j, n_kept - 1);
  auto tok = idx.gather(1, j).squeeze(1);
  return {tok, logp_of(tok)};
}

}  // namespace brl::gen
