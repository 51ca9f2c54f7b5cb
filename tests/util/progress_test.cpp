// Progress: the lines mode's cadence and final line, the bar's throttled redraws and its
// bytes on stderr, rate/ETA on a fixed clock, BRL_PROGRESS. Expected values are worked out
// by hand from the clock steps in each test.
#include "util/progress.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "util/error.h"
#include "util/log.h"

using namespace brl;

namespace {

// A clock the test moves and a record of everything written.
struct FakeIo {
  double t = 100;
  std::vector<std::string> draws, lines;
  int ends = 0;
  ProgressIo io(int width = 0) {
    ProgressIo x;
    x.now = [this] { return t; };
    x.draw = [this](const std::string& s) { draws.push_back(s); };
    x.end = [this] { ++ends; };
    x.line = [this](const std::string& s) { lines.push_back(s); };
    x.width = width;
    return x;
  }
};

ProgressOptions steps(int64_t total) {
  ProgressOptions o;
  o.label = "pretrain";
  o.total = total;
  return o;
}

// Sets an environment variable for one scope.
struct EnvVar {
  std::string name;
  EnvVar(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~EnvVar() { unsetenv(name.c_str()); }
};

}  // namespace

TEST(Progress, RateAndEtaOnAFixedClock) {
  FakeIo f;
  auto o = steps(250);
  o.initial = 50;  // a resumed run: the rate counts only this run's steps
  Progress p(o, ProgressMode::kLines, f.io());
  f.t = 120;
  p.update(90);
  EXPECT_DOUBLE_EQ(p.elapsed_s(), 20);
  EXPECT_DOUBLE_EQ(p.rate(), 2.0);  // (90 - 50) / 20 s
  EXPECT_DOUBLE_EQ(p.eta_s(), 80);  // (250 - 90) / 2
  EXPECT_EQ(p.line_text(), "pretrain: 90/250 steps (36%), 2.00 steps/s, ETA 1:20");
  p.finish();  // stopped early (a target reached): the final line keeps the total
  ASSERT_EQ(f.lines.size(), 2u);
  EXPECT_EQ(f.lines[1], "pretrain: done, 90/250 steps in 0:20, 2.00 steps/s");
}

TEST(Progress, UnknownTotalHasNoEta) {
  FakeIo f;
  Progress p(steps(0), ProgressMode::kLines, f.io());
  f.t = 104;
  p.update(10);
  EXPECT_DOUBLE_EQ(p.rate(), 2.5);
  EXPECT_LT(p.eta_s(), 0);
  EXPECT_EQ(p.line_text(), "pretrain: 10 steps, 2.50 steps/s");
  p.finish();
}

TEST(Progress, LinesEveryTenPercentAndAFinalLine) {
  FakeIo f;
  Progress p(steps(100), ProgressMode::kLines, f.io());
  for (int i = 1; i <= 100; ++i) {
    f.t += 0.25;  // 4 steps/s: 25 s in all, under line_interval_s
    p.update(i, "loss 0.5");
  }
  p.finish("loss 0.1");
  ASSERT_EQ(f.lines.size(), 10u);  // at 10%, 20%, ..., 90%, then the final line (none at 100%)
  EXPECT_EQ(f.lines[0], "pretrain: 10/100 steps (10%), 4.00 steps/s, ETA 0:23; loss 0.5");  // 90 / 4 = 22.5 s
  EXPECT_EQ(f.lines[8], "pretrain: 90/100 steps (90%), 4.00 steps/s, ETA 0:03; loss 0.5");  // 10 / 4 = 2.5 s
  EXPECT_EQ(f.lines[9], "pretrain: done, 100 steps in 0:25, 4.00 steps/s; loss 0.1");
  EXPECT_TRUE(f.draws.empty());
  p.finish("again");  // once only
  EXPECT_EQ(f.lines.size(), 10u);
}

TEST(Progress, QuickWorkLogsOnlyTheFinalLine) {
  FakeIo f;
  Progress p(steps(100), ProgressMode::kLines, f.io());
  for (int i = 1; i <= 100; ++i) {
    f.t += 0.005;  // 0.5 s in all: every 10% comes within line_min_interval_s of the start
    p.update(i);
  }
  p.finish();
  ASSERT_EQ(f.lines.size(), 1u);
  EXPECT_EQ(f.lines[0], "pretrain: done, 100 steps in 0:00, 200 steps/s");
}

TEST(Progress, LinesEveryIntervalWhenSlow) {
  FakeIo f;
  ProgressOptions o;
  o.label = "download base";
  o.unit = ProgressUnit::kBytes;
  o.line_interval_s = 30;
  Progress p(o, ProgressMode::kLines, f.io());  // unknown total: time only
  for (int i = 1; i <= 10; ++i) {
    f.t += 7;
    p.update(i * 1024 * 1024);
  }
  // Lines at 35 s (5 MiB) and 70 s (10 MiB).
  ASSERT_EQ(f.lines.size(), 2u);
  EXPECT_EQ(f.lines[0], "download base: 5.0 MiB, 146.3 KiB/s");
  EXPECT_EQ(f.lines[1], "download base: 10.0 MiB, 146.3 KiB/s");
}

TEST(Progress, BarRedrawsAtMostTenTimesASecond) {
  FakeIo f;
  Progress p(steps(100), ProgressMode::kBar, f.io(/*width=*/40));
  for (int i = 1; i <= 100; ++i) {
    f.t += 0.02;  // 50 updates a second for 2 s
    p.update(i, "loss 0.42 skill 0.81");
  }
  EXPECT_GE(f.draws.size(), 15u);  // ~every 0.1 s (a clock step more where rounding falls short)
  EXPECT_LE(f.draws.size(), 21u);
  EXPECT_EQ(f.ends, 0);
  p.finish();
  EXPECT_EQ(f.ends, 1);
  for (auto& d : f.draws) EXPECT_LE(d.size(), 39u) << d;  // cut to the width, minus the last column
  EXPECT_TRUE(f.lines.empty());
  // The final drawing, uncut: 100/100 steps in 2 s.
  EXPECT_EQ(p.bar_text(),
            "pretrain 100% [========================] 100/100 steps [0:02, 50.0 steps/s]  loss 0.42 skill 0.81");
}

TEST(Progress, BarOnStderrRedrawsInPlaceAndEndsWithANewline) {
  init_logging("info");
  EnvVar env("BRL_PROGRESS", "bar");
  ASSERT_EQ(progress_mode(), ProgressMode::kBar);
  testing::internal::CaptureStderr();
  {
    Progress p(steps(3));  // the real clock and stderr, the mode from BRL_PROGRESS
    p.update(1);
    LOG_INFO("a log line");
    p.update(3);  // within 0.1 s of the first drawing: not drawn, but finish() draws it
    p.finish();
  }
  std::string out = testing::internal::GetCapturedStderr();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.rfind("\r\033[Kpretrain  33% [", 0), 0u) << out;
  EXPECT_EQ(out.back(), '\n');
  // The log line clears the bar, prints below, and the bar comes back on the next line.
  auto log_at = out.find("a log line");
  ASSERT_NE(log_at, std::string::npos);
  EXPECT_NE(out.rfind("\r\033[K", log_at), std::string::npos);
  EXPECT_NE(out.find("pretrain  33%", log_at), std::string::npos);
  EXPECT_NE(out.find("\r\033[Kpretrain 100% [", log_at), std::string::npos);
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2);  // the log line's and the bar's end
}

