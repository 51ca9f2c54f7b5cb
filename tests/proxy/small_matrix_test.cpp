// proxy/small_matrix.h against matrices whose spectra are known by construction:
// Q diag(l) Q^T and U diag(s) V^T with Q, U, V products of Householder reflections (exactly
// orthogonal up to rounding), hand examples, and inverses checked by their products.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "proxy/small_matrix.h"

using namespace brl::proxy;

namespace {

using Mat = std::vector<double>;

Mat mul(const Mat& a, const Mat& b, size_t n) {
  Mat c(n * n, 0.0);
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < n; ++k)
      for (size_t j = 0; j < n; ++j) c[i * n + j] += a[i * n + k] * b[k * n + j];
  return c;
}
Mat transpose(const Mat& a, size_t n) {
  Mat t(n * n);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) t[j * n + i] = a[i * n + j];
  return t;
}
// A random orthogonal matrix: the product of three Householder reflections I - 2 v v^T / v^T v.
Mat orthogonal(size_t n, std::mt19937& g) {
  std::normal_distribution<double> d;
  Mat q(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) q[i * n + i] = 1;
  for (int h = 0; h < 3; ++h) {
    std::vector<double> v(n);
    double vv = 0;
    for (auto& x : v) x = d(g), vv += x * x;
    Mat r(n * n);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) r[i * n + j] = (i == j ? 1.0 : 0.0) - 2 * v[i] * v[j] / vv;
    q = mul(q, r, n);
  }
  return q;
}
Mat diag(const std::vector<double>& s) {
  const size_t n = s.size();
  Mat m(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) m[i * n + i] = s[i];
  return m;
}

}  // namespace

TEST(SmallMatrix, HandExamples) {
  auto ev = small::symmetric_eigenvalues({2, 1, 1, 2}, 2);  // (1, 1) and (1, -1): 3 and 1
  EXPECT_NEAR(ev[0], 1, 1e-15);
  EXPECT_NEAR(ev[1], 3, 1e-15);
  auto zero_diag = small::symmetric_eigenvalues({0, 1, 1, 0}, 2);
  EXPECT_NEAR(zero_diag[0], -1, 1e-15);
  EXPECT_NEAR(zero_diag[1], 1, 1e-15);
  auto sv = small::singular_values({3, 0, 4, 5}, 2);  // A^T A = [[25, 20], [20, 25]]: 45, 5
  EXPECT_NEAR(sv[0], std::sqrt(45.0), 1e-14);
  EXPECT_NEAR(sv[1], std::sqrt(5.0), 1e-14);
  Mat a{4, 7, 2, 6};  // det 10: inverse (6, -7; -2, 4) / 10
  ASSERT_TRUE(small::invert(a, 2));
  EXPECT_NEAR(a[0], 0.6, 1e-15);
  EXPECT_NEAR(a[1], -0.7, 1e-15);
  EXPECT_NEAR(a[2], -0.2, 1e-15);
  EXPECT_NEAR(a[3], 0.4, 1e-15);
  Mat singular{1, 2, 2, 4};
  EXPECT_FALSE(small::invert(singular, 2));
  auto rank1 = small::singular_values({1, 2, 2, 4}, 2);  // sqrt(25) = 5 and 0
  EXPECT_NEAR(rank1[0], 5, 1e-14);
  EXPECT_NEAR(rank1[1], 0, 1e-14);
}

// Sizes of LoRA ranks, spectra over 12 orders of magnitude (the gauge fix's thresholds sit at
// 1e-6 and 1e-10 relative), some repeated.
TEST(SmallMatrix, KnownSpectra) {
  std::mt19937 g(7);
  for (size_t n : {1, 3, 8, 16, 33}) {
    SCOPED_TRACE(n);
    std::vector<double> want(n);
    for (size_t i = 0; i < n; ++i)
      want[i] = std::pow(10.0, -12.0 * static_cast<double>(i % 7) / 6.0) * (i % 3 == 0 ? -1 : 1);
    Mat q = orthogonal(n, g);
    auto ev = small::symmetric_eigenvalues(mul(mul(q, diag(want), n), transpose(q, n), n), n);
    auto sorted = want;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(ev[i], sorted[i], 1e-14) << i;

    std::vector<double> s(n);
    for (size_t i = 0; i < n; ++i) s[i] = std::abs(want[i]);
    Mat u = orthogonal(n, g), v = orthogonal(n, g);
    auto sv = small::singular_values(mul(mul(u, diag(s), n), transpose(v, n), n), n);
    std::sort(s.begin(), s.end(), std::greater<>());
    for (size_t i = 0; i < n; ++i) EXPECT_NEAR(sv[i], s[i], 1e-14) << i;

    // Well-conditioned (singular values 1..2): A A^-1 = I.
    std::vector<double> c(n);
    for (size_t i = 0; i < n; ++i) c[i] = 1 + static_cast<double>(i) / static_cast<double>(n);
    Mat a = mul(mul(u, diag(c), n), transpose(v, n), n), inv = a;
    ASSERT_TRUE(small::invert(inv, n));
    Mat id = mul(a, inv, n);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) EXPECT_NEAR(id[i * n + j], i == j ? 1.0 : 0.0, 1e-13);
  }
}
