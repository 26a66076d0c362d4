#include "util/log.h"

#include <atomic>
#include <cstdio>
#include <string>

namespace kvserve {
namespace {
std::atomic<LogLevel> g_level{LogLevel::kInfo};
}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(level); }
LogLevel GetLogLevel() { return g_level.load(); }

void LogLine(LogLevel level, std::string_view message) {
  static const char* kTags[] = {"D", "I", "W", "E", ""};
  std::string line = fmt::format("[{}] {}\n", kTags[static_cast<int>(level)], message);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace kvserve
