#include "util/progress.h"

#include <spdlog/fmt/fmt.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>

#include "util/error.h"
#include "util/log.h"

namespace brl {

ProgressMode progress_mode() {
  const char* e = std::getenv("BRL_PROGRESS");
  std::string v = e ? e : "";
  if (v == "bar") return ProgressMode::kBar;
  if (v == "lines") return ProgressMode::kLines;
  if (v == "off") return ProgressMode::kOff;
  if (!v.empty())
    throw UserError("BRL_PROGRESS=" + v + " is not known", "use bar, lines or off (unset: bar on a terminal)");
  const char* term = std::getenv("TERM");
  bool dumb = term && std::string(term) == "dumb";
  return isatty(STDERR_FILENO) && !dumb ? ProgressMode::kBar : ProgressMode::kLines;
}

ProgressIo default_progress_io() {
  ProgressIo io;
  io.now = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
  io.draw = [](const std::string& s) { set_status_line(s); };
  io.end = [] { end_status_line(); };
  io.line = [](const std::string& s) { LOG_INFO("{}", s); };
  winsize ws{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) io.width = ws.ws_col;
  else if (const char* c = std::getenv("COLUMNS"); c && std::atoi(c) > 0) io.width = std::atoi(c);
  else io.width = 80;
  return io;
}

std::string format_duration(double seconds) {
  auto s = static_cast<int64_t>(std::max(0.0, std::round(seconds)));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string format_bytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (bytes >= 1024 && i < 4) bytes /= 1024, ++i;
  return i == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, kUnits[i]);
}

namespace {
// 3 significant figures at most, no exponent: 1234, 12.3, 0.123.
std::string format_rate(double r) { return fmt::format("{:.{}f}", r, r >= 100 ? 0 : r >= 10 ? 1 : r >= 1 ? 2 : 3); }

// At most `width` columns, cut at a UTF-8 character boundary (text is mostly ASCII).
std::string cut_to_width(const std::string& s, int width) {
  if (width <= 0) return s;
  size_t cols = 0, i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) continue;  // a continuation byte
    if (cols == static_cast<size_t>(width)) break;
    ++cols;
  }
  return s.substr(0, i);
}
}  // namespace

Progress::Progress(ProgressOptions o) : Progress(std::move(o), progress_mode(), default_progress_io()) {}

Progress::Progress(ProgressOptions o, ProgressMode mode, ProgressIo io)
    : o_(std::move(o)), mode_(mode), io_(std::move(io)) {
  if (mode_ == ProgressMode::kLines && !o_.lines) mode_ = ProgressMode::kOff;
  if (mode_ != ProgressMode::kOff) t0_ = now_ = last_line_ = io_.now();
  current_ = o_.initial;
}

Progress::~Progress() {
  if (finished_ || mode_ == ProgressMode::kOff) return;
  if (std::uncaught_exceptions() == 0) {
    try {
      finish(extra_);
    } catch (...) {  // a destructor must not throw; the output is best effort
    }
  } else if (drawn_) {
    io_.end();
  }
}

double Progress::elapsed_s() const { return now_ - t0_; }

double Progress::rate() const {
  double t = elapsed_s();
  return t > 0 ? static_cast<double>(current_ - o_.initial) / t : 0.0;
}

double Progress::eta_s() const {
  double r = rate();
  if (o_.total <= 0 || r <= 0) return -1;
  return static_cast<double>(std::max<int64_t>(0, o_.total - current_)) / r;
}

std::string Progress::amount(bool of_total) const {
  switch (o_.unit) {
    case ProgressUnit::kBytes:
      return of_total ? format_bytes(static_cast<double>(current_)) + "/" + format_bytes(static_cast<double>(o_.total))
                      : format_bytes(static_cast<double>(current_));
    case ProgressUnit::kSeconds:
      return of_total
                 ? format_duration(static_cast<double>(current_)) + "/" + format_duration(static_cast<double>(o_.total))
                 : format_duration(static_cast<double>(current_));
    case ProgressUnit::kCount: break;
  }
  return (of_total ? fmt::format("{}/{}", current_, o_.total) : std::to_string(current_)) + " " + o_.unit_name;
}

