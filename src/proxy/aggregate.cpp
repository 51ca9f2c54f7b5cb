#include "proxy/aggregate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "protocol/bucket.h"
#include "proxy/small_matrix.h"
#include "util/error.h"

namespace brl::proxy {

namespace {

using Step = std::vector<std::vector<double>>;  // the combined step d, one vector per tensor

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

void check_input(const AggregateInput& in) {
  BRL_ASSERT(in.global != nullptr, "aggregate: no global adapter");
  if (in.deltas.empty()) throw UserError("aggregate: no updates to fold");
  if (in.weights.size() != in.deltas.size())
    throw UserError("aggregate: " + std::to_string(in.weights.size()) + " weights for " +
                    std::to_string(in.deltas.size()) + " updates");
  if (!in.sparse.empty() && in.sparse.size() != in.deltas.size())
    throw UserError("aggregate: " + std::to_string(in.sparse.size()) + " sparse flags for " +
                    std::to_string(in.deltas.size()) + " updates");
  if (!in.discounts.empty() && in.discounts.size() != in.deltas.size())
    throw UserError("aggregate: " + std::to_string(in.discounts.size()) + " discounts for " +
                    std::to_string(in.deltas.size()) + " updates");
  const auto& g = *in.global;
  for (size_t u = 0; u < in.deltas.size(); ++u) {
    const std::string who = "aggregate: update " + std::to_string(u);
    if (!(in.weights[u] > 0 && std::isfinite(in.weights[u])))
      throw UserError(who + " has weight " + std::to_string(in.weights[u]) + " (must be finite and > 0)");
    if (!in.discounts.empty() && !(in.discounts[u] > 0 && in.discounts[u] <= 1))
      throw UserError(who + " has discount " + std::to_string(in.discounts[u]) + " (must be in (0, 1])");
    BRL_ASSERT(in.deltas[u] != nullptr, who + " is null");
    const auto& d = *in.deltas[u];
    if (d.size() != g.size())
      throw UserError(who + " has " + std::to_string(d.size()) + " tensors, the adapter " + std::to_string(g.size()));
    for (size_t i = 0; i < g.size(); ++i)
      if (d[i].name != g[i].name || d[i].shape != g[i].shape || d[i].data.size() != g[i].data.size())
        throw UserError(who + ": tensor " + d[i].name + " " + shape_str(d[i].shape) + " does not match the adapter's " +
                        g[i].name + " " + shape_str(g[i].shape));
  }
}

void check_pair(const codec::Tensor& gA, const codec::Tensor& gB, const char* mode) {
  if (gA.shape.size() != 2 || gB.shape.size() != 2 || gB.shape[1] != gA.shape[0])
    throw UserError(std::string("aggregate (") + mode + "): " + gA.name + " " + shape_str(gA.shape) + " and " +
                    gB.name + " " + shape_str(gB.shape) +
                    " are not the factors [r, in] and [out, r] of one LoRA module");
}

double total_weight(const AggregateInput& in) {
  double t = 0;
  for (double w : in.weights) t += w;
  return t;
}

double discount(const AggregateInput& in, size_t u) { return in.discounts.empty() ? 1.0 : in.discounts[u]; }

// sum(w_i (1 - s_i)) / sum(w_i): the share of the step the discounts take away.
double discounted_share(const AggregateInput& in) {
  double t = 0;
  for (size_t u = 0; u < in.deltas.size(); ++u) t += in.weights[u] * (1.0 - discount(in, u));
  return t / total_weight(in);
}

bool is_sparse(const AggregateInput& in, size_t u) { return !in.sparse.empty() && in.sparse[u]; }

// d = sum(w_i s_i x_i) / sum(w_i) for tensor i, delta by delta (each read once, in order);
// with sparse updates, per element over the updates that sent it (see aggregate.h).
void weighted_mean(const AggregateInput& in, size_t i, std::vector<double>& out) {
  const size_t len = (*in.global)[i].data.size();
  out.assign(len, 0.0);
  const bool any_sparse = std::find(in.sparse.begin(), in.sparse.end(), true) != in.sparse.end();
  std::vector<double> sent_weight(any_sparse ? len : 0, 0.0);  // sum(w_i) of the updates that sent each element
  double dense_weight = 0;
  for (size_t u = 0; u < in.deltas.size(); ++u) {
    const float* x = (*in.deltas[u])[i].data.data();
    const double w = in.weights[u] * discount(in, u);
    for (size_t k = 0; k < len; ++k) out[k] += w * x[k];
    if (!is_sparse(in, u)) {
      dense_weight += in.weights[u];
      continue;
    }
    for (size_t k = 0; k < len; ++k)
      if (x[k] != 0) sent_weight[k] += in.weights[u];
  }
  if (!any_sparse) {
    const double total = total_weight(in);
    for (double& v : out) v /= total;
    return;
  }
  for (size_t k = 0; k < len; ++k) {
    const double t = dense_weight + sent_weight[k];
    out[k] = t > 0 ? out[k] / t : 0.0;
  }
}

constexpr size_t kBlock = 64;  // elements sorted together: one row of the network

// Sorts each column of rows [p (a power of two)][kBlock] ascending in place: a bitonic
// network whose compare-exchanges are min/max of whole rows, so they vectorize and never
// branch on the data (nth_element per element, bound on branch mispredictions, was 3-5x
// slower here for 256 updates).
void sort_columns(float* rows, size_t p) {
  for (size_t k = 2; k <= p; k <<= 1)
    for (size_t j = k >> 1; j > 0; j >>= 1)
      for (size_t i = 0; i < p; ++i) {
        const size_t l = i ^ j;
        if (l <= i) continue;
        float* lo = rows + i * kBlock;
        float* hi = rows + l * kBlock;
        if (i & k) std::swap(lo, hi);  // a descending run of the bitonic sequence
        for (size_t c = 0; c < kBlock; ++c) {
          const float x = lo[c], y = hi[c];
          lo[c] = std::min(x, y);
          hi[c] = std::max(x, y);
        }
      }
}

// The n updates' values of one tensor, one pointer per update (len floats each): the deltas as
// sent, or their gauge-fixed form (below).
using Sources = std::vector<const float*>;

Sources as_sent(const AggregateInput& in, size_t i) {
  Sources src;
  for (auto* d : in.deltas) src.push_back((*d)[i].data.data());
  return src;
}

// Block by block: the n values of each element sorted, then use(sorted, m, out + first) with
// the value of rank j of element c at sorted[j * kBlock + c].
template <class Use>
void sorted_blocks(const AggregateInput& in, const Sources& src, size_t len, std::vector<double>& out, Use use) {
  const size_t n = src.size();
  size_t p = 1;
  while (p < n) p <<= 1;
  std::vector<float> rows(p * kBlock);
  out.resize(len);
  for (size_t b = 0; b < len; b += kBlock) {
    const size_t m = std::min(kBlock, len - b);
    for (size_t u = 0; u < n; ++u) {
      float* row = rows.data() + u * kBlock;
      std::memcpy(row, src[u] + b, m * sizeof(float));
      if (const float s = static_cast<float>(discount(in, u)); s != 1.0f)
        for (size_t c = 0; c < m; ++c) row[c] *= s;  // the robust rule sees the discounted step
      std::fill(row + m, row + kBlock, 0.0f);        // past the tensor's end: sorted, never used
    }
    // Padding rows sort after every real value.
    std::fill(rows.begin() + n * kBlock, rows.end(), std::numeric_limits<float>::infinity());
    sort_columns(rows.data(), p);
    use(rows.data(), m, out.data() + b);
  }
}

// Mean of each element's values without its k smallest and k largest (n > 2k).
void trimmed_mean(const AggregateInput& in, const Sources& src, size_t len, size_t k, std::vector<double>& out) {
  const size_t n = src.size();
  sorted_blocks(in, src, len, out, [&](const float* v, size_t m, double* o) {
    double acc[kBlock] = {0};
    for (size_t j = k; j < n - k; ++j)
      for (size_t c = 0; c < kBlock; ++c) acc[c] += v[j * kBlock + c];
    for (size_t c = 0; c < m; ++c) o[c] = acc[c] / static_cast<double>(n - 2 * k);
  });
}

// Each element's median: the middle value, or the mean of the two middle ones for even n.
void median(const AggregateInput& in, const Sources& src, size_t len, std::vector<double>& out) {
  const size_t n = src.size();
  sorted_blocks(in, src, len, out, [&](const float* v, size_t m, double* o) {
    const float* hi = v + (n / 2) * kBlock;
    const float* lo = v + ((n - 1) / 2) * kBlock;
    for (size_t c = 0; c < m; ++c) o[c] = 0.5 * (static_cast<double>(lo[c]) + hi[c]);
  });
}

// The "exact" fold of one LoRA module (see aggregate.h): the factor deltas into d.
double exact_module(const AggregateInput& in, size_t ia, size_t ib, Step& d) {
  const auto& gA = (*in.global)[ia];
  const auto& gB = (*in.global)[ib];
  check_pair(gA, gB, "exact");
  const int64_t r = gA.shape[0], nin = gA.shape[1], nout = gB.shape[0];
  // With discounts s_i: M = BA + sum(w_i s_i ((B + dB_i)(A + dA_i) - BA)) / W, i.e. one more
  // block c B A with c = sum(w_i (1 - s_i)) / W, the share of the step that stays at BA.
  const double c = discounted_share(in);
  const int64_t n = static_cast<int64_t>(in.deltas.size()), blocks = n + (c > 0 ? 1 : 0);
  const int64_t k = blocks * r;
  const double total = total_weight(in);

  // M = P Q with P = [w_1 s_1 (B + dB_1), ..., c B] / W  [out, k] and Q = [A + dA_1; ...; A]  [k, in].
  std::vector<float> P(static_cast<size_t>(nout * k)), Q(static_cast<size_t>(k * nin));
  float* p = P.data();
  float* q = Q.data();
  if (c > 0) {
    const int64_t u = n;
    const float* b = gB.data.data();
    for (int64_t o = 0; o < nout; ++o)
      for (int64_t j = 0; j < r; ++j) p[o * k + u * r + j] = static_cast<float>(c) * b[o * r + j];
    std::memcpy(q + u * r * nin, gA.data.data(), static_cast<size_t>(r * nin) * sizeof(float));
  }
  for (int64_t u = 0; u < n; ++u) {
    const float w = static_cast<float>(in.weights[u] * discount(in, static_cast<size_t>(u)) / total);
    const float* b = gB.data.data();
    const float* db = (*in.deltas[u])[ib].data.data();
    for (int64_t o = 0; o < nout; ++o)
      for (int64_t j = 0; j < r; ++j) p[o * k + u * r + j] = w * (b[o * r + j] + db[o * r + j]);
    const float* a = gA.data.data();
    const float* da = (*in.deltas[u])[ia].data.data();
    for (int64_t x = 0; x < r * nin; ++x) q[u * r * nin + x] = a[x] + da[x];
  }
  RankRFactors f = in.factorizer->best_rank_r(P.data(), Q.data(), nout, k, nin, r, gB.data.data(), gA.data.data());
  BRL_ASSERT(f.A.size() == gA.data.size() && f.B.size() == gB.data.size(),
             "exact: the factorizer returned other shapes");
  d[ia].resize(f.A.size());
  for (size_t j = 0; j < f.A.size(); ++j) d[ia][j] = f.A[j] - gA.data[j];
  d[ib].resize(f.B.size());
  for (size_t j = 0; j < f.B.size(); ++j) d[ib][j] = f.B[j] - gB.data[j];
  return f.rel_err;
}

// The LoRA partner of an "...lora_A..." tensor: the same name with lora_B.
std::string partner_name(const std::string& a_name) {
  auto pos = a_name.rfind("lora_A");
  return a_name.substr(0, pos) + "lora_B" + a_name.substr(pos + 6);
}

// The adapter's LoRA modules as (index of lora_A, index of its lora_B), in the adapter's order.
std::vector<std::pair<size_t, size_t>> lora_pairs(const std::vector<codec::Tensor>& g) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < g.size(); ++i) index[g[i].name] = i;
  std::vector<std::pair<size_t, size_t>> pairs;
  for (size_t ia = 0; ia < g.size(); ++ia) {
    if (g[ia].name.find("lora_A") == std::string::npos) continue;
    if (auto it = index.find(partner_name(g[ia].name)); it != index.end()) pairs.emplace_back(ia, it->second);
  }
  return pairs;
}

