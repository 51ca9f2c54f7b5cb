// set_compute_threads flushes denormal floats to zero in the calling thread and in libtorch's
// OpenMP pool: a product whose exact value is a denormal (and a denormal input, read as zero)
// comes out 0 in every element of a tensor big enough to be split across the threads.
#include "model/threads.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdlib>

using namespace brl::model;

namespace {
// Elements of x that are not zero, after x * 0.5 (normal in, denormal out) or x * 1 (denormal in).
int64_t nonzero_after(float value, float factor) {
  const int64_t n = 1 << 20;  // far above at::internal::GRAIN_SIZE, so every thread takes a part
  auto x = at::full({n}, value);
  return (x * factor).ne(0).sum().item<int64_t>();
}
}  // namespace

TEST(Threads, FlushesDenormalsInEveryComputeThread) {
  const float smallest_normal = 1.17549435e-38f;
  ASSERT_EQ(set_compute_threads(2), 2);
  EXPECT_EQ(at::get_num_threads(), 2);
  EXPECT_EQ(nonzero_after(smallest_normal, 0.5f), 0) << "a product below the smallest normal survived";
  EXPECT_EQ(nonzero_after(smallest_normal * 0.25f, 1.0f), 0) << "a denormal input was not read as zero";
  EXPECT_EQ(nonzero_after(smallest_normal, 2.0f), 1 << 20);  // normal numbers are untouched
}

TEST(Threads, KeepsDenormalsWhenAsked) {
  ::setenv("BRL_KEEP_DENORMALS", "1", 1);
  set_compute_threads(2);
  ::unsetenv("BRL_KEEP_DENORMALS");
  EXPECT_EQ(nonzero_after(1.17549435e-38f, 0.5f), 1 << 20);
  set_compute_threads(2);  // back to the default for whatever runs after
  EXPECT_EQ(nonzero_after(1.17549435e-38f, 0.5f), 0);
}
