// A bucketrl process that dies of a fatal signal leaves the signal and a backtrace in its log
// and still dies of that signal (so launchers and Kubernetes see the real cause).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "async_util.h"

using namespace brl;

TEST(CrashReport, FatalSignalLogsABacktraceAndStillKills) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "a sanitizer build leaves fatal signals to the sanitizer's report (src/cli/crash.cpp)";
#endif
  test::TempDir tmp;
  RunConfig cfg = test::learnable_config(test::make_base(tmp.str("base")), tmp.str("out"));
  const std::string bucket = test::init_bucket(tmp, cfg);
  for (int sig : {SIGSEGV, SIGBUS}) {
    const std::string log = tmp.str("proxy-" + std::to_string(sig) + ".log");
    auto p = test::start({"proxy", "--bucket", bucket, "--http", "off"}, log);
    // Up and polling (its first log line), so the handler is installed.
    for (int i = 0; i < 100 && test::read_text(log).find("proxy") == std::string::npos; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    int st = test::stop(p, sig);
    ASSERT_TRUE(WIFSIGNALED(st)) << "status " << st;
    EXPECT_EQ(WTERMSIG(st), sig);
    const std::string text = test::read_text(log);
    EXPECT_NE(text.find("bucketrl: fatal signal " + std::to_string(sig) + " (" + sigdescr_np(sig) + "); backtrace:"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("bucketrl("), std::string::npos) << "a frame of the executable in\n" << text;
  }
}
