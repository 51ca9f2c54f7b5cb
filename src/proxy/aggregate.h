// How the proxy folds accepted worker deltas into the next global adapter ([aggregation]).
// Torch-free, over codec::Tensor lists with PEFT names. Mode "exact" needs one dense
// factorization of a large matrix per LoRA module, which a ProductFactorizer handed in by
// the caller does (the bucketrl binary hands in libtorch's: launch/aten_factorizer.h).
//
// Every mode first combines the deltas into one step d (same tensors as the adapter). w_i are
// relative weights (samples); s_i in (0, 1] are discounts (staleness: (1 + staleness)^-exponent)
// that scale update i's own step, so a stale update folded alone moves the adapter by s_i of
// its delta, not all of it (a weight alone would be normalized away).
//   fedavg        d = sum(w_i s_i delta_i) / sum(w_i), coordinate by coordinate. An update
//                 in a sparse codec (topk_*) did not send most elements (they decode as 0 and
//                 wait in its worker's error feedback): per element the sums run only over
//                 the updates that sent it (a sparse update sends no zeros), so two workers'
//                 top-k picks are not halved by each other's silence.
//   exact         per LoRA module (a "...lora_A.weight" [r, in] with its "...lora_B.weight"
//                 [out, r]): M = BA + sum(w_i s_i ((B + dB_i)(A + dA_i) - BA)) / sum(w_i)
//                 (s_i = 1: sum(w_i (B + dB_i)(A + dA_i)) / sum(w_i)), the weighted mean
//                 of the workers' full adapter products (not mean(B) mean(A), which misses
//                 the cross terms dB_i dA_i), truncated to rank r by SVD and split
//                 B' = U_r S_r^1/2, A' = S_r^1/2 V_r^T, so B'A' is M's best rank-r
//                 approximation (Eckart-Young). Any B'R, R^T A' with R orthogonal has the
//                 same product; R is chosen to bring (B', A') nearest to the current (B, A)
//                 (orthogonal Procrustes), so the factor step d = (A' - A, B' - B) is not
//                 inflated by sign flips or rotations of the singular vectors and momentum
//                 accumulates in a consistent basis. Note the split balances the factors
//                 (B'^T B' = A'A'^T = S_r): the first exact fold from PEFT's B = 0 start
//                 rescales A and B while it keeps their product. Tensors that are not half
//                 of a LoRA pair are averaged as in fedavg. stats.reconstruction_error: the
//                 relative ||M - B'A'||_F / ||M||_F per module (max, mean, worst module).
//   trimmed_mean  coordinate-wise over the discounted deltas s_i delta_i: of the n values drop
//                 floor(trim_ratio * n) at each end, average the rest.
//   median        coordinate-wise median of s_i delta_i (the mean of the two middle values for
//                 even n). Both robust modes ignore the weights: a weight is the worker's own
//                 claim (samples), and a robust rule must not let one worker buy influence.
//                 The discount is the proxy's own measure (versions behind), so they honour it.
//                 Both see each LoRA module's deltas gauge-fixed (below), so what they compare
//                 is what an update does, not the basis its factors happen to be written in.
//
// Gauge fixing. A LoRA update only acts through its product: (B_u G)(G^-1 A_u) = B_u A_u for any
// invertible r x r G, so element-wise statistics over raw factors can tell two equal updates
// apart (or trim an honest one). With the global's factors (A, B), A of full row rank, and an
// update's A_u = A + dA, B_u = B + dB: K = A_u A^+ (A^+ = A^T (A A^T)^-1) and the update is
// rewritten as (B_u K, K^-1 A_u). That pair has the same product, its A agrees with the global A
// on A's row space (K^-1 A_u A^+ = I) and differs only orthogonally to it, and it depends on the
// product alone: (B_u G, G^-1 A_u) gives K' = G^-1 K and the very same pair. An honest worker
// starts from (A, B) and moves A a little, so K is near I and its delta barely changes. Where
// A is rank-deficient, or K singular (an update that dropped A's row space), the delta is
// used as sent; stats.gauge counts both. update_norm() measures the same gauge-fixed delta
// (in fedavg mode the factors as sent, which is what fedavg folds).
// Then the outer step: without momentum next = global + lr * d. With server_momentum mu > 0
// (DiLoCo-style Nesterov, d taken as the negative outer gradient):
//   m <- mu m + d;   next = global + lr (d + mu m)
// with m kept in OuterState (exact: on the factor step, after refactorization). With lr = 1
// and mu = 0 exact publishes B'A' itself.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codec/codec.h"
#include "config/async_config.h"
#include "protocol/outer_state.h"
#include "util/status.h"