// Gauge fixing (see aggregate.h): the global A's pseudo-inverse A^+ = A^T (A A^T)^-1 [in, r]
// in F32, empty when A is not of full row rank (its Gram matrix's smallest eigenvalue below
// 1e-10 of the largest): then no update of the module can be fixed and all go as sent.
std::vector<float> row_space_pinv(const codec::Tensor& gA) {
  const size_t r = static_cast<size_t>(gA.shape[0]), nin = static_cast<size_t>(gA.shape[1]);
  const float* A = gA.data.data();
  std::vector<double> gram(r * r, 0.0);
  for (size_t i = 0; i < r; ++i)
    for (size_t j = i; j < r; ++j) {
      double acc = 0;
      for (size_t x = 0; x < nin; ++x) acc += static_cast<double>(A[i * nin + x]) * A[j * nin + x];
      gram[i * r + j] = gram[j * r + i] = acc;
    }
  const auto ev = small::symmetric_eigenvalues(gram, r);  // ascending
  if (ev.empty() || !(ev.back() > 0) || !(ev.front() > 1e-10 * ev.back())) return {};
  if (!small::invert(gram, r)) return {};
  std::vector<float> pinv_t(r * nin);  // (A^+)^T = (A A^T)^-1 A, rows for dot products
  for (size_t j = 0; j < r; ++j)
    for (size_t x = 0; x < nin; ++x) {
      double acc = 0;
      for (size_t i = 0; i < r; ++i) acc += gram[j * r + i] * A[i * nin + x];
      pinv_t[j * nin + x] = static_cast<float>(acc);
    }
  return pinv_t;
}

