#include "util/log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvserve {
namespace {

TEST(Log, JsonRecordsAreOneValidObjectWithEscapedFields) {
  const std::string line = FormatLogRecord(
      LogLevel::kWarning, "GET /x 404",
      {{"path", std::string("/a\"b\\c\n\x01")}, {"status", int64_t{404}}, {"ms", 1.25}},
      LogFormat::kJson);
  ASSERT_EQ(line.back(), '\n');
  ASSERT_EQ(line.find('\n'), line.size() - 1);  // one line whatever the fields hold
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["level"], "warning");
  EXPECT_EQ(j["msg"], "GET /x 404");
  EXPECT_EQ(j["path"], "/a\"b\\c\n\x01");
  EXPECT_EQ(j["status"], 404);
  EXPECT_DOUBLE_EQ(j["ms"].get<double>(), 1.25);
  EXPECT_EQ(j["time"].get<std::string>().size(), 24u);  // 2026-11-24T17:00:40.112Z
}

TEST(Log, TextRecordsQuoteValuesWithSpaces) {
  const std::string line = FormatLogRecord(
      LogLevel::kInfo, "msg", {{"a", std::string("plain")}, {"b", std::string("two words")}},
      LogFormat::kText);
  EXPECT_EQ(line, "[I] msg a=plain b=\"two words\"\n");
}

TEST(Log, LevelAndFormatNames) {
  EXPECT_EQ(ParseLogLevel("warn"), LogLevel::kWarning);
  EXPECT_EQ(ParseLogLevel("off"), LogLevel::kOff);
  EXPECT_FALSE(ParseLogLevel("loud").has_value());
  EXPECT_EQ(ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_FALSE(ParseLogFormat("xml").has_value());
}

}  // namespace
}  // namespace kvserve
