// Minimal leveled logging to stderr. Thread-safe (one write per line).
//
// Two formats (--log-format): text, "[I] message key=value ...", and json, one object per line
// {"time": RFC 3339 UTC with milliseconds, "level", "msg", fields...}. Fields are string or
// number pairs a caller adds to a record (the server's access log uses them).
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace kvserve {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };
enum class LogFormat { kText, kJson };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void SetLogFormat(LogFormat format);
LogFormat GetLogFormat();
// "debug", "info", "warning" (or "warn"), "error", "off"; nullopt otherwise.
std::optional<LogLevel> ParseLogLevel(std::string_view name);
// "text" or "json"; nullopt otherwise.
std::optional<LogFormat> ParseLogFormat(std::string_view name);

using LogField = std::pair<std::string, std::variant<std::string, double, int64_t>>;

void LogLine(LogLevel level, std::string_view message);
// A line with fields. Writes nothing when level is below the current one.
void LogRecord(LogLevel level, std::string_view message, const std::vector<LogField>& fields);
// The line LogRecord writes, without writing it (for tests).
std::string FormatLogRecord(LogLevel level, std::string_view message,
                            const std::vector<LogField>& fields, LogFormat format);

}  // namespace kvserve

#define KV_LOG(level, ...)                                                       \
  do {                                                                           \
    if (::kvserve::LogLevel::k##level >= ::kvserve::GetLogLevel())               \
      ::kvserve::LogLine(::kvserve::LogLevel::k##level, fmt::format(__VA_ARGS__)); \
  } while (0)