// sum(a[x] b[x]) over eight running sums, which the compiler vectorizes (one running sum
// would be a chain of dependent adds: strict float order forbids reassociating it).
inline float dot(const float* a, const float* b, size_t n) {
  float acc[8] = {};
  size_t x = 0;
  for (; x + 8 <= n; x += 8)
    for (size_t l = 0; l < 8; ++l) acc[l] += a[x + l] * b[x + l];
  float s = 0;
  for (; x < n; ++x) s += a[x] * b[x];
  for (float v : acc) s += v;
  return s;
}

// oB += (B + dB) E [out, r] for rank R known at compile time (0: r at run time): with R
// fixed, a row of r running sums lives in registers; with a run-time r it goes through
// memory on every step.
template <size_t R>
void add_times_E(const float* B, const float* dB, const float* E, float* oB, size_t r_, size_t nout) {
  const size_t r = R ? R : r_;
  for (size_t o = 0; o < nout; ++o) {
    float acc[R ? R : 1];
    float* ob = R ? acc : oB + o * r;
    if (R) std::copy(oB + o * r, oB + o * r + r, ob);
    for (size_t k = 0; k < r; ++k) {
      const float c = B[o * r + k] + dB[o * r + k];
      const float* e = E + k * r;
      for (size_t j = 0; j < r; ++j) ob[j] += c * e[j];
    }
    if (R) std::copy(ob, ob + r, oB + o * r);
  }
}

