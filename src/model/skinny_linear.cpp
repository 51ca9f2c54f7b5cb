// Few-row linear: y[m, n] = dot(x[m, :], W[n, :]) + b[n], W in F32 or BF16, sums in F32.
//
// The kernel is written once over a GCC vector type V (4, 8 or 16 floats) and force-inlined
// into one entry per instruction set, each compiled for that set with a target attribute, so
// the project keeps its default x86-64 flags and the choice is made at run time.
#include "model/skinny_linear.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/Parallel.h>

// at::parallel_for's OpenMP region is an inline template: without -fopenmp in this file it
// runs on one thread whatever at::get_num_threads() says (it did until 2026-12-06).
#ifndef INTRA_OP_PARALLEL
#error "compile skinny_linear.cpp with -fopenmp (CMakeLists.txt): at::parallel_for is serial without it"
#endif

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace brl::model {
namespace {

using V4 = float __attribute__((vector_size(16)));
using V8 = float __attribute__((vector_size(32)));
using V16 = float __attribute__((vector_size(64)));

// A BF16 weight is the top half of an F32's bits: widened by a shift, the loop streams half
// the bytes of an F32 W for the same FMAs (decode is bound by those bytes).
using Bf16 = uint16_t;

struct Args {
  const float* x;  // [M, K]
  const void* w;   // [N, K], float or Bf16
  const float* b;  // [N] or null
  float* y;        // [M, N]
  int64_t M, K, N;
};

// Rows of W per tile. Two keep MR * 2 accumulators in registers and stream two rows of W at
// once, which is already past the memory bandwidth per core at every MR (see BENCHMARKS.md).
constexpr int kNR = 2;

// Vectors pass by reference only: by value they would change the ABI between targets.
template <typename V>
[[gnu::always_inline]] inline void load(V& v, const float* p) {
  std::memcpy(&v, p, sizeof(V));  // unaligned load
}

// L weights from p as F32 lanes.
template <typename V, typename T>
[[gnu::always_inline]] inline void load_w(V& v, const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    load(v, p);
  } else {
    constexpr int L = sizeof(V) / sizeof(float);
    using H = std::conditional_t<L == 16, uint16_t __attribute__((vector_size(32))),
                                 std::conditional_t<L == 8, uint16_t __attribute__((vector_size(16))),
                                                    uint16_t __attribute__((vector_size(8)))>>;
    using U = std::conditional_t<L == 16, uint32_t __attribute__((vector_size(64))),
                                 std::conditional_t<L == 8, uint32_t __attribute__((vector_size(32))),
                                                    uint32_t __attribute__((vector_size(16)))>>;
    H h;
    std::memcpy(&h, p, sizeof(H));
    const U u = __builtin_convertvector(h, U) << 16;
    std::memcpy(&v, &u, sizeof(V));
  }
}

[[gnu::always_inline]] inline float to_float(float v) { return v; }
[[gnu::always_inline]] inline float to_float(Bf16 h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Sum of the lanes by halving in vector registers (a scalar loop over a stored copy was
// ~40% of the time at K = 512: it runs once per output).
template <typename V>
[[gnu::always_inline]] inline float hsum(const V& v) {
  constexpr int L = sizeof(V) / sizeof(float);
  if constexpr (L == 4) {
    return (v[0] + v[2]) + (v[1] + v[3]);
  } else {
    using H = std::conditional_t<L == 16, V8, V4>;  // half of V
    H lo, hi;
    std::memcpy(&lo, &v, sizeof(H));
    std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof(H), sizeof(H));
    const H s = lo + hi;
    return hsum(s);
  }
}

// y[m0 + i, n0 + j] for i < MR, j < NR: independent accumulators per (i, j); the K tail
// shorter than a vector is done in scalars.
template <typename V, typename T, int MR, int NR>
[[gnu::always_inline]] inline void tile(const Args& a, int64_t m0, int64_t n0) {
  constexpr int L = sizeof(V) / sizeof(float);
  const int64_t K = a.K;
  const float* x = a.x + m0 * K;
  const T* w = static_cast<const T*>(a.w) + n0 * K;
  V acc[MR][NR] = {};
  int64_t k = 0;
  for (; k + L <= K; k += L) {
    V wv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      load_w(wv[j], w + j * K + k);
      // The next tile's rows: at several rows of x per row of W the hardware prefetcher
      // alone leaves the loop waiting on memory (half the bandwidth at 8 rows).
      __builtin_prefetch(w + (NR + j) * K + k);
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      V xv;
      load(xv, x + i * K + k);
      // Keep xv in a register: folded into each FMA as a memory operand, it is loaded NR
      // times, and loads, not FMAs, then bound the loop.
      asm("" : "+v"(xv));
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[i][j] += xv * wv[j];
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      float s = hsum(acc[i][j]);
      for (int64_t t = k; t < K; ++t) s += x[i * K + t] * to_float(w[j * K + t]);
      a.y[(m0 + i) * a.N + n0 + j] = a.b ? s + a.b[n0 + j] : s;
    }
}

// All rows of x against W rows n0 .. n0 + NR - 1 (kept in L1 between row groups).
template <typename V, typename T, int MaxMR, int NR>
[[gnu::always_inline]] inline void rows_of_x(const Args& a, int64_t n0) {
  for (int64_t m0 = 0; m0 < a.M; m0 += MaxMR) {
    switch (std::min<int64_t>(MaxMR, a.M - m0)) {
      case 1: tile<V, T, 1, NR>(a, m0, n0); break;
      case 2: tile<V, T, 2, NR>(a, m0, n0); break;
      case 3: tile<V, T, 3, NR>(a, m0, n0); break;
      case 4: tile<V, T, 4, NR>(a, m0, n0); break;
      case 5:
        if constexpr (MaxMR >= 5) tile<V, T, 5, NR>(a, m0, n0);
        break;
      case 6:
        if constexpr (MaxMR >= 6) tile<V, T, 6, NR>(a, m0, n0);
        break;
      case 7:
        if constexpr (MaxMR >= 7) tile<V, T, 7, NR>(a, m0, n0);
        break;
      case 8:
        if constexpr (MaxMR >= 8) tile<V, T, 8, NR>(a, m0, n0);
        break;
    }
  }
}

// Output columns [n0, n1). MaxMR bounds the accumulators to the register file: 8 x 2 of the 32
// zmm registers with AVX-512, 4 x 2 of the 16 ymm / xmm registers with AVX2 / SSE.
template <typename V, typename T, int MaxMR>
[[gnu::always_inline]] inline void columns(const Args& a, int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + kNR <= n1; n += kNR) rows_of_x<V, T, MaxMR, kNR>(a, n);
  for (; n < n1; ++n) rows_of_x<V, T, MaxMR, 1>(a, n);
}

#if defined(__x86_64__) || defined(__i386__)
template <typename T>
__attribute__((target("avx512f,fma"))) void columns_avx512(const Args& a, int64_t n0, int64_t n1) {
  columns<V16, T, 8>(a, n0, n1);
}
template <typename T>
__attribute__((target("avx2,fma"))) void columns_avx2(const Args& a, int64_t n0, int64_t n1) {
  columns<V8, T, 4>(a, n0, n1);
}
#endif
template <typename T>
void columns_generic(const Args& a, int64_t n0, int64_t n1) {
  columns<V4, T, 4>(a, n0, n1);
}

using ColumnsFn = void (*)(const Args&, int64_t, int64_t);

template <typename T>
ColumnsFn pick(SkinnyIsa isa) {
  if (isa == SkinnyIsa::kAuto) {
    static const SkinnyIsa best = skinny_isa_supported(SkinnyIsa::kAvx512) ? SkinnyIsa::kAvx512
                                  : skinny_isa_supported(SkinnyIsa::kAvx2) ? SkinnyIsa::kAvx2
                                                                           : SkinnyIsa::kGeneric;
    isa = best;
  }
  TORCH_CHECK(skinny_isa_supported(isa), "skinny_linear: instruction set not supported here");
#if defined(__x86_64__) || defined(__i386__)
  if (isa == SkinnyIsa::kAvx512) return columns_avx512<T>;
  if (isa == SkinnyIsa::kAvx2) return columns_avx2<T>;
#endif
  return columns_generic<T>;
}

}  // namespace