namespace {
std::string rate_text(ProgressUnit u, const std::string& unit_name, double r) {
  return u == ProgressUnit::kBytes ? format_bytes(r) + "/s" : format_rate(r) + " " + unit_name + "/s";
}
}  // namespace

std::string Progress::bar_text() const {
  std::string s = o_.label;
  if (o_.total > 0) {
    constexpr int kBarWidth = 24;
    double frac = std::clamp(static_cast<double>(current_) / static_cast<double>(o_.total), 0.0, 1.0);
    int full = static_cast<int>(frac * kBarWidth);
    std::string bar(static_cast<size_t>(full), '=');
    if (full < kBarWidth) {
      bar.push_back('>');
      bar.append(static_cast<size_t>(kBarWidth - full - 1), ' ');
    }
    s += fmt::format(" {:3.0f}% [{}]", 100 * frac, bar);
  }
  s += fmt::format(" {}", amount(o_.total > 0));
  if (o_.unit != ProgressUnit::kSeconds) {  // for kSeconds the amount is the time already
    double eta = eta_s();
    s += fmt::format(" [{}{}, {}]", format_duration(elapsed_s()),
                     eta >= 0 && current_ < o_.total ? fmt::format("<{}", format_duration(eta)) : "",
                     rate_text(o_.unit, o_.unit_name, rate()));
  }
  if (!extra_.empty()) s += fmt::format("  {}", extra_);
  return s;
}

std::string Progress::line_text() const {
  std::string s = fmt::format("{}: {}", o_.label, amount(o_.total > 0));
  if (o_.total > 0)
    s += fmt::format(" ({:.0f}%)", 100.0 * static_cast<double>(current_) / static_cast<double>(o_.total));
  if (o_.unit != ProgressUnit::kSeconds) {
    s += fmt::format(", {}", rate_text(o_.unit, o_.unit_name, rate()));
    if (double eta = eta_s(); eta >= 0) s += fmt::format(", ETA {}", format_duration(eta));
  }
  if (!extra_.empty()) s += fmt::format("; {}", extra_);
  return s;
}

void Progress::emit_line(const std::string& s) {
  io_.line(s);
  last_line_ = now_;
}

void Progress::update(int64_t current, const std::string& extra) {
  if (finished_) return;
  current_ = current;
  if (!extra.empty()) extra_ = extra;
  if (mode_ == ProgressMode::kOff) return;
  now_ = io_.now();
  if (mode_ == ProgressMode::kBar) {
    if (now_ - last_draw_ < o_.redraw_interval_s) return;
    std::string text = cut_to_width(bar_text(), io_.width - 1);  // the last column would wrap on some terminals
    last_draw_ = now_;
    if (drawn_ && text == last_text_) return;
    io_.draw(text);
    last_text_ = std::move(text);
    drawn_ = true;
    return;
  }
  // Lines: each time another line_percent is done, or line_interval_s passed; the end is finish()'s.
  if (now_ - last_line_ < o_.line_min_interval_s) return;
  int64_t bucket = last_bucket_;
  if (o_.total > 0 && o_.line_percent > 0) {
    if (current_ >= o_.total) return;
    bucket =
        static_cast<int64_t>(100.0 * static_cast<double>(current_) / static_cast<double>(o_.total) / o_.line_percent);
  }
  if (bucket > last_bucket_ || (o_.line_interval_s > 0 && now_ - last_line_ >= o_.line_interval_s)) {
    last_bucket_ = std::max(last_bucket_, bucket);
    emit_line(line_text());
  }
}

void Progress::finish(const std::string& extra) {
  if (finished_) return;
  if (!extra.empty()) extra_ = extra;
  finished_ = true;
  if (mode_ == ProgressMode::kOff) return;
  now_ = io_.now();
  if (mode_ == ProgressMode::kBar) {
    io_.draw(cut_to_width(bar_text(), io_.width - 1));
    io_.end();
    return;
  }
  std::string s = fmt::format("{}: done, {} in {}", o_.label, amount(o_.total > 0 && current_ != o_.total),
                              format_duration(elapsed_s()));
  if (o_.unit != ProgressUnit::kSeconds) s += fmt::format(", {}", rate_text(o_.unit, o_.unit_name, rate()));
  if (!extra_.empty()) s += fmt::format("; {}", extra_);
  emit_line(s);
}

}  // namespace brl
