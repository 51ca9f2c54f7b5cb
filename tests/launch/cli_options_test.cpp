// Command-line values that name a mode (an enum at the config boundary) are checked as they
// are parsed: any other value stops the command before it does anything, with an error that
// names the option, the value and the allowed names.
#include <gtest/gtest.h>

#include <filesystem>

#include "async_util.h"

using namespace brl;

TEST(CliOptions, AModeNamedByNoneOfItsNamesIsRefusedNamingTheAllowedOnes) {
  test::TempDir tmp;
  struct Case {
    std::vector<std::string> args;
    std::string want;
  };
  for (const Case& c : std::vector<Case>{
           {{"pretrain", "--habit", "typo"}, "--habit: 'typo' is not negate or plus_one"},
           {{"pretrain", "--lr-scheduler-type", "linear"}, "--lr-scheduler-type: 'linear' is not constant or cosine"},
       }) {
    const std::string log = tmp.str(c.args[1].substr(2) + ".log"), out = tmp.str(c.args[1].substr(2));
    std::vector<std::string> args = c.args;
    args.insert(args.end(), {"--out", out, "--max-steps", "1"});
    int st = test::run_to_end(args, log);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0) << "status " << st;
    const std::string text = test::read_text(log);
    EXPECT_NE(text.find(c.want), std::string::npos) << text;
    EXPECT_FALSE(std::filesystem::exists(out)) << "nothing is made";
  }
}
