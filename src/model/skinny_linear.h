// Linear for few rows (decode: one token per sequence, 1..16 sequences): y = x W^T + b, in F32
// or BF16. ATen's products (behind at::linear) are far below memory bandwidth at these shapes,
// which made decode 2-3x slower than llama.cpp in F32 and 2.5x in BF16 (BENCHMARKS.md). This
// kernel streams each row of W once, dots it with every row of x (held in L1/L2, in F32), and
// splits the rows of W over threads. BF16 sums in F32 and rounds once, as at::linear does.
#pragma once

#include <ATen/core/Tensor.h>

namespace brl::model {

// The most rows (product of x's leading dims) skinny_linear takes in F32, and in BF16: from 6
// rows on ATen's BF16 product (oneDNN, on AMX here) is as fast or faster (bench/linear_bench:
// the 152k LM head 5.1 vs 8.2 ms at 1 row, 6.8 vs 8.3 at 4, 9.5 vs 9.1 at 8).
constexpr int64_t kSkinnyMaxRows = 16;
constexpr int64_t kSkinnyMaxRowsBf16 = 4;

// Vector code paths; kAuto = the best the CPU supports.
enum class SkinnyIsa { kAuto, kGeneric, kAvx2, kAvx512 };
bool skinny_isa_supported(SkinnyIsa isa);

// True when skinny_linear can serve x [..., K] W [N, K] (b [N] or undefined): CPU, one dtype
// (F32 or BF16) for all, W contiguous, at most kSkinnyMaxRows(Bf16) rows, and no gradient to record.
bool skinny_linear_applies(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);
// x [..., K] -> [..., N]; requires skinny_linear_applies.
at::Tensor skinny_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                         SkinnyIsa isa = SkinnyIsa::kAuto);
// skinny_linear where it applies, else at::linear.
at::Tensor fast_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {});

}  // namespace brl::model