// The n updates' factors of one module written in the global's gauge: per update
// K = (A + dA) A^+ and the pair (B_u K, K^-1 A_u), returned as deltas from (B, A) computed as
// dB + B_u (K - I) and dA + (K^-1 - I) A_u, so nothing cancels when K is near I (an honest
// worker's). An update whose K is singular (smallest singular value below 1e-6 of the
// largest: it dropped the global's row space) has no such form and is returned as sent.
// The r x r algebra in F64; the products with the factors in F32 (they only add the
// corrections, which are small next to the factors for an honest update).
struct Fixed {
  std::vector<float> dA, dB;  // [n, r, in], [n, out, r]
  std::vector<bool> fixed;    // per update
};
Fixed fix_gauge(const codec::Tensor& gA, const codec::Tensor& gB, const std::vector<float>& pinv_t, const Sources& sa,
                const Sources& sb) {
  const size_t n = sa.size(), r = static_cast<size_t>(gA.shape[0]), nin = static_cast<size_t>(gA.shape[1]),
               nout = static_cast<size_t>(gB.shape[0]);
  const float* A = gA.data.data();
  const float* B = gB.data.data();
  Fixed f;
  f.dA.resize(n * r * nin);
  f.dB.resize(n * nout * r);
  f.fixed.assign(n, false);
  std::vector<float> E(r * r), Ki(r * r), Au(r * nin);
  std::vector<double> K(r * r);
  auto add_BE = r == 8    ? add_times_E<8>
                : r == 16 ? add_times_E<16>
                : r == 32 ? add_times_E<32>
                : r == 64 ? add_times_E<64>
                          : add_times_E<0>;
  for (size_t u = 0; u < n; ++u) {
    const float* dA = sa[u];
    const float* dB = sb[u];
    float* oA = f.dA.data() + u * r * nin;
    float* oB = f.dB.data() + u * nout * r;
    std::memcpy(oA, dA, r * nin * sizeof(float));
    std::memcpy(oB, dB, nout * r * sizeof(float));
    // E = dA A^+ = K - I, as A A^+ = I: dot products of rows of dA and of (A^+)^T.
    for (size_t i = 0; i < r; ++i)
      for (size_t j = 0; j < r; ++j) E[i * r + j] = dot(dA + i * nin, pinv_t.data() + j * nin, nin);
    for (size_t j = 0; j < r * r; ++j) K[j] = E[j] + (j % (r + 1) == 0 ? 1.0 : 0.0);
    const auto sv = small::singular_values(K, r);                       // descending
    if (!(sv[r - 1] > 1e-6 * sv[0]) || !small::invert(K, r)) continue;  // unfixable: as sent
    f.fixed[u] = true;
    add_BE(B, dB, E.data(), oB, r, nout);  // dB + (B + dB) E
    for (size_t j = 0; j < r * r; ++j) Ki[j] = static_cast<float>(K[j] - (j % (r + 1) == 0 ? 1.0 : 0.0));
    // dA + (K^-1 - I)(A + dA), four rows at a time, so each row of A + dA is loaded once per four.
    for (size_t j = 0; j < r * nin; ++j) Au[j] = A[j] + dA[j];
    size_t i = 0;
    for (; i + 4 <= r; i += 4)
      for (size_t k = 0; k < r; ++k) {
        const float c0 = Ki[i * r + k], c1 = Ki[(i + 1) * r + k], c2 = Ki[(i + 2) * r + k], c3 = Ki[(i + 3) * r + k];
        const float* au = Au.data() + k * nin;
        float* o = oA + i * nin;
        for (size_t x = 0; x < nin; ++x) {
          const float v = au[x];
          o[x] += c0 * v;
          o[nin + x] += c1 * v;
          o[2 * nin + x] += c2 * v;
          o[3 * nin + x] += c3 * v;
        }
      }
    for (; i < r; ++i)
      for (size_t k = 0; k < r; ++k) {
        const float c = Ki[i * r + k];
        const float* au = Au.data() + k * nin;
        float* o = oA + i * nin;
        for (size_t x = 0; x < nin; ++x) o[x] += c * au[x];
      }
  }
  return f;
}

