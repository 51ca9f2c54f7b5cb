// The process ids that workers and proxies default to: valid worker ids (protocol/layout.h:
// [A-Za-z0-9._-]{1,64}) whatever the hostname holds, ending in this process's pid.
#include <gtest/gtest.h>
#include <unistd.h>

#include <regex>

#include "util/host.h"

using namespace brl;

TEST(Host, ProcessIdIsAValidIdEndingInThePid) {
  const std::string pid = "-" + std::to_string(getpid());
  const std::string id = process_id("", "worker");
  ASSERT_GT(id.size(), pid.size());
  EXPECT_EQ(id.substr(id.size() - pid.size()), pid);
  EXPECT_TRUE(std::regex_match(id, std::regex("[A-Za-z0-9_-]{1,40}-[0-9]+"))) << id;
  EXPECT_LE(id.size(), 64u);
  if (!hostname().empty()) {
    EXPECT_EQ(process_id("proxy-", "x").rfind("proxy-", 0), 0u);
  } else {
    EXPECT_EQ(id, "worker" + pid);
  }
}
