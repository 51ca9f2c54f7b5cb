#include "obs/plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "util/error.h"
#include "util/file.h"
#include "util/xml.h"

namespace brl::obs {

namespace {

// Tick labels with as many decimals as the step needs (0.1 steps: one decimal).
std::string tick_label(double v, double step) {
  int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  if (std::fabs(v) < step * 1e-9) v = 0;
  return fmt::format("{:.{}f}", v, decimals);
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int n) {
  if (!(hi > lo)) hi = lo + 1;
  double raw = (hi - lo) / std::max(1, n);
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double f = raw / mag;
  double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
  double first = std::floor(lo / step + 1e-9) * step, last = std::ceil(hi / step - 1e-9) * step;
  std::vector<double> t;
  for (int i = 0; first + i * step <= last + step * 1e-6; ++i) t.push_back(first + i * step);
  return t;
}

std::string svg_plot(const PlotSpec& spec) {
  const double W = spec.width, H = spec.height;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (auto& s : spec.series) {
    for (auto& [x, y] : s.points)
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    for (auto& b : s.band)
      x0 = std::min(x0, b[0]), x1 = std::max(x1, b[0]), y0 = std::min(y0, b[1]), y1 = std::max(y1, b[2]);
  }
  std::string out = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n"
      "<text x=\"{2}\" y=\"24\" font-size=\"16\" font-weight=\"bold\" fill=\"#1f2328\">{3}</text>\n",
      spec.width, spec.height, kPlotLeft, xml_escape(spec.title));
  if (!(x0 <= x1)) {  // no data at all
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#656d76\">no data</text>\n</svg>\n",
                       W / 2, H / 2);
    return out;
  }
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) y0 -= 0.5, y1 += 0.5;
  auto xt = nice_ticks(x0, x1, 6), yt = nice_ticks(y0, y1, 5);
  x0 = xt.front(), x1 = xt.back(), y0 = yt.front(), y1 = yt.back();
  auto X = [&](double x) { return kPlotLeft + (x - x0) / (x1 - x0) * (W - kPlotLeft - kPlotRight); };
  auto Y = [&](double y) { return H - kPlotBottom - (y - y0) / (y1 - y0) * (H - kPlotTop - kPlotBottom); };
  double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  for (double t : yt)
    out += fmt::format(
        "<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.2f}\" y2=\"{2:.2f}\" stroke=\"#d0d7de\" stroke-width=\"1\"/>"
        "<text x=\"{3}\" y=\"{4:.2f}\" text-anchor=\"end\" fill=\"#656d76\">{5}</text>\n",
        kPlotLeft, W - kPlotRight, Y(t), kPlotLeft - 8, Y(t) + 4, tick_label(t, ystep));
  for (double t : xt)
    out += fmt::format(
        "<line x1=\"{0:.2f}\" x2=\"{0:.2f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#8c959f\"/>"
        "<text x=\"{0:.2f}\" y=\"{3}\" text-anchor=\"middle\" fill=\"#656d76\">{4}</text>\n",
        X(t), H - kPlotBottom, H - kPlotBottom + 5, H - kPlotBottom + 20, tick_label(t, xstep));
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#1f2328\">{}</text>\n",
                     (kPlotLeft + W - kPlotRight) / 2, H - 10, xml_escape(spec.x_label));
  out += fmt::format(
      "<text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\" fill=\"#1f2328\">{}</text>\n",
      (kPlotTop + H - kPlotBottom) / 2, xml_escape(spec.y_label));
  double lx = kPlotLeft + 10;
  for (auto& s : spec.series) {
    if (s.band.size() > 1) {
      std::string pts;
      for (auto& b : s.band) pts += fmt::format("{:.2f},{:.2f} ", X(b[0]), Y(b[2]));
      for (auto it = s.band.rbegin(); it != s.band.rend(); ++it)
        pts += fmt::format("{:.2f},{:.2f} ", X((*it)[0]), Y((*it)[1]));
      out += fmt::format("<polygon class=\"band\" points=\"{}\" fill=\"{}\" fill-opacity=\"0.18\"/>\n", pts, s.color);
    }
    if (s.points.size() > 1) {
      std::string d;
      for (size_t i = 0; i < s.points.size(); ++i)
        d += fmt::format("{}{:.2f},{:.2f}", i ? "L" : "M", X(s.points[i].first), Y(s.points[i].second));
      out +=
          fmt::format("<path class=\"series\" d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", d, s.color);
    }
    double r = s.points.size() > 100 ? 1.5 : 3;
    for (auto& [x, y] : s.points)
      out += fmt::format("<circle class=\"pt\" cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"{}\" fill=\"{}\"/>\n", X(x), Y(y), r,
                         s.color);
    out += fmt::format(
        "<rect x=\"{:.0f}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.0f}\" y=\"{}\" "
        "fill=\"#1f2328\">{}</text>\n",
        lx, kPlotTop - 22, s.color, lx + 14, kPlotTop - 13, xml_escape(s.name));
    lx += 30 + 7.0 * static_cast<double>(s.name.size());
  }
  out += "</svg>\n";
  return out;
}

