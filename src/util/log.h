// Logging: spdlog with one process-wide logger writing to stderr. Levels via BRL_LOG_LEVEL
// (trace|debug|info|warn|error) or set_log_level(). Never log credentials or tokens.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace brl {

void init_logging(const std::string& level = "");  // empty: from BRL_LOG_LEVEL, default info
void set_log_level(const std::string& level);

// A status line below the log on stderr (the progress bar on a terminal): a log line written
// while it shows clears it first and draws it again below itself. Text without newlines.
void set_status_line(const std::string& text);
void end_status_line();  // keeps the status line on screen and continues below it

}  // namespace brl

#define BRL_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define LOG_INFO(...) spdlog::info(__VA_ARGS__)
#define LOG_WARN(...) spdlog::warn(__VA_ARGS__)
#define LOG_ERROR(...) spdlog::error(__VA_ARGS__)
#define LOG_DEBUG(...) spdlog::debug(__VA_ARGS__)
