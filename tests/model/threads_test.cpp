// The build's tcmalloc serves libtorch's allocations and keeps what it frees: a second 256 MB
// tensor faults (almost) no pages in, where glibc's malloc maps every block over 32 MB afresh.
//
// set_compute_threads flushes denormal floats to zero in the calling thread and in libtorch's
// OpenMP pool: a product whose exact value is a denormal (and a denormal input, read as zero)
// comes out 0 in every element of a tensor big enough to be split across the threads.
#include "model/threads.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

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

TEST(Threads, ReusesLargeFreedBlocksWithoutFaultingThemIn) {
#if !defined(BRL_TCMALLOC_LINKED)
  GTEST_SKIP() << "built without tcmalloc (CMake BRL_TCMALLOC, or no libtcmalloc_minimal); malloc: " << malloc_in_use();
#endif
  ASSERT_STREQ(malloc_in_use(), "tcmalloc") << "linked but not serving malloc";
  set_compute_threads(1);
  const int64_t floats = int64_t{256} << 18;  // 256 MB: glibc would map it on its own
  const long pages = (floats * 4) / sysconf(_SC_PAGESIZE);
  auto faults_to_fill = [&] {
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    at::empty({floats}).fill_(1.0f);  // written in full, then freed
    getrusage(RUSAGE_SELF, &after);
    return after.ru_minflt - before.ru_minflt;
  };
  faults_to_fill();
  // tcmalloc hands a few freed pages back now and then (its release rate): most fills, not all.
  int reused = 0;
  for (int i = 0; i < 5; ++i) reused += faults_to_fill() < pages / 10;
  EXPECT_GE(reused, 4) << "of 5 fills of a freed 256 MB block (" << pages << " pages) faulted < 10 % in";
}