bool skinny_isa_supported(SkinnyIsa isa) {
  switch (isa) {
    case SkinnyIsa::kAuto:
    case SkinnyIsa::kGeneric: return true;
#if defined(__x86_64__) || defined(__i386__)
    case SkinnyIsa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case SkinnyIsa::kAvx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
#endif
    default: return false;
  }
}

bool skinny_linear_applies(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (!x.defined() || !w.defined() || !x.device().is_cpu() || !w.device().is_cpu()) return false;
  // One dtype for all, as at::linear wants.
  const auto dt = w.scalar_type();
  if ((dt != at::kFloat && dt != at::kBFloat16) || x.scalar_type() != dt) return false;
  if (x.dim() < 1 || w.dim() != 2 || !w.is_contiguous() || x.size(-1) != w.size(1)) return false;
  if (b.defined() && (!b.device().is_cpu() || b.scalar_type() != dt || b.dim() != 1 || b.size(0) != w.size(0)))
    return false;
  const int64_t K = w.size(1);
  if (K == 0) return false;
  const int64_t M = x.numel() / K;
  if (M < 1 || M > (dt == at::kBFloat16 ? kSkinnyMaxRowsBf16 : kSkinnyMaxRows)) return false;
  // The result records no autograd history: only when none is wanted.
  if (at::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad() || (b.defined() && b.requires_grad())))
    return false;
  return true;
}

