// `bucketrl plot`: image files of a run from its bucket, as self-made SVG (no libraries):
// line charts with axes, round ticks, a mean line, a spread band and points. Also what the
// plot command writes for a run's history (obs/history.h).
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "obs/history.h"

namespace brl::obs {

struct PlotSeries {
  std::string name, color;                        // color: any SVG color ("#4c8dff")
  std::vector<std::pair<double, double>> points;  // (x, y), drawn as a line and dots
  std::vector<std::array<double, 3>> band;        // (x, lo, hi): a filled band (optional)
};

struct PlotSpec {
  std::string title, x_label, y_label;
  std::vector<PlotSeries> series;
  int width = 800, height = 420;
};

// Plot area: [kPlotLeft, width - kPlotRight] x [kPlotTop, height - kPlotBottom] pixels.
inline constexpr int kPlotLeft = 70, kPlotRight = 20, kPlotTop = 56, kPlotBottom = 50;

// Round tick values covering [lo, hi] with about n steps of 1, 2 or 5 x 10^k.
std::vector<double> nice_ticks(double lo, double hi, int n);
// The chart as a standalone SVG document. Axes span the data rounded out to ticks.
std::string svg_plot(const PlotSpec& spec);

// Writes reward_over_time.svg, reward_per_version.svg and versions_over_time.svg into dir
// (created); returns the paths written.
std::vector<std::string> write_run_plots(const RunHistory& h, const std::string& run_id, const std::string& dir);

}  // namespace brl::obs
