// F32 linear for few rows (decode: one token per sequence, 1..16 sequences): y = x W^T + b.
// OpenBLAS's sgemm (behind at::linear) is far below memory bandwidth at these shapes, which
// made F32 decode 2-3x slower than llama.cpp (BENCHMARKS.md). This kernel streams each row of W
// once, dots it with every row of x (held in L1/L2), and splits the rows of W over threads.
#pragma once

#include <ATen/core/Tensor.h>

namespace brl::model {

// The most rows (product of x's leading dims) skinny_linear takes.
constexpr int64_t kSkinnyMaxRows = 16;

// Vector code paths; kAuto = the best the CPU supports.
enum class SkinnyIsa { kAuto, kGeneric, kAvx2, kAvx512 };
bool skinny_isa_supported(SkinnyIsa isa);

// True when skinny_linear can serve x [..., K] W [N, K] (b [N] or undefined): CPU F32,
// W (and b) contiguous, at most kSkinnyMaxRows rows, and no gradient to record.
bool skinny_linear_applies(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);
// x [..., K] -> [..., N]; requires skinny_linear_applies.
at::Tensor skinny_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                         SkinnyIsa isa = SkinnyIsa::kAuto);
// skinny_linear where it applies, else at::linear.
at::Tensor fast_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {});

}  // namespace brl::model
