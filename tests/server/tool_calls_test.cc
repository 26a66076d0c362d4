#include "server/tool_calls.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace {

const std::vector<std::string> kNames = {"get_weather", "now"};

TEST(ParseToolCallText, HermesContentThenCalls) {
  auto p = ParseToolCallText(ToolFormat::kHermes,
                             "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                             "{\"unit\": \"c\", \"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n"
                             "{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n",
                             kNames);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->content, "Let me look.");
  ASSERT_EQ(p->calls.size(), 2u);
  EXPECT_EQ(p->calls[0].name, "get_weather");
  EXPECT_EQ(p->calls[0].arguments, R"({"unit":"c","city":"Paris"})");  // the model's order
  EXPECT_EQ(p->calls[0].index, 0);
  EXPECT_EQ(p->calls[1].name, "now");
  EXPECT_EQ(p->calls[1].arguments, "{}");
  EXPECT_EQ(p->calls[1].index, 1);
}

TEST(ParseToolCallText, AnythingMalformedIsPlainContent) {
  for (const char* text : {
           "no call here",
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}",  // not closed
           "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>",  // unknown
           "<tool_call>\n{\"name\": \"now\", \"arguments\": [1]}\n</tool_call>",  // not an object
           "<tool_call>\n{\"name\": \"now\", \"arguments\": {}\n</tool_call>",    // bad JSON
           "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call> and then text",
       }) {
    EXPECT_FALSE(ParseToolCallText(ToolFormat::kHermes, text, kNames).has_value()) << text;
  }
  EXPECT_FALSE(ParseToolCallText(ToolFormat::kNone, "{}", kNames).has_value());
}

TEST(ParseToolCallText, Llama3WholeTurnWithParametersOrArguments) {
  auto p = ParseToolCallText(ToolFormat::kLlama3Json,
                             " {\"name\": \"now\", \"parameters\": {\"tz\": \"UTC\"}} ", kNames);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->content, "");
  ASSERT_EQ(p->calls.size(), 1u);
  EXPECT_EQ(p->calls[0].arguments, R"({"tz":"UTC"})");
  EXPECT_TRUE(ParseToolCallText(ToolFormat::kLlama3Json,
                                "{\"name\": \"now\", \"arguments\": {}}", kNames)
                  .has_value());
  EXPECT_FALSE(ParseToolCallText(ToolFormat::kLlama3Json, "It is {\"name\": \"now\"}", kNames)
                   .has_value());
}

// Feeds `pieces` one by one; returns the streamed content and the final result.
std::pair<std::string, ParsedToolCalls> StreamAll(ToolFormat f,
                                                  const std::vector<std::string>& pieces) {
  ToolCallStream s(f, kNames);
  std::string streamed;
  for (const std::string& p : pieces) streamed += s.Push(p);
  ParsedToolCalls end = s.Finish();
  streamed += end.content;
  return {streamed, std::move(end)};
}

TEST(ToolCallStream, HermesStreamsContentAndHoldsTheCall) {
  ToolCallStream s(ToolFormat::kHermes, kNames);
  EXPECT_EQ(s.Push("Let me "), "Let me");  // trailing space waits: it goes with a call
  EXPECT_EQ(s.Push("look.\n<tool"), " look.");  // "\n<tool" may start a call
  EXPECT_EQ(s.Push("_call>\n{\"name\": \"now\", "), "");
  EXPECT_EQ(s.Push("\"arguments\": {}}\n</tool_call>"), "");
  ParsedToolCalls end = s.Finish();
  EXPECT_EQ(end.content, "");
  ASSERT_EQ(end.calls.size(), 1u);
  EXPECT_EQ(end.calls[0].name, "now");
  EXPECT_EQ(end.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_GT(end.calls[0].id.size(), 10u);
}

TEST(ToolCallStream, TextThatOnlyLookedLikeACallComesOutWhole) {
  // A partial trigger that turns out to be text, and an unfinished call at the end.
  auto [text, end] = StreamAll(ToolFormat::kHermes, {"a <to", "y> b ", "\n<tool_call>\n{\"na"});
  EXPECT_EQ(text, "a <toy> b \n<tool_call>\n{\"na");
  EXPECT_TRUE(end.calls.empty());
  auto [plain, none] = StreamAll(ToolFormat::kLlama3Json, {"The ", "answer {is} 4"});
  EXPECT_EQ(plain, "The answer {is} 4");
  EXPECT_TRUE(none.calls.empty());
}

TEST(ToolCallStream, Llama3HoldsATurnThatStartsWithABrace) {
  ToolCallStream s(ToolFormat::kLlama3Json, kNames);
  EXPECT_EQ(s.Push("{\"name\": \"now\", "), "");
  EXPECT_EQ(s.Push("\"parameters\": {}}"), "");
  ParsedToolCalls end = s.Finish();
  EXPECT_EQ(end.content, "");
  ASSERT_EQ(end.calls.size(), 1u);
}

}  // namespace
}  // namespace kvserve
