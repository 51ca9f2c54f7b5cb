#include "launch/aten_factorizer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace brl::launch {

namespace {

class AtenFactorizer final : public proxy::ProductFactorizer {
 public:
  proxy::RankRFactors best_rank_r(const float* p, const float* q, int64_t nout, int64_t k, int64_t nin, int64_t r,
                                  const float* b0, const float* a0) const override {
    const int64_t s = std::min(nin, nout);
    at::Tensor P = at::from_blob(const_cast<float*>(p), {nout, k}, at::kFloat);
    at::Tensor Q = at::from_blob(const_cast<float*>(q), {k, nin}, at::kFloat);
    // Top t = min(r, rank bound) singular triplets, as the balanced factors
    // Bt = U_t S_t^1/2 [out, t] and At = S_t^1/2 V_t^T [t, in].
    at::Tensor Bt, At, M;
    if (k < s) {
      // Rank <= k below both sides: QR of each factor, SVD of the small k x k core (exact, and
      // far cheaper than forming M when few updates are folded).
      auto [Qp, Rp] = at::linalg_qr(P.to(at::kDouble));
      auto [Qq, Rq] = at::linalg_qr(Q.to(at::kDouble).t());
      auto [Uc, S, Vhc] = at::linalg_svd(at::mm(Rp, Rq.t()), /*full_matrices=*/false);
      const int64_t t = std::min(r, k);
      at::Tensor root = S.slice(0, 0, t).sqrt();
      Bt = at::mm(Qp, Uc.slice(1, 0, t)) * root.unsqueeze(0);
      At = root.unsqueeze(1) * at::mm(Vhc.slice(0, 0, t), Qq.t());
    } else {
      // Dense: M in F32 (one GEMM), then the eigendecomposition of the Gram matrix of its
      // smaller side in F64: the top r triplets at a fraction of a full SVD's cost, accurate
      // for singular values down to ~1e-7 of the largest (smaller ones add < 1e-14 to |M|^2).
      M = at::mm(P, Q).to(at::kDouble);
      const bool wide = nin > nout;
      auto [L, V] = at::linalg_eigh(wide ? at::mm(M, M.t()) : at::mm(M.t(), M));  // ascending
      const int64_t t = std::min(r, s);
      at::Tensor sigma = L.slice(0, s - t, s).flip(0).clamp_min(0).sqrt();
      at::Tensor vecs = V.slice(1, s - t, s).flip(1);
      at::Tensor root = sigma.sqrt();
      // 1 / sqrt(sigma), 0 where sigma is (numerically) zero: that direction carries nothing.
      const double floor = sigma.numel() ? sigma[0].item<double>() * 1e-12 : 0;
      at::Tensor inv_root = at::where(sigma > floor, 1.0 / root, at::zeros_like(root));
      if (wide) {  // vecs = U_t
        Bt = vecs * root.unsqueeze(0);
        At = inv_root.unsqueeze(1) * at::mm(vecs.t(), M);
      } else {  // vecs = V_t
        Bt = at::mm(M, vecs) * inv_root.unsqueeze(0);
        At = root.unsqueeze(1) * vecs.t();
      }
    }
    at::Tensor B = at::zeros({nout, r}, at::kDouble), A = at::zeros({r, nin}, at::kDouble);
    B.slice(1, 0, Bt.size(1)).copy_(Bt);
    A.slice(0, 0, At.size(0)).copy_(At);

    // Procrustes: the orthogonal R maximizing tr(R^T (B'^T B0 + A' A0^T)) brings (B'R, R^T A')
    // nearest to the current factors; the product is unchanged.
    at::Tensor B0 = at::from_blob(const_cast<float*>(b0), {nout, r}, at::kFloat).to(at::kDouble);
    at::Tensor A0 = at::from_blob(const_cast<float*>(a0), {r, nin}, at::kFloat).to(at::kDouble);
    auto [Ur, Sr, Vhr] = at::linalg_svd(at::mm(B.t(), B0) + at::mm(A, A0.t()), false);
    at::Tensor R = at::mm(Ur, Vhr);
    B = at::mm(B, R).contiguous();
    A = at::mm(R.t(), A).contiguous();

    // Relative error of the factors as published (rounded to F32).
    at::Tensor Bf = B.to(at::kFloat).to(at::kDouble), Af = A.to(at::kFloat).to(at::kDouble);
    double m2 = 0, e2 = 0;
    if (M.defined()) {
      m2 = M.square().sum().item<double>();
      e2 = (M - at::mm(Bf, Af)).square().sum().item<double>();
    } else {
      // |PQ - B'A'|^2 = tr(P^TP QQ^T) - 2 tr(P^TB' A'Q^T) + tr(B'^TB' A'A'^T), all k x k or smaller.
      at::Tensor P64 = P.to(at::kDouble), Q64 = Q.to(at::kDouble);
      m2 = (at::mm(P64.t(), P64) * at::mm(Q64, Q64.t())).sum().item<double>();
      double cross = (at::mm(P64.t(), Bf) * at::mm(Q64, Af.t())).sum().item<double>();
      double f2 = (at::mm(Bf.t(), Bf) * at::mm(Af, Af.t())).sum().item<double>();
      e2 = std::max(0.0, m2 - 2 * cross + f2);
    }
    proxy::RankRFactors out;
    out.B.assign(B.data_ptr<double>(), B.data_ptr<double>() + B.numel());
    out.A.assign(A.data_ptr<double>(), A.data_ptr<double>() + A.numel());
    out.rel_err = m2 > 0 ? std::sqrt(e2 / m2) : 0.0;
    return out;
  }
};

}  // namespace

const proxy::ProductFactorizer& aten_factorizer() {
  static const AtenFactorizer f;
  return f;
}

}  // namespace brl::launch
