// The dashboard the proxy serves is src/obs/dashboard.html byte for byte (embedded at build
// time by cmake/embed_text.cmake); the browser test (tests/launch/dashboard_slow_test.cpp)
// checks what it draws.
#include <gtest/gtest.h>

#include "obs/dashboard.h"
#include "../test_files.h"

TEST(Dashboard, ServesTheHtmlFileAsIs) {
  const std::string file = brl::test::read_file(std::string(BRL_SOURCE_DIR) + "/src/obs/dashboard.html");
  ASSERT_GT(file.size(), 1000u);
  EXPECT_EQ(std::string(brl::obs::dashboard_html()), file);
}
