// Minimal leveled logging to stderr. Thread-safe (one write per line).
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace kvserve {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void LogLine(LogLevel level, std::string_view message);

}  // namespace kvserve

#define KV_LOG(level, ...)                                                       \
  do {                                                                           \
    if (::kvserve::LogLevel::k##level >= ::kvserve::GetLogLevel())               \
      ::kvserve::LogLine(::kvserve::LogLevel::k##level, fmt::format(__VA_ARGS__)); \
  } while (0)