at::Tensor skinny_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, SkinnyIsa isa) {
  TORCH_CHECK(skinny_linear_applies(x, w, b), "skinny_linear: unsupported arguments");
  const int64_t K = w.size(1), N = w.size(0), M = x.numel() / K;
  // x (at most 16 rows) and b in F32: cheap copies; sums in F32, rounded once at the end as
  // at::linear does for BF16.
  const bool bf16 = w.scalar_type() == at::kBFloat16;
  auto xc = x.reshape({M, K}).to(at::kFloat).contiguous();
  auto bc = b.defined() ? b.to(at::kFloat).contiguous() : at::Tensor();
  auto y = at::empty({M, N}, x.options().dtype(at::kFloat));
  const Args a{
      xc.data_ptr<float>(), w.data_ptr(), bc.defined() ? bc.data_ptr<float>() : nullptr, y.data_ptr<float>(), M, K, N};
  const ColumnsFn fn = bf16 ? pick<Bf16>(isa) : pick<float>(isa);
  // Pieces of W taken by the threads in turn from a shared counter, not one fixed share each:
  // on this shared 2-core machine a thread often loses its core for a while (to another
  // process, or to an OpenBLAS worker still spinning after a large product), and the others
  // then do its part. Pieces: ~16 per thread, at least ~64 KiB of W each.
  const int threads = at::get_num_threads();
  const int64_t min_rows = (16384 / K + kNR) / kNR * kNR;
  const int64_t rows = std::max(min_rows, (N / (16 * threads) + kNR - 1) / kNR * kNR);
  const int64_t pieces = (N + rows - 1) / rows;
  if (pieces == 1 || threads == 1) {
    fn(a, 0, N);
  } else {
    std::atomic<int64_t> next{0};
    at::parallel_for(0, std::min<int64_t>(threads, pieces), 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t p; (p = next.fetch_add(1)) < pieces;) fn(a, p * rows, std::min(N, (p + 1) * rows));
    });
  }
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  return (bf16 ? y.to(at::kBFloat16) : y).view(sizes);
}

at::Tensor fast_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (skinny_linear_applies(x, w, b)) return skinny_linear(x, w, b);
  return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
}

}  // namespace brl::model