namespace brl::proxy {

// The outer optimizer's state between versions (server momentum, the bf16 run's master).
using OuterState = protocol::OuterState;

// The best rank-r factors of M = P Q: exact mode's one step that needs a dense SVD or
// eigensolver (large: M is out x in), which this library does not carry.
struct RankRFactors {
  std::vector<double> B, A;  // [out, r], [r, in]
  double rel_err = 0;        // ||M - B'A'||_F / ||M||_F with B', A' rounded to F32
};
class ProductFactorizer {
 public:
  virtual ~ProductFactorizer() = default;
  // P [out, k], Q [k, in], B0 [out, r], A0 [r, in], row-major. Returns B'A' = M's best rank-r
  // approximation (Eckart-Young; zero columns past M's rank), split balanced
  // (B'^T B' = A'A'^T = S_r) and rotated by the orthogonal R that brings (B'R, R^T A')
  // nearest to (B0, A0) (orthogonal Procrustes).
  virtual RankRFactors best_rank_r(const float* P, const float* Q, int64_t out, int64_t k, int64_t in, int64_t r,
                                   const float* B0, const float* A0) const = 0;
};

struct AggregateInput {
  const std::vector<codec::Tensor>* global = nullptr;
  std::vector<const std::vector<codec::Tensor>*> deltas;  // each: the adapter's names and shapes
  std::vector<double> weights;                            // one per delta, > 0
  std::vector<double> discounts;                          // one per delta in (0, 1]; empty = all 1
  std::vector<bool> sparse;                       // one per delta: its zeros were not sent (topk codecs); empty = none
  const ProductFactorizer* factorizer = nullptr;  // mode "exact" only
};

struct AggregateResult {
  std::vector<codec::Tensor> next;
  // mode, updates, total_weight, discount (sum(w_i s_i) / sum(w_i)), step_norm (|d|), delta_norm (|next - global|), and per mode:
  // trimmed_per_side; gauge {modules, unfixable_modules, unfixable_updates} (robust modes);
  // reconstruction_error {max, mean, worst}; server_momentum,
  // momentum_norm, outer_steps.
  nlohmann::json stats;
};

// The L2 norm of an update's delta over all tensors, as the mode folds it: for trimmed_mean,
// median and exact each LoRA module's part gauge-fixed against `global` (as sent where it
// cannot be fixed), so a change of basis does not move it (and the norm as sent when dA has
// no component in A's row space, dA = 0 included); for fedavg the factors as sent, since
// fedavg averages them as sent (a pair rescaled to (B / c, c A) keeps its product and its
// gauge-fixed norm, yet moves fedavg's mean of products). The proxy's max_update_norm and
// max_update_norm_ratio judge this. Delta and global must match (names, shapes).
double update_norm(const AggregationConfig& cfg, const std::vector<codec::Tensor>& global,
                   const std::vector<codec::Tensor>& delta);

// Throws UserError for an unknown mode, mode "exact" without a factorizer, mismatched deltas, bad weights, a state that does
// not match the adapter, or LoRA pairs of inconsistent shapes (naming the tensor). `state`
// may be null when cfg.server_momentum == 0; otherwise it is read and advanced.
AggregateResult aggregate(const AggregationConfig& cfg, const AggregateInput& in, OuterState* state);

}  // namespace brl::proxy
