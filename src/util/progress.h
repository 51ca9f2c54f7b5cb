// Progress of long work (pretraining, training, the demo's run, base model transfers).
// On a terminal: one status line with a bar, redrawn in place at most ~10 times a second and
// kept below the log lines (see set_status_line in util/log.h). Elsewhere (CI, the log files
// of `bucketrl run`'s children): plain log lines every `line_percent` of the total or every
// `line_interval_s`, and a final one, so logs stay greppable. BRL_PROGRESS=bar|lines|off.
// One thread updates a Progress; log lines may come from any thread.
// Non-goals: several bars at once, progress inside a single object transfer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace brl {

enum class ProgressMode { kBar, kLines, kOff };

// BRL_PROGRESS=bar|lines|off; unset or empty: bar when stderr is a terminal (TERM not "dumb"),
// lines otherwise. UserError on any other value.
ProgressMode progress_mode();

enum class ProgressUnit { kCount, kBytes, kSeconds };  // kSeconds: the count is elapsed time

struct ProgressOptions {
  std::string label;    // "pretrain", "upload base"
  int64_t total = 0;    // <= 0: unknown (no bar, percentage or ETA)
  int64_t initial = 0;  // the count at the start (a resumed run's step)
  ProgressUnit unit = ProgressUnit::kCount;
  std::string unit_name = "steps";  // kCount only
  double redraw_interval_s = 0.1;   // bar: at most ~10 redraws a second
  double line_percent = 10;         // lines: a line each time another 10% is done ...
  double line_interval_s = 30;      // ... or 30 s passed since the last one,
  double line_min_interval_s = 1;   // but 1 s apart at least (quick work: the final line)
  bool lines = true;                // false: lines mode prints nothing (the caller logs)
};

// Where a Progress writes, and its clock; default_progress_io() is the real one.
struct ProgressIo {
  std::function<double()> now;                   // seconds, monotonic
  std::function<void(const std::string&)> draw;  // bar: show this as the status line
  std::function<void()> end;                     // bar: keep the last drawing, continue below it
  std::function<void(const std::string&)> line;  // lines: one log line
  int width = 0;                                 // bar: the terminal's columns (0: no limit)
};
ProgressIo default_progress_io();  // steady clock, the logger's status line, LOG_INFO, stderr's width

class Progress {
 public:
  explicit Progress(ProgressOptions o);  // progress_mode(), default_progress_io()
  Progress(ProgressOptions o, ProgressMode mode, ProgressIo io);
  // Unfinished: finish() unless an exception is unwinding (then a bar is only ended).
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // The count is now `current`; `extra` is shown after it ("loss 0.42 skill 0.81").
  void update(int64_t current, const std::string& extra = "");
  void add(int64_t n, const std::string& extra = "") { update(current_ + n, extra); }
  // The final drawing (bar) or line ("label: done, ..."); later calls do nothing.
  void finish(const std::string& extra = "");

  double rate() const;   // (current - initial) / elapsed seconds; 0 before any time passed
  double eta_s() const;  // (total - current) / rate; < 0 when unknown
  double elapsed_s() const;
  std::string bar_text() const;   // what the bar mode draws now (before the width cut)
  std::string line_text() const;  // what the lines mode prints now

 private:
  // "800/2000 steps", "1.2/5.0 MiB", "2:05/10:00"; without the total: "2000 steps".
  std::string amount(bool of_total) const;
  void emit_line(const std::string& s);

  ProgressOptions o_;
  ProgressMode mode_;
  ProgressIo io_;
  double t0_ = 0, now_ = 0;
  int64_t current_ = 0;
  std::string extra_, last_text_;  // last_text_: the bar's last drawing
  double last_draw_ = -1e300, last_line_ = 0;
  int64_t last_bucket_ = 0;  // lines: floor(percent / line_percent) at the last line
  bool drawn_ = false, finished_ = false;
};

// "1:02", "1:02:03".
std::string format_duration(double seconds);
// "512 B", "1.5 KiB", "12.3 MiB".
std::string format_bytes(double bytes);

}  // namespace brl
