// Row sampler: O(V) for plain temperature sampling; top-k by selection; top-p sorts only
// the head of the distribution when it already holds top_p of the mass (the usual case).
#include "generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace brl::gen {

int64_t sample_row(const float* logits, int64_t V, const SamplerConfig& cfg, double u) {
  if (cfg.temperature <= 0 || cfg.top_k == 1) {
    return std::max_element(logits, logits + V) - logits;
  }
  const double inv_t = 1.0 / cfg.temperature;
  const float mx = *std::max_element(logits, logits + V);
  thread_local std::vector<int32_t> idx;
  thread_local std::vector<double> w;  // unnormalized probabilities exp((z - max) / T)
  w.resize(V);
  for (int64_t i = 0; i < V; ++i) w[i] = std::exp((static_cast<double>(logits[i]) - mx) * inv_t);

  const bool use_k = cfg.top_k > 0 && cfg.top_k < V;
  const bool use_p = cfg.top_p < 1.0;
  // min-p: a token stays when its probability is at least min_p times the top token's, i.e.
  // w >= min_p (the top token's w is exp(0) = 1).
  const double min_w = cfg.min_p;
  if (!use_k && !use_p) {
    if (min_w > 0)
      for (int64_t i = 0; i < V; ++i)
        if (w[i] < min_w) w[i] = 0;
    double z = 0;
    for (int64_t i = 0; i < V; ++i) z += w[i];
    double r = u * z, acc = 0;
    for (int64_t i = 0; i < V; ++i)
      if ((acc += w[i]) > r) return i;
    return std::max_element(logits, logits + V) - logits;  // rounding at the very end
  }

  idx.resize(V);
  std::iota(idx.begin(), idx.end(), 0);
  auto by_weight = [&](int32_t a, int32_t b) { return w[a] != w[b] ? w[a] > w[b] : a < b; };
  int64_t n = V;  // candidates: idx[0, n)
  if (use_k) {
    std::nth_element(idx.begin(), idx.begin() + cfg.top_k, idx.end(), by_weight);
    n = cfg.top_k;
    // Candidates in a defined order (by probability, ties by id), the order the batched GPU
    // sampler (sample_rows) walks, so that a uniform picks the same token on either.
    if (!use_p) std::sort(idx.begin(), idx.begin() + n, by_weight);
  }
  double z = 0;
  for (int64_t i = 0; i < n; ++i) z += w[idx[i]];
  if (use_p) {
    // Sort a head of the candidates; widen to all only if the head holds less than top_p.
    int64_t head = std::min<int64_t>(n, 1024);
    for (;;) {
      std::partial_sort(idx.begin(), idx.begin() + head, idx.begin() + n, by_weight);
      double acc = 0;
      int64_t keep = 0;
      // Keep the smallest prefix whose mass reaches top_p (at least one token).
      while (keep < head && (keep == 0 || acc < cfg.top_p * z)) acc += w[idx[keep++]];
      if (acc >= cfg.top_p * z || head == n) {
        n = keep;
        z = acc;
        break;
      }
      head = n;
    }
  }
  if (min_w > 0) {  // after top-k and top-p, over their candidates (sorted: a prefix stays)
    int64_t keep = 1;
    while (keep < n && w[idx[keep]] >= min_w) ++keep;
    if (keep < n) {
      n = keep;
      z = 0;
      for (int64_t i = 0; i < n; ++i) z += w[idx[i]];
    }
  }
  double r = u * z, acc = 0;
  for (int64_t i = 0; i < n; ++i)
    if ((acc += w[idx[i]]) > r) return idx[i];
  return idx[n - 1];
}

void apply_repetition_penalty(float* logits, const std::vector<int32_t>& tokens, double penalty) {
  const auto p = static_cast<float>(penalty);  // HF multiplies f32 logits by the f32 penalty
  for (int32_t t : tokens) logits[t] = logits[t] < 0 ? logits[t] * p : logits[t] / p;
}

}  // namespace brl::gen