void exact_step(const AggregateInput& in, Step& d, nlohmann::json& stats) {
  const auto& g = *in.global;
  std::vector<bool> done(g.size(), false);
  double max_err = 0, sum_err = 0;
  std::string worst;
  int modules = 0;
  for (auto [ia, ib] : lora_pairs(g)) {
    const double err = exact_module(in, ia, ib, d);
    done[ia] = done[ib] = true;
    ++modules;
    sum_err += err;
    if (err >= max_err) max_err = err, worst = g[ia].name.substr(0, g[ia].name.rfind("lora_A"));
  }
  for (size_t i = 0; i < g.size(); ++i)
    if (!done[i]) weighted_mean(in, i, d[i]);  // not half of a LoRA pair
  stats["modules"] = modules;
  stats["reconstruction_error"] = {{"max", max_err}, {"mean", modules ? sum_err / modules : 0.0}, {"worst", worst}};
}

// trimmed_mean (k per side) or median, element by element over the updates; each LoRA module's
// updates gauge-fixed first, one module at a time (n copies of one module, not of the adapter).
void robust_step(const AggregateInput& in, bool trimmed, size_t k, Step& d, nlohmann::json& stats) {
  const auto& g = *in.global;
  const size_t n = in.deltas.size();
  auto fold = [&](const Sources& src, size_t i) {
    if (trimmed) trimmed_mean(in, src, g[i].data.size(), k, d[i]);
    else median(in, src, g[i].data.size(), d[i]);
  };
  std::vector<bool> done(g.size(), false);
  int64_t modules = 0, unfixable_modules = 0, unfixable_updates = 0;
  for (auto [ia, ib] : lora_pairs(g)) {
    check_pair(g[ia], g[ib], trimmed ? "trimmed_mean" : "median");
    ++modules;
    Sources sa = as_sent(in, ia), sb = as_sent(in, ib);
    const std::vector<float> pinv = row_space_pinv(g[ia]);
    Fixed f;
    if (!pinv.empty()) {
      f = fix_gauge(g[ia], g[ib], pinv, sa, sb);
      const size_t la = g[ia].data.size(), lb = g[ib].data.size();
      for (size_t u = 0; u < n; ++u) {
        sa[u] = f.dA.data() + u * la;
        sb[u] = f.dB.data() + u * lb;
        unfixable_updates += !f.fixed[u];
      }
    } else {
      ++unfixable_modules;
    }
    fold(sa, ia);
    fold(sb, ib);
    done[ia] = done[ib] = true;
  }
  for (size_t i = 0; i < g.size(); ++i)
    if (!done[i]) fold(as_sent(in, i), i);
  stats["gauge"] = {
      {"modules", modules}, {"unfixable_modules", unfixable_modules}, {"unfixable_updates", unfixable_updates}};
}

}  // namespace