TEST(Progress, OffPrintsNothing) {
  init_logging("info");
  EnvVar env("BRL_PROGRESS", "off");
  testing::internal::CaptureStderr();
  {
    Progress p(steps(10));
    for (int i = 1; i <= 10; ++i) p.update(i, "x");
    p.finish();
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  FakeIo f;
  Progress q(steps(10), ProgressMode::kOff, f.io());
  q.update(5);
  q.finish();
  EXPECT_TRUE(f.draws.empty() && f.lines.empty() && f.ends == 0);
}

TEST(Progress, LinesFalseIsSilentOffATerminal) {
  FakeIo f;
  auto o = steps(0);
  o.lines = false;  // the caller logs its own lines
  {
    Progress p(o, ProgressMode::kLines, f.io());
    f.t += 100;
    p.update(5);
  }
  EXPECT_TRUE(f.lines.empty());
}

TEST(Progress, ModeFromEnvironment) {
  {
    EnvVar env("BRL_PROGRESS", "lines");
    EXPECT_EQ(progress_mode(), ProgressMode::kLines);
  }
  {
    EnvVar env("BRL_PROGRESS", "fancy");
    EXPECT_THROW(progress_mode(), UserError);
  }
  // Unset under ctest: stderr is a pipe or file, not a terminal.
  if (!isatty(2)) {
    EXPECT_EQ(progress_mode(), ProgressMode::kLines);
  }
}

TEST(Progress, Formats) {
  EXPECT_EQ(format_duration(0), "0:00");
  EXPECT_EQ(format_duration(62.4), "1:02");
  EXPECT_EQ(format_duration(3725), "1:02:05");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(5.5 * 1024 * 1024), "5.5 MiB");
}

TEST(Progress, SecondsUnitShowsTimeNotRate) {
  FakeIo f;
  ProgressOptions o;
  o.label = "run";
  o.total = 600;
  o.unit = ProgressUnit::kSeconds;
  Progress p(o, ProgressMode::kBar, f.io());
  f.t += 125;
  p.update(125, "v12  held-out accuracy 0.810");
  EXPECT_EQ(p.bar_text(), "run  21% [=====>                  ] 2:05/10:00  v12  held-out accuracy 0.810");
  f.t += 0.5;
  p.update(125);  // the same text: not drawn again
  EXPECT_EQ(f.draws.size(), 1u);
  p.finish();
  EXPECT_EQ(f.draws.size(), 2u);  // the final drawing always
  EXPECT_EQ(f.ends, 1);
}