std::vector<std::string> write_run_plots(const RunHistory& h, const std::string& run_id, const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const double t0 = h.versions.empty() ? 0 : static_cast<double>(h.versions.front().created_ms);
  // Seconds for a run shorter than three minutes, minutes after that.
  const double span_s = h.versions.empty() ? 0 : (static_cast<double>(h.versions.back().created_ms) - t0) / 1000.0;
  const double unit_ms = span_s < 180 ? 1000.0 : 60000.0;
  const std::string unit = span_s < 180 ? "seconds" : "minutes";
  auto elapsed = [&](int64_t ms) { return (static_cast<double>(ms) - t0) / unit_ms; };
  PlotSeries by_time{"train reward (mean, ±1 std across updates)", "#0969da", {}, {}};
  PlotSeries by_version = by_time;
  PlotSeries evals{"held-out accuracy", "#8250df", {}, {}};
  PlotSeries pass1{"held-out pass@1 (sampled)", "#bf8700", {}, {}}, passk{"held-out pass@k", "#cf222e", {}, {}};
  PlotSeries versions{"global version", "#1a7f37", {}, {}};
  for (auto& v : h.versions) {
    versions.points.push_back({elapsed(v.created_ms), static_cast<double>(v.version)});
    if (v.updates == 0) continue;  // v0 (and any empty version) has no train reward
    by_time.points.push_back({elapsed(v.created_ms), v.reward_mean});
    by_time.band.push_back({elapsed(v.created_ms), v.reward_mean - v.reward_std, v.reward_mean + v.reward_std});
    by_version.points.push_back({static_cast<double>(v.version), v.reward_mean});
    by_version.band.push_back(
        {static_cast<double>(v.version), v.reward_mean - v.reward_std, v.reward_mean + v.reward_std});
  }
  for (auto& [v, e] : h.evals) {
    evals.points.push_back({static_cast<double>(v), e.accuracy});
    if (e.k == 0) continue;
    pass1.points.push_back({static_cast<double>(v), e.pass_at_1});
    passk.points.push_back({static_cast<double>(v), e.pass_at_k});
    passk.name = "held-out pass@" + std::to_string(e.k);
  }
  std::vector<std::pair<std::string, PlotSpec>> charts = {
      {"reward_over_time.svg",
       {"run " + run_id + ": train reward over time",
        unit + " since version " + std::to_string(h.versions.empty() ? 0 : h.versions.front().version),
        "reward",
        {by_time}}},
      {"reward_per_version.svg",
       {"run " + run_id + ": reward per global version", "global version", "reward / accuracy", {by_version}}},
      {"versions_over_time.svg",
       {"run " + run_id + ": global versions over time",
        unit + " since version " + std::to_string(h.versions.empty() ? 0 : h.versions.front().version),
        "version",
        {versions}}},
  };
  for (auto* s : {&evals, &pass1, &passk})
    if (!s->points.empty()) charts[1].second.series.push_back(*s);
  std::vector<std::string> written;
  for (auto& [name, spec] : charts) {
    std::string path = (fs::path(dir) / name).string();
    write_file(path, svg_plot(spec));
    written.push_back(path);
  }
  return written;
}

}  // namespace brl::obs
