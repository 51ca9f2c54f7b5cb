#include "util/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

#include "util/error.h"

namespace brl {

void set_log_level(const std::string& level) {
  auto l = spdlog::level::from_str(level);
  if (l == spdlog::level::off && level != "off")
    throw UserError("unknown log level '" + level + "'", "use one of trace, debug, info, warn, error, off");
  spdlog::set_level(l);
}

void init_logging(const std::string& level) {
  static bool done = false;
  if (!done) {
    auto logger = spdlog::stderr_color_mt("bucketrl");
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

}  // namespace brl
