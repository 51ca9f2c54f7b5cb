// `bucketrl plot`'s SVG: tick rounding and the data-to-pixel mapping, checked against
// positions derived by hand from the documented plot area; the run plots it writes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "obs/plot.h"

using namespace brl::obs;

namespace {
std::vector<std::pair<double, double>> circles(const std::string& svg) {
  static const std::regex re(R"re(<circle class="pt" cx="([0-9.]+)" cy="([0-9.]+)")re");
  std::vector<std::pair<double, double>> out;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back({std::stod((*it)[1]), std::stod((*it)[2])});
  return out;
}
}  // namespace

TEST(Plot, NiceTicks) {
  EXPECT_EQ(nice_ticks(0, 10, 6), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  auto t = nice_ticks(0.13, 0.87, 5);  // step 0.1 (raw 0.148), rounded out to [0.1, 0.9]
  ASSERT_EQ(t.size(), 9u);
  EXPECT_NEAR(t.front(), 0.1, 1e-12);
  EXPECT_NEAR(t.back(), 0.9, 1e-12);
  auto u = nice_ticks(-3, 47, 5);  // step 10
  EXPECT_EQ(u.front(), -10);
  EXPECT_EQ(u.back(), 50);
}

TEST(Plot, PointsLandWhereTheAxesSay) {
  PlotSpec s{"t", "x", "y", {{"a", "#123456", {{0, 0}, {5, 0.5}, {10, 1}}, {}}}, 800, 420};
  std::string svg = svg_plot(s);
  // Axes [0, 10] x [0, 1]; plot area x in [70, 780], y in [56, 370] (kPlot* constants).
  auto c = circles(svg);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_NEAR(c[0].first, 70, 0.01);
  EXPECT_NEAR(c[0].second, 370, 0.01);
  EXPECT_NEAR(c[1].first, 425, 0.01);
  EXPECT_NEAR(c[1].second, 213, 0.01);  // 370 - 0.5 * 314
  EXPECT_NEAR(c[2].first, 780, 0.01);
  EXPECT_NEAR(c[2].second, 56, 0.01);
  EXPECT_NE(svg.find("<path class=\"series\" d=\"M70.00,370.00L425.00,213.00L780.00,56.00\""), std::string::npos)
      << svg;
  EXPECT_NE(svg.find(">0.2</text>"), std::string::npos);  // y tick labels with the step's decimals
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  // No data: still a valid document.
  std::string empty = svg_plot({"none", "x", "y", {}, 800, 420});
  EXPECT_NE(empty.find("no data"), std::string::npos);
  EXPECT_NE(empty.find("</svg>"), std::string::npos);
}

TEST(Plot, RunPlots) {
  RunHistory h;
  for (int v = 0; v <= 4; ++v) {
    VersionPoint p;
    p.version = v;
    p.created_ms = 1'000'000 + v * 30'000;
    p.updates = v == 0 ? 0 : 2;
    p.reward_mean = 0.1 * v;
    p.reward_std = 0.05;
    h.versions.push_back(p);
  }
  h.evals[2] = {2, 64, 0, 0.4, 0};
  h.evals[4] = {4, 64, 0, 0.5, 0, 8, 0.3, 0.9};  // with pass@k
  std::string dir = std::filesystem::temp_directory_path() / ("brl_plot_" + std::to_string(getpid()));
  auto files = write_run_plots(h, "r1", dir);
  ASSERT_EQ(files.size(), 3u);
  auto read = [](const std::string& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  std::string by_time = read(dir + "/reward_over_time.svg"), by_version = read(dir + "/reward_per_version.svg"),
              versions = read(dir + "/versions_over_time.svg");
  EXPECT_EQ(circles(by_time).size(), 4u);  // v1..v4 (v0 folds nothing)
  EXPECT_NE(by_time.find("class=\"band\""), std::string::npos);
  EXPECT_EQ(circles(by_version).size(), 8u);  // 4 rewards + 2 evaluations + pass@1 and pass@8 of one
  EXPECT_NE(by_version.find("held-out accuracy"), std::string::npos);
  EXPECT_NE(by_version.find("held-out pass@8"), std::string::npos);
  EXPECT_EQ(circles(versions).size(), 5u);
  EXPECT_NE(by_time.find("run r1"), std::string::npos);
  std::filesystem::remove_all(dir);
}
