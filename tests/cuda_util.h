// GPU tests run where libtorch finds a CUDA device and skip, saying so, everywhere else; a
// test executable whose every test skipped reports Skipped (test_main.cpp). CI allows that
// for tests named *cuda* only (.ci/run).
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "model/device.h"

#define REQUIRE_GPU()                \
  if (!brl::model::cuda_available()) \
  GTEST_SKIP() << "no CUDA device here (" << brl::model::describe_compute() << "): runs on a GPU machine"

namespace brl::test {

// max |a - b| / max |b|, both moved to the CPU in f64.
inline double rel_max_diff(const at::Tensor& a, const at::Tensor& b) {
  auto x = a.detach().cpu().to(at::kDouble), y = b.detach().cpu().to(at::kDouble);
  return (x - y).abs().max().item<double>() / std::max(1e-30, y.abs().max().item<double>());
}

// Products in true f32 on the GPU (no TF32), so that f32 parity tests compare like with like.
inline void strict_fp32() {
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
}

}  // namespace brl::test
