#include "util/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "util/error.h"

namespace brl {

namespace {

// One lock for every write to stderr that can meet the status line.
std::mutex g_status_mu;
std::string g_status;  // what the status line shows
bool g_status_shown = false;

void write_stderr(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stderr);
  std::fflush(stderr);
}

constexpr const char* kClearLine = "\r\033[K";  // to the line's start, erase to its end

// Wraps the stderr sink: the status line goes away for each log line and comes back below it.
class StatusLineSink : public spdlog::sinks::sink {
 public:
  explicit StatusLineSink(std::shared_ptr<spdlog::sinks::sink> inner) : inner_(std::move(inner)) {}
  void log(const spdlog::details::log_msg& msg) override {
    std::lock_guard<std::mutex> g(g_status_mu);
    if (g_status_shown) write_stderr(kClearLine);
    inner_->log(msg);
    if (g_status_shown) write_stderr(g_status);
  }
  void flush() override { inner_->flush(); }
  void set_pattern(const std::string& pattern) override { inner_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> f) override { inner_->set_formatter(std::move(f)); }

 private:
  std::shared_ptr<spdlog::sinks::sink> inner_;
};

}  // namespace

void set_log_level(const std::string& level) {
  auto l = spdlog::level::from_str(level);
  if (l == spdlog::level::off && level != "off")
    throw UserError("unknown log level '" + level + "'", "use one of trace, debug, info, warn, error, off");
  spdlog::set_level(l);
}

void init_logging(const std::string& level) {
  static bool done = false;
  if (!done) {
    auto sink = std::make_shared<StatusLineSink>(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    auto logger = std::make_shared<spdlog::logger>("bucketrl", sink);
    spdlog::register_logger(logger);
    spdlog::set_default_logger(logger);
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
    done = true;
  }
  std::string lv = level;
  if (lv.empty()) {
    const char* e = std::getenv("BRL_LOG_LEVEL");
    lv = e ? e : "info";
  }
  set_log_level(lv);
}

void set_status_line(const std::string& text) {
  std::lock_guard<std::mutex> g(g_status_mu);
  g_status = text;
  g_status_shown = true;
  write_stderr(kClearLine + text);
}

void end_status_line() {
  std::lock_guard<std::mutex> g(g_status_mu);
  if (!g_status_shown) return;
  g_status_shown = false;
  g_status.clear();
  write_stderr("\n");
}

}  // namespace brl
