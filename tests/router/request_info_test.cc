#include "router/request_info.h"

#include <gtest/gtest.h>

namespace kvserve::router {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

TEST(RequestInfoTest, RoutesByPathAndMethod) {
  bool post = false;
  EXPECT_EQ(RouteOfPath("/v1/chat/completions", &post), ApiRoute::kChat);
  EXPECT_TRUE(post);
  EXPECT_EQ(RouteOfPath("/v1/models/m", &post), ApiRoute::kModel);
  EXPECT_FALSE(post);
  EXPECT_EQ(RouteOfPath("/v1/caches", &post), ApiRoute::kNone);
  EXPECT_TRUE(Generates(ApiRoute::kMessages));
  EXPECT_FALSE(Generates(ApiRoute::kTokenize));
}

TEST(RequestInfoTest, ChatAsksForItsMessagesAndToolsAndKeepsItsCacheKey) {
  const ojson body = {{"model", "m"},
                      {"messages", ojson::array({{{"role", "user"}, {"content", "hi"}}})},
                      {"tools", ojson::array({{{"type", "function"}}})},
                      {"prompt_cache_key", "user-7"},
                      {"cache_salt", "s"}};
  const RequestFacts f = InspectRequest(ApiRoute::kChat, body);
  EXPECT_EQ(f.cache_key, "user-7");
  EXPECT_EQ(f.cache_salt, "s");
  EXPECT_EQ(f.tokenize_body, (ojson{{"messages", body["messages"]}, {"tools", body["tools"]}}));
  EXPECT_FALSE(f.prompt_ids.has_value());
}

// A chat template prints tool definitions in the client's key order, so /tokenize must get
// them in that order.
TEST(RequestInfoTest, ToolsKeepTheClientsKeyOrder) {
  const std::string text =
      R"({"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object",)"
      R"("properties":{"zeta":{"type":"string"},"alpha":{"type":"number"}}}}}],)"
      R"("messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"x":1}})";
  const RequestFacts f = InspectRequest(ApiRoute::kChat, ojson::parse(text));
  EXPECT_EQ(f.tokenize_body.dump(),
            R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function",)"
            R"("function":{"name":"f","parameters":{"type":"object","properties":{)"
            R"("zeta":{"type":"string"},"alpha":{"type":"number"}}}}}]})");
}

TEST(RequestInfoTest, CompletionsTakeAStringOrTheIdsThemselves) {
  RequestFacts f = InspectRequest(ApiRoute::kCompletions, {{"prompt", "once upon"}});
  EXPECT_EQ(f.tokenize_body, (ojson{{"prompt", "once upon"}}));
  f = InspectRequest(ApiRoute::kCompletions, {{"prompt", ojson::array({5, 6, 7})}});
  EXPECT_TRUE(f.tokenize_body.is_null());
  EXPECT_EQ(f.prompt_ids, (std::vector<int32_t>{5, 6, 7}));
  f = InspectRequest(ApiRoute::kCompletions, {{"prompt", ojson::array({"first", "second"})}});
  EXPECT_EQ(f.tokenize_body, (ojson{{"prompt", "first"}}));  // a batch: its first prompt
  f = InspectRequest(ApiRoute::kCompletions, {{"prompt", 5}});
  EXPECT_TRUE(f.tokenize_body.is_null());
  EXPECT_FALSE(f.prompt_ids.has_value());
}

TEST(RequestInfoTest, MessagesBecomeChatMessagesWithTheSystemFirst) {
  const ojson body = {
      {"system", ojson::array({{{"type", "text"}, {"text", "be brief"}}})},
      {"messages", ojson::array({{{"role", "user"},
                                  {"content", ojson::array({{{"type", "text"}, {"text", "a"}},
                                                            {{"type", "image"}},
                                                            {{"type", "text"}, {"text", "b"}}})}},
                                 {{"role", "assistant"}, {"content", "c"}}})},
      {"metadata", {{"user_id", "u1"}}}};
  const RequestFacts f = InspectRequest(ApiRoute::kMessages, body);
  EXPECT_EQ(f.cache_key, "u1");
  EXPECT_EQ(f.tokenize_body,
            (ojson{{"messages", ojson::array({{{"role", "system"}, {"content", "be brief"}},
                                              {{"role", "user"}, {"content", "a\nb"}},
                                              {{"role", "assistant"}, {"content", "c"}}})}}));
}

TEST(RequestInfoTest, BodiesThatAreNotObjectsTellNothing) {
  const RequestFacts f = InspectRequest(ApiRoute::kChat, ojson::array());
  EXPECT_TRUE(f.tokenize_body.is_null());
  EXPECT_TRUE(f.cache_key.empty());
}

TEST(RequestInfoTest, TokensOfReadsTheTokenizeAnswer) {
  EXPECT_EQ(TokensOf(R"({"tokens":[1,2,3],"count":3})"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(TokensOf("{").has_value());
  EXPECT_FALSE(TokensOf(R"({"tokens":["a"]})").has_value());
}

TEST(RequestInfoTest, UsageOfOpenAiAndAnthropicResponses) {
  std::optional<ReportedUsage> u = UsageOfJson(
      {{"usage", {{"prompt_tokens", 40}, {"prompt_tokens_details", {{"cached_tokens", 32}}}}}});
  ASSERT_TRUE(u);
  EXPECT_EQ(u->prompt_tokens, 40);
  EXPECT_EQ(u->cached_tokens, 32);
  u = UsageOfJson({{"usage",
                    {{"input_tokens", 8},
                     {"cache_read_input_tokens", 32},
                     {"cache_creation_input_tokens", 4}}}});
  ASSERT_TRUE(u);
  EXPECT_EQ(u->prompt_tokens, 44);
  EXPECT_EQ(u->cached_tokens, 32);
  EXPECT_FALSE(UsageOfJson({{"usage", nullptr}}).has_value());
  EXPECT_FALSE(UsageOfJson({{"id", "x"}}).has_value());
}

TEST(UsageScannerTest, FindsTheFinalUsageChunkAcrossSplitPieces) {
  UsageScanner s;
  s.Feed("data: {\"choices\":[{\"text\":\"a\"}],\"usage\":null}\n\nda");
  EXPECT_FALSE(s.usage().has_value());
  s.Feed("ta: {\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"prompt_tokens_details\":");
  s.Feed("{\"cached_tokens\":16}}}\n\ndata: [DONE]\n\n");
  ASSERT_TRUE(s.usage().has_value());
  EXPECT_EQ(s.usage()->prompt_tokens, 20);
  EXPECT_EQ(s.usage()->cached_tokens, 16);
}

TEST(UsageScannerTest, AnthropicsMessageStartCarriesThePromptAndLaterDeltasDoNotReplaceIt) {
  UsageScanner s;
  s.Feed(
      "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":"
      "{\"input_tokens\":4,\"cache_read_input_tokens\":16,\"output_tokens\":1}}}\n\n");
  s.Feed(
      "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":"
      "{\"output_tokens\":9}}\n\n");
  ASSERT_TRUE(s.usage().has_value());
  EXPECT_EQ(s.usage()->prompt_tokens, 20);
  EXPECT_EQ(s.usage()->cached_tokens, 16);
}

}  // namespace
}  // namespace kvserve::router