double update_norm(const AggregationConfig& cfg, const std::vector<codec::Tensor>& global,
                   const std::vector<codec::Tensor>& delta) {
  BRL_ASSERT(delta.size() == global.size(), "update_norm: the delta does not match the adapter");
  std::vector<bool> done(global.size(), false);
  double sq = 0;
  auto add = [&](const float* x, size_t len) {
    for (size_t j = 0; j < len; ++j) sq += static_cast<double>(x[j]) * x[j];
  };
  // fedavg folds the factors as sent, so it must judge them as sent: a factor pair rescaled
  // (B / c, c A) has a small gauge-fixed norm but moves fedavg's mean product.
  for (auto [ia, ib] :
       cfg.mode == AggregationMode::fedavg ? std::vector<std::pair<size_t, size_t>>{} : lora_pairs(global)) {
    const auto &gA = global[ia], &gB = global[ib];
    if (gA.shape.size() != 2 || gB.shape.size() != 2 || gB.shape[1] != gA.shape[0]) continue;  // counted as sent
    const std::vector<float> pinv = row_space_pinv(gA);
    if (pinv.empty()) continue;
    Fixed f = fix_gauge(gA, gB, pinv, {delta[ia].data.data()}, {delta[ib].data.data()});
    add(f.dA.data(), f.dA.size());  // as sent where it could not be fixed
    add(f.dB.data(), f.dB.size());
    done[ia] = done[ib] = true;
  }
  for (size_t i = 0; i < global.size(); ++i)
    if (!done[i]) add(delta[i].data.data(), delta[i].data.size());
  return std::sqrt(sq);
}

