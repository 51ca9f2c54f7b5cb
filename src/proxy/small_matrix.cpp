#include "proxy/small_matrix.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "util/error.h"

namespace brl::proxy::small {

namespace {
constexpr int kMaxSweeps = 60;  // Jacobi converges quadratically: ~6-10 sweeps in practice
}

std::vector<double> symmetric_eigenvalues(std::vector<double> a, size_t n) {
  BRL_ASSERT(a.size() == n * n, "symmetric_eigenvalues: not n x n");
  auto at = [&](size_t i, size_t j) -> double& { return a[i * n + j]; };
  for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
    double off = 0, diag = 0;
    for (size_t i = 0; i < n; ++i) {
      diag += at(i, i) * at(i, i);
      for (size_t j = i + 1; j < n; ++j) off += at(i, j) * at(i, j);
    }
    if (!(off > 1e-32 * diag)) break;  // also stops on NaN
    for (size_t p = 0; p + 1 < n; ++p)
      for (size_t q = p + 1; q < n; ++q) {
        const double apq = at(p, q);
        if (apq == 0) continue;
        // The rotation that zeroes a_pq (Rutishauser's form: t the smaller root).
        const double theta = (at(q, q) - at(p, p)) / (2 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (size_t k = 0; k < n; ++k) {  // columns p, q
          const double x = at(k, p), y = at(k, q);
          at(k, p) = c * x - s * y;
          at(k, q) = s * x + c * y;
        }
        for (size_t k = 0; k < n; ++k) {  // rows p, q
          const double x = at(p, k), y = at(q, k);
          at(p, k) = c * x - s * y;
          at(q, k) = s * x + c * y;
        }
        at(p, q) = at(q, p) = 0;
      }
  }
  std::vector<double> ev(n);
  for (size_t i = 0; i < n; ++i) ev[i] = at(i, i);
  std::sort(ev.begin(), ev.end());
  return ev;
}

std::vector<double> singular_values(std::vector<double> a, size_t n) {
  BRL_ASSERT(a.size() == n * n, "singular_values: not n x n");
  auto at = [&](size_t i, size_t j) -> double& { return a[i * n + j]; };
  // Rotate pairs of columns until all are orthogonal; the column norms are then the values.
  for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
    bool rotated = false;
    for (size_t p = 0; p + 1 < n; ++p)
      for (size_t q = p + 1; q < n; ++q) {
        double alpha = 0, beta = 0, gamma = 0;
        for (size_t k = 0; k < n; ++k) {
          alpha += at(k, p) * at(k, p);
          beta += at(k, q) * at(k, q);
          gamma += at(k, p) * at(k, q);
        }
        if (!(std::abs(gamma) > 1e-15 * std::sqrt(alpha * beta))) continue;
        rotated = true;
        const double zeta = (beta - alpha) / (2 * gamma);
        const double t = (zeta >= 0 ? 1.0 : -1.0) / (std::abs(zeta) + std::sqrt(1 + zeta * zeta));
        const double c = 1 / std::sqrt(1 + t * t), s = c * t;
        for (size_t k = 0; k < n; ++k) {
          const double x = at(k, p), y = at(k, q);
          at(k, p) = c * x - s * y;
          at(k, q) = s * x + c * y;
        }
      }
    if (!rotated) break;
  }
  std::vector<double> sv(n, 0.0);
  for (size_t j = 0; j < n; ++j) {
    for (size_t k = 0; k < n; ++k) sv[j] += at(k, j) * at(k, j);
    sv[j] = std::sqrt(sv[j]);
  }
  std::sort(sv.begin(), sv.end(), std::greater<>());
  return sv;
}

bool invert(std::vector<double>& a, size_t n) {
  BRL_ASSERT(a.size() == n * n, "invert: not n x n");
  std::vector<double> inv(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) inv[i * n + i] = 1;
  for (size_t col = 0; col < n; ++col) {
    size_t piv = col;
    for (size_t i = col + 1; i < n; ++i)
      if (std::abs(a[i * n + col]) > std::abs(a[piv * n + col])) piv = i;
    const double p = a[piv * n + col];
    if (p == 0 || !std::isfinite(p)) return false;
    if (piv != col)
      for (size_t k = 0; k < n; ++k)
        std::swap(a[piv * n + k], a[col * n + k]), std::swap(inv[piv * n + k], inv[col * n + k]);
    for (size_t k = 0; k < n; ++k) a[col * n + k] /= p, inv[col * n + k] /= p;
    for (size_t i = 0; i < n; ++i) {
      if (i == col) continue;
      const double f = a[i * n + col];
      if (f == 0) continue;
      for (size_t k = 0; k < n; ++k) a[i * n + k] -= f * a[col * n + k], inv[i * n + k] -= f * inv[col * n + k];
    }
  }
  a = std::move(inv);
  return true;
}

}  // namespace brl::proxy::small
