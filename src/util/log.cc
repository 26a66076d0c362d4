#include "util/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

namespace kvserve {
namespace {

std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::atomic<LogFormat> g_format{LogFormat::kText};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
    default:
      return "off";
  }
}

// A JSON string literal: quotes, backslashes and control characters escaped; bytes >= 0x80
// pass through (the caller's text is UTF-8 or replaced before it gets here).
void AppendJsonString(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

std::string NowRfc3339() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(level); }
LogLevel GetLogLevel() { return g_level.load(); }
void SetLogFormat(LogFormat format) { g_format.store(format); }
LogFormat GetLogFormat() { return g_format.load(); }

std::optional<LogLevel> ParseLogLevel(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning" || name == "warn") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  if (name == "off") return LogLevel::kOff;
  return std::nullopt;
}

std::optional<LogFormat> ParseLogFormat(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return std::nullopt;
}

std::string FormatLogRecord(LogLevel level, std::string_view message,
                            const std::vector<LogField>& fields, LogFormat format) {
  std::string line;
  if (format == LogFormat::kJson) {
    line = "{\"time\":\"" + NowRfc3339() + "\",\"level\":\"" + LevelName(level) + "\",\"msg\":";
    AppendJsonString(line, message);
    for (const auto& [key, value] : fields) {
      line += ',';
      AppendJsonString(line, key);
      line += ':';
      if (const auto* s = std::get_if<std::string>(&value)) {
        AppendJsonString(line, *s);
      } else if (const auto* i = std::get_if<int64_t>(&value)) {
        line += fmt::format("{}", *i);
      } else {
        line += fmt::format("{:.3f}", std::get<double>(value));
      }
    }
    line += "}\n";
    return line;
  }
  static const char* kTags[] = {"D", "I", "W", "E", ""};
  line = fmt::format("[{}] {}", kTags[static_cast<int>(level)], message);
  for (const auto& [key, value] : fields) {
    if (const auto* s = std::get_if<std::string>(&value)) {
      const bool quote = s->empty() || s->find_first_of(" \"=") != std::string::npos;
      line += fmt::format(" {}={}", key, quote ? fmt::format("{:?}", *s) : *s);
    } else if (const auto* i = std::get_if<int64_t>(&value)) {
      line += fmt::format(" {}={}", key, *i);
    } else {
      line += fmt::format(" {}={:.3f}", key, std::get<double>(value));
    }
  }
  line += '\n';
  return line;
}

void LogRecord(LogLevel level, std::string_view message, const std::vector<LogField>& fields) {
  if (level < GetLogLevel() || level == LogLevel::kOff) return;
  const std::string line = FormatLogRecord(level, message, fields, GetLogFormat());
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void LogLine(LogLevel level, std::string_view message) { LogRecord(level, message, {}); }

}  // namespace kvserve