AggregateResult aggregate(const AggregationConfig& cfg, const AggregateInput& in, OuterState* state) {
  check_input(in);
  const auto& g = *in.global;
  const size_t n = in.deltas.size();
  AggregateResult res;
  res.stats = {{"mode", kAggregationModes(cfg.mode)},
               {"updates", n},
               {"total_weight", total_weight(in)},
               {"discount", 1.0 - discounted_share(in)}};

  Step d(g.size());
  switch (cfg.mode) {
    case AggregationMode::fedavg:
      for (size_t i = 0; i < g.size(); ++i) weighted_mean(in, i, d[i]);
      break;
    case AggregationMode::trimmed_mean: {
      const size_t k = static_cast<size_t>(std::floor(cfg.trim_ratio * static_cast<double>(n)));
      BRL_ASSERT(2 * k < n, "trim_ratio must be < 0.5");
      robust_step(in, true, k, d, res.stats);
      res.stats["trimmed_per_side"] = k;
      break;
    }
    case AggregationMode::median: robust_step(in, false, 0, d, res.stats); break;
    case AggregationMode::exact:
      if (in.factorizer == nullptr)
        throw UserError(
            "[aggregation] mode = \"exact\" needs the dense factorization of libtorch, which this build of the "
            "proxy does not link: use the bucketrl executable, or mode fedavg, trimmed_mean or median");
      exact_step(in, d, res.stats);
      break;
  }

  // The outer step.
  const double lr = cfg.server_learning_rate, mu = cfg.server_momentum;
  if (mu > 0) {
    BRL_ASSERT(state != nullptr, "aggregate: server_momentum > 0 needs an outer state");
    if (state->momentum.empty()) {
      for (auto& t : g) state->momentum.push_back({t.name, t.shape, std::vector<float>(t.data.size(), 0.0f)});
    } else {
      bool same = state->momentum.size() == g.size();
      for (size_t i = 0; same && i < g.size(); ++i)
        same = state->momentum[i].name == g[i].name && state->momentum[i].shape == g[i].shape &&
               state->momentum[i].data.size() == g[i].data.size();
      if (!same)
        throw UserError(
            "aggregate: the outer optimizer state does not match the adapter (tensor names or shapes differ)");
    }
  }
  res.next = g;
  double step_sq = 0, delta_sq = 0, m_sq = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    float* x = res.next[i].data.data();
    float* m = mu > 0 ? state->momentum[i].data.data() : nullptr;
    for (size_t j = 0; j < d[i].size(); ++j) {
      const double dj = d[i][j];
      double u;
      if (m) {
        m[j] = static_cast<float>(mu * m[j] + dj);  // the F32 buffer is the state: a restart continues bit for bit
        u = lr * (dj + mu * m[j]);
        m_sq += static_cast<double>(m[j]) * m[j];
      } else {
        u = lr * dj;
      }
      x[j] = static_cast<float>(x[j] + u);
      step_sq += dj * dj;
      delta_sq += u * u;
    }
  }
  res.stats["step_norm"] = std::sqrt(step_sq);
  res.stats["delta_norm"] = std::sqrt(delta_sq);
  res.stats["server_learning_rate"] = lr;
  if (mu > 0) {
    ++state->steps;
    res.stats["server_momentum"] = mu;
    res.stats["momentum_norm"] = std::sqrt(m_sq);
    res.stats["outer_steps"] = state->steps;
  }
  return res;
}

}  // namespace brl::proxy
