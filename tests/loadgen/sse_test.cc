#include "loadgen/sse.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvserve::loadgen {
namespace {

std::vector<std::string> FeedInPieces(const std::string& body, size_t piece) {
  SseParser p;
  std::vector<std::string> events;
  auto on = [&](std::string_view d) { events.emplace_back(d); };
  for (size_t i = 0; i < body.size(); i += piece) p.Feed(body.substr(i, piece), on);
  p.Finish(on);
  return events;
}

TEST(SseParserTest, EventsSurviveAnySplitOfTheBody) {
  const std::string body =
      ": keep-alive\n\ndata: {\"a\":1}\n\ndata:{\"b\":2}\r\n\r\nevent: x\ndata: [DONE]\n\n";
  const std::vector<std::string> want = {"{\"a\":1}", "{\"b\":2}", "[DONE]"};
  for (size_t piece = 1; piece <= body.size(); ++piece) {
    EXPECT_EQ(FeedInPieces(body, piece), want) << "pieces of " << piece;
  }
}

TEST(SseParserTest, MultiLineDataJoinsWithNewlineAndAnUnterminatedEventIsFlushed) {
  EXPECT_EQ(FeedInPieces("data: one\ndata: two\n\ndata: last", 5),
            (std::vector<std::string>{"one\ntwo", "last"}));
}

TEST(ParseStreamChunkTest, CompletionTextAndUsageWithCachedTokens) {
  auto c = ParseStreamChunk(R"({"choices":[{"index":0,"text":"Hel"}],"usage":null})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->text, "Hel");
  EXPECT_FALSE(c->prompt_tokens);
  auto u = ParseStreamChunk(
      R"({"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":8,"total_tokens":48,
          "prompt_tokens_details":{"cached_tokens":32}}})");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->text, "");
  EXPECT_EQ(u->prompt_tokens, 40);
  EXPECT_EQ(u->completion_tokens, 8);
  EXPECT_EQ(u->cached_tokens, 32);
}

TEST(ParseStreamChunkTest, ChatDeltaContent) {
  auto c = ParseStreamChunk(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->text, "");
  c = ParseStreamChunk(R"({"choices":[{"delta":{"content":" world"},"finish_reason":null}]})");
  EXPECT_EQ(c->text, " world");
}

TEST(ParseStreamChunkTest, LlamaCppTimingsGiveCachedAndPromptTokens) {
  // llama.cpp's prompt_n counts only the tokens it had to compute.
  auto c = ParseStreamChunk(
      R"({"choices":[{"delta":{},"finish_reason":"length"}],
          "timings":{"cache_n":96,"prompt_n":12,"predicted_n":16}})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->cached_tokens, 96);
  EXPECT_EQ(c->prompt_tokens, 108);
  EXPECT_EQ(c->completion_tokens, 16);
  // OpenAI usage wins where both are present.
  c = ParseStreamChunk(
      R"({"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":4},
          "timings":{"cache_n":64,"prompt_n":36,"predicted_n":4}})");
  EXPECT_EQ(c->prompt_tokens, 100);
  EXPECT_EQ(c->cached_tokens, 64);
}

TEST(ParseStreamChunkTest, DoneErrorsAndGarbage) {
  EXPECT_TRUE(ParseStreamChunk("[DONE]")->done);
  EXPECT_EQ(ParseStreamChunk(R"({"error":{"message":"boom","type":"server_error"}})")->error, "boom");
  EXPECT_FALSE(ParseStreamChunk("{not json").ok());
}

}  // namespace
}  // namespace kvserve::loadgen
