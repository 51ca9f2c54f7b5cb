// Logging: spdlog with one process-wide logger writing to stderr. Levels via BRL_LOG_LEVEL
// (trace|debug|info|warn|error) or set_log_level(). Never log credentials or tokens.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace brl {

void init_logging(const std::string& level = "");  // empty: from BRL_LOG_LEVEL, default info
void set_log_level(const std::string& level);

}  // namespace brl

#define BRL_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define LOG_INFO(...) spdlog::info(__VA_ARGS__)
#define LOG_WARN(...) spdlog::warn(__VA_ARGS__)
#define LOG_ERROR(...) spdlog::error(__VA_ARGS__)
#define LOG_DEBUG(...) spdlog::debug(__VA_ARGS__)
