// The main of every test executable: GoogleTest's, plus one rule. gtest counts a skipped test
// (GTEST_SKIP: no GPU, not root, no Chromium) as passed, so a run without the means for a
// test would look green. Here an executable whose tests all passed or skipped, with at least
// one skipped, exits with kSkipExitCode, which ctest's SKIP_RETURN_CODE reports as "Skipped"
// (tests/CMakeLists.txt); a failure still exits 1.
#include <gtest/gtest.h>

#include <cstdio>

namespace {
constexpr int kSkipExitCode = 77;  // automake's convention, also what ctest is told
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  const auto* u = ::testing::UnitTest::GetInstance();
  if (rc == 0 && u->skipped_test_count() > 0) {
    std::printf("[ SKIPPED  ] %d of %d tests skipped (reasons above); the executable reports Skipped\n",
                u->skipped_test_count(), u->test_to_run_count());
    return kSkipExitCode;
  }
  return rc;
}
