// The Anthropic Messages codec as a specification: what a body must hold, how the conversation
// becomes chat messages, which errors name which field, how cache_control breakpoints become
// prefix holds, and the exact shapes of messages, stream events, usage and errors.
#include "server/anthropic_codec.h"

#include <gtest/gtest.h>

#include <utility>

namespace kvserve {
namespace {
// The test executables are unity builds: this file's helpers stay apart from its neighbours'.
namespace anthropic_codec_test {

using nlohmann::json;
using TC = GenerationParams::ToolChoice;

// A body with the required fields around `fields` (a JSON object's members, without braces).
std::string Body(const std::string& fields) {
  return R"({"model":"m","max_tokens":8,)" + fields + "}";
}

GenerationParams Parse(const std::string& body) {
  GenerationParams p;
  std::optional<ApiError> e = ParseMessagesRequest(json::parse(body), &p);
  EXPECT_FALSE(e.has_value()) << body << "\n" << (e ? e->message : "");
  return p;
}

ApiError ParseError(const std::string& body) {
  GenerationParams p;
  std::optional<ApiError> e = ParseMessagesRequest(json::parse(body), &p);
  EXPECT_TRUE(e.has_value()) << body;
  return e.value_or(ApiError{});
}

std::string ErrorParam(const std::string& body) { return ParseError(body).param; }

// role: content pairs, for comparing conversions.
std::vector<std::pair<std::string, std::string>> Turns(const std::vector<ChatMessage>& messages) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const ChatMessage& m : messages) out.emplace_back(m.role, m.content);
  return out;
}

using TurnList = std::vector<std::pair<std::string, std::string>>;

TEST(AnthropicCodec, ReadsEveryField) {
  const GenerationParams p = Parse(R"({"model":"m","max_tokens":7,"system":"be brief",
      "messages":[{"role":"user","content":"hi"}],"stop_sequences":["a","b"],"temperature":0.5,
      "top_p":0.9,"top_k":40,"stream":true,"metadata":{"user_id":"u-1"},
      "thinking":{"type":"disabled"},"service_tier":"auto","some_future_field":{"x":1}})");
  EXPECT_EQ(p.endpoint, Endpoint::kChat);
  EXPECT_EQ(p.model, "m");
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_EQ(Turns(p.messages), (TurnList{{"system", "be brief"}, {"user", "hi"}}));
  EXPECT_EQ(p.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_FLOAT_EQ(p.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.sampling.top_p, 0.9f);
  EXPECT_EQ(p.sampling.top_k, 40);
  EXPECT_TRUE(p.stream);
  EXPECT_EQ(p.n, 1);
  EXPECT_EQ(p.logprobs, -1);
  EXPECT_TRUE(p.tools.empty());
  EXPECT_EQ(p.tool_choice, TC::kNone);
  EXPECT_TRUE(p.prefix_holds.empty());
}

TEST(AnthropicCodec, TextBlocksJoinWithNewlinesAndConsecutiveTurnsMerge) {
  const GenerationParams p = Parse(Body(R"("system":[{"type":"text","text":"s1"},
      {"type":"text","text":"s2"}],
      "messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
      {"role":"user","content":"c"},{"role":"assistant","content":"d"},
      {"role":"user","content":"e"}])"));
  EXPECT_EQ(
      Turns(p.messages),
      (TurnList{{"system", "s1\ns2"}, {"user", "a\nb\nc"}, {"assistant", "d"}, {"user", "e"}}));
  // An empty system string is no system message.
  EXPECT_EQ(
      Turns(Parse(Body(R"("system":"","messages":[{"role":"user","content":"x"}])")).messages),
      (TurnList{{"user", "x"}}));
}

TEST(AnthropicCodec, ToolUseBecomesToolCallsAndToolResultsComeFirstAsToolMessages) {
  const GenerationParams p = Parse(Body(R"("messages":[
      {"role":"user","content":"weather?"},
      {"role":"assistant","content":[{"type":"text","text":"checking"},
        {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}},
        {"type":"tool_use","id":"toolu_2","name":"get_time","input":{}}]},
      {"role":"user","content":[{"type":"text","text":"here"},
        {"type":"tool_result","tool_use_id":"toolu_1","content":"21C"},
        {"type":"tool_result","tool_use_id":"toolu_2","is_error":true,
         "content":[{"type":"text","text":"no"},{"type":"text","text":"clock"}]}]}])"));
  ASSERT_EQ(p.messages.size(), 5u);
  EXPECT_EQ(Turns(p.messages), (TurnList{{"user", "weather?"},
                                         {"assistant", "checking"},
                                         {"tool", "21C"},
                                         {"tool", "no\nclock"},
                                         {"user", "here"}}));
  ASSERT_EQ(p.messages[1].tool_calls.size(), 2u);
  EXPECT_EQ(p.messages[1].tool_calls[0].id, "toolu_1");
  EXPECT_EQ(p.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.messages[1].tool_calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(p.messages[1].tool_calls[1].arguments, "{}");
  EXPECT_EQ(p.messages[2].tool_call_id, "toolu_1");
  EXPECT_EQ(p.messages[3].tool_call_id, "toolu_2");
  // A user turn of tool results alone has no user message; an assistant turn of calls alone
  // has empty content.
  const GenerationParams q = Parse(Body(R"("messages":[{"role":"user","content":"q"},
      {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":1}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}])"));
  EXPECT_EQ(Turns(q.messages), (TurnList{{"user", "q"}, {"assistant", ""}, {"tool", ""}}));
}

TEST(AnthropicCodec, ToolsBecomeFunctionToolsWithTheirSpecs) {
  const GenerationParams p = Parse(Body(R"("messages":[{"role":"user","content":"q"}],
      "tools":[{"name":"get_weather","description":"d","input_schema":{"type":"object",
        "properties":{"city":{"type":"string"}},"required":["city"]}},
        {"type":"custom","name":"get_time","input_schema":{"type":"object"}}])"));
  ASSERT_EQ(p.tools.size(), 2u);
  EXPECT_EQ(p.tools[0].dump(),
            R"({"type":"function","function":{"name":"get_weather","description":"d",)"
            R"("parameters":{"properties":{"city":{"type":"string"}},"required":["city"],)"
            R"("type":"object"}}})");
  EXPECT_FALSE(p.tools[1]["function"].contains("description"));
  ASSERT_EQ(p.tool_specs.size(), 2u);
  EXPECT_EQ(p.tool_specs[0].name, "get_weather");
  EXPECT_EQ(p.tool_specs[0].parameters,
            R"({"properties":{"city":{"type":"string"}},"required":["city"],"type":"object"})");
  EXPECT_TRUE(p.tool_specs[0].strict);
  EXPECT_EQ(p.tool_choice, TC::kAuto);  // the default with tools
  EXPECT_TRUE(p.parallel_tool_calls);

  const std::string tools = R"("messages":[{"role":"user","content":"q"}],
      "tools":[{"name":"f","input_schema":{"type":"object"}},
               {"name":"g","input_schema":{"type":"object"}}],)";
  EXPECT_EQ(Parse(Body(tools + R"("tool_choice":{"type":"auto"})")).tool_choice, TC::kAuto);
  EXPECT_EQ(Parse(Body(tools + R"("tool_choice":{"type":"any"})")).tool_choice, TC::kRequired);
  EXPECT_EQ(Parse(Body(tools + R"("tool_choice":{"type":"none"})")).tool_choice, TC::kNone);
  const GenerationParams named = Parse(Body(tools + R"("tool_choice":{"type":"tool","name":"g",
                                           "disable_parallel_tool_use":true})"));
  EXPECT_EQ(named.tool_choice, TC::kNamed);
  EXPECT_EQ(named.tool_choice_name, "g");
  EXPECT_FALSE(named.parallel_tool_calls);
  // auto without tools is simply no tools.
  EXPECT_EQ(Parse(Body(R"("messages":[{"role":"user","content":"q"}],
                           "tool_choice":{"type":"auto"})"))
                .tool_choice,
            TC::kNone);
}

TEST(AnthropicCodec, RequiredFieldsWrongTypesAndRangesAreNamed) {
  const std::string m = R"("messages":[{"role":"user","content":"q"}])";
  EXPECT_EQ(ParseError("[]").param, "");
  EXPECT_EQ(ErrorParam(R"({"max_tokens":8,)" + m + "}"), "model");
  EXPECT_EQ(ErrorParam(R"({"model":1,"max_tokens":8,)" + m + "}"), "model");
  EXPECT_EQ(ErrorParam(R"({"model":"m",)" + m + "}"), "max_tokens");
  EXPECT_EQ(ErrorParam(R"({"model":"m","max_tokens":0,)" + m + "}"), "max_tokens");
  EXPECT_EQ(ErrorParam(R"({"model":"m","max_tokens":1.5,)" + m + "}"), "max_tokens");
  EXPECT_EQ(ErrorParam(R"({"model":"m","max_tokens":8})"), "messages");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"temperature":1.5)")), "temperature");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"top_p":0)")), "top_p");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"top_k":-1)")), "top_k");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"stop_sequences":"x")")), "stop_sequences");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"stop_sequences":[""])")), "stop_sequences");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"stream":"yes")")), "stream");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"metadata":"x")")), "metadata");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"thinking":{"type":"enabled","budget_tokens":1024})")),
            "thinking");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"mcp_servers":[{"type":"url"}])")), "mcp_servers");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"system":[{"type":"image"}])")), "system[0].type");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"system":7)")), "system");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"tools":[{"type":"web_search_20250305","name":"w"}])")),
            "tools[0].type");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"tools":[{"name":"f"}])")), "tools[0].input_schema");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"tools":[{"name":"bad name","input_schema":{}}])")),
            "tools[0].name");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"tools":[{"name":"f","input_schema":{}},
                                              {"name":"f","input_schema":{}}])")),
            "tools[1].name");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"tools":[{"name":"f","input_schema":[]}])")),
            "tools[0].input_schema");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"tool_choice":{"type":"any"})")), "tool_choice.type");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"tool_choice":"auto")")), "tool_choice");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"tools":[{"name":"f","input_schema":{}}],
                                   "tool_choice":{"type":"sometimes"})")),
            "tool_choice.type");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"tools":[{"name":"f","input_schema":{}}],
                                   "tool_choice":{"type":"tool","name":"g"})")),
            "tool_choice.name");
  EXPECT_EQ(ErrorParam(Body(m + R"(,"tools":[{"name":"f","input_schema":{}}],
                                   "tool_choice":{"type":"any","disable_parallel_tool_use":1})")),
            "tool_choice.disable_parallel_tool_use");
}

TEST(AnthropicCodec, BadConversationsAreNamedByPath) {
  EXPECT_EQ(ErrorParam(Body(R"("messages":[])")), "messages");
  EXPECT_EQ(ErrorParam(Body(R"("messages":{})")), "messages");
  EXPECT_EQ(ErrorParam(Body(R"("messages":[{"role":"system","content":"x"}])")),
            "messages[0].role");
  EXPECT_EQ(ErrorParam(Body(R"("messages":[{"content":"x"}])")), "messages[0].role");
  EXPECT_EQ(ErrorParam(Body(R"("messages":[{"role":"assistant","content":"x"},
                                           {"role":"user","content":"y"}])")),
            "messages[0].role");
  const ApiError prefill = ParseError(Body(R"("messages":[{"role":"user","content":"x"},
                                                         {"role":"assistant","content":"y"}])"));
  EXPECT_EQ(prefill.param, "messages[1].role");
  EXPECT_NE(prefill.message.find("prefill"), std::string::npos);
  EXPECT_EQ(ErrorParam(Body(R"("messages":[{"role":"user"}])")), "messages[0].content");
  EXPECT_EQ(ErrorParam(Body(R"("messages":[{"role":"user","content":[]}])")),
            "messages[0].content");
  EXPECT_EQ(ErrorParam(Body(R"("messages":[{"role":"user","content":5}])")), "messages[0].content");
  const std::string q = R"({"role":"user","content":"q"},)";
  const ApiError image = ParseError(Body(R"("messages":[)" + q + R"({"role":"assistant",
      "content":"a"},{"role":"user","content":[{"type":"image","source":{}}]}])"));
  EXPECT_EQ(image.param, "messages[2].content[0].type");
  EXPECT_NE(image.message.find("messages[2].content[0].type"), std::string::npos);
  EXPECT_EQ(ErrorParam(Body(R"("messages":[{"role":"user","content":[{"type":"text"}]}])")),
            "messages[0].content[0].text");
  EXPECT_EQ(ErrorParam(Body(R"("messages":[{"role":"user","content":[{"type":"text","text":"x"},
      {"type":"thinking","thinking":"t"}]}])")),
            "messages[0].content[1].type");
  EXPECT_EQ(ErrorParam(Body(R"("messages":[{"role":"user","content":[
      {"type":"tool_use","id":"t","name":"f","input":{}}]}])")),
            "messages[0].content[0].type");
  EXPECT_EQ(ErrorParam(Body(R"("messages":[)" + q + R"({"role":"assistant","content":[
      {"type":"tool_result","tool_use_id":"t"}]},{"role":"user","content":"z"}])")),
            "messages[1].content[0].type");
  EXPECT_EQ(ErrorParam(Body(R"("messages":[)" + q + R"({"role":"assistant","content":[
      {"type":"tool_use","id":"t","name":"f","input":"{}"}]},{"role":"user","content":"z"}])")),
            "messages[1].content[0].input");
  EXPECT_EQ(ErrorParam(Body(R"("messages":[)" + q + R"({"role":"assistant","content":[
      {"type":"tool_use","name":"f","input":{}}]},{"role":"user","content":"z"}])")),
            "messages[1].content[0].id");
  EXPECT_EQ(ErrorParam(Body(R"("messages":[{"role":"user","content":[
      {"type":"tool_result","content":"x"}]}])")),
            "messages[0].content[0].tool_use_id");
  EXPECT_EQ(ErrorParam(Body(R"("messages":[{"role":"user","content":[
      {"type":"tool_result","tool_use_id":"t","content":[{"type":"image"}]}]}])")),
            "messages[0].content[0].content[0].type");
  EXPECT_EQ(ErrorParam(Body(R"("messages":[{"role":"user","content":[
      {"type":"tool_result","tool_use_id":"t","is_error":"yes"}]}])")),
            "messages[0].content[0].is_error");
}

// A conversation with breakpoints on a tool, the first of two system blocks, and the first of
// two blocks of the third message.
const char* kCachedBody = R"({"model":"m","max_tokens":8,
    "tools":[{"name":"f","input_schema":{"type":"object"},
              "cache_control":{"type":"ephemeral","ttl":"1h"}}],
    "system":[{"type":"text","text":"s1","cache_control":{"type":"ephemeral","ttl":"1h"}},
              {"type":"text","text":"s2"}],
    "messages":[{"role":"user","content":"u1"},
                {"role":"assistant","content":[{"type":"text","text":"a1"},
                  {"type":"tool_use","id":"t1","name":"f","input":{"z":1,"a":2}}]},
                {"role":"user","content":[
                  {"type":"tool_result","tool_use_id":"t1","content":"r1",
                   "cache_control":{"type":"ephemeral"}},
                  {"type":"text","text":"u2"}]}]})";

TEST(AnthropicCodec, CacheControlBreakpointsBecomeHoldsInPromptOrder) {
  const GenerationParams p = Parse(kCachedBody);
  EXPECT_EQ(Turns(p.messages), (TurnList{{"system", "s1\ns2"},
                                         {"user", "u1"},
                                         {"assistant", "a1"},
                                         {"tool", "r1"},
                                         {"user", "u2"}}));
  ASSERT_EQ(p.prefix_holds.size(), 3u);
  const GenerationParams::PrefixHold& tools = p.prefix_holds[0];
  const GenerationParams::PrefixHold& system_hold = p.prefix_holds[1];
  const GenerationParams::PrefixHold& message = p.prefix_holds[2];
  EXPECT_TRUE(tools.tools_only);
  EXPECT_TRUE(tools.messages.empty());
  EXPECT_EQ(tools.ttl_seconds, 3600);
  EXPECT_FALSE(system_hold.tools_only);
  EXPECT_EQ(Turns(system_hold.messages), (TurnList{{"system", "s1"}}));
  EXPECT_EQ(system_hold.ttl_seconds, 3600);
  // Cut after the tool_result: the user message's text after it is not in the prefix.
  EXPECT_EQ(Turns(message.messages),
            (TurnList{{"system", "s1\ns2"}, {"user", "u1"}, {"assistant", "a1"}, {"tool", "r1"}}));
  ASSERT_EQ(message.messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(message.messages[3].tool_call_id, "t1");
  EXPECT_EQ(message.ttl_seconds, 300);
  for (const auto& hold : p.prefix_holds) EXPECT_FALSE(hold.whole_prompt);
}

TEST(AnthropicCodec, ABreakpointInsideAMessageCutsItThere) {
  const GenerationParams p = Parse(Body(R"("system":"sys","messages":[
      {"role":"user","content":"u1"},{"role":"assistant","content":"a1"},
      {"role":"user","content":[{"type":"text","text":"b0"},
        {"type":"text","text":"b1","cache_control":{"type":"ephemeral","ttl":"5m"}},
        {"type":"text","text":"b2"}]}])"));
  ASSERT_EQ(p.prefix_holds.size(), 1u);
  EXPECT_EQ(Turns(p.prefix_holds[0].messages),
            (TurnList{{"system", "sys"}, {"user", "u1"}, {"assistant", "a1"}, {"user", "b0\nb1"}}));
  EXPECT_EQ(Turns(p.messages).back(), (std::pair<std::string, std::string>{"user", "b0\nb1\nb2"}));
}

TEST(AnthropicCodec, BreakpointsInsideAToolResultHoldTheToolResult) {
  const GenerationParams p = Parse(Body(R"("messages":[{"role":"user","content":"q"},
      {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[
        {"type":"text","text":"r","cache_control":{"type":"ephemeral"}}]},
        {"type":"text","text":"more"}]}])"));
  ASSERT_EQ(p.prefix_holds.size(), 1u);
  EXPECT_EQ(Turns(p.prefix_holds[0].messages),
            (TurnList{{"user", "q"}, {"assistant", ""}, {"tool", "r"}}));
}

TEST(AnthropicCodec, TopLevelCacheControlMarksTheLastBlock) {
  const GenerationParams p = Parse(Body(R"("cache_control":{"type":"ephemeral","ttl":"1h"},
      "messages":[{"role":"user","content":"u1"},{"role":"assistant","content":"a1"},
      {"role":"user","content":"u2"}])"));
  ASSERT_EQ(p.prefix_holds.size(), 1u);
  EXPECT_EQ(Turns(p.prefix_holds[0].messages), Turns(p.messages));
  EXPECT_EQ(p.prefix_holds[0].ttl_seconds, 3600);
  // When the last block has its own breakpoint, that one stands alone.
  const GenerationParams q = Parse(Body(R"("cache_control":{"type":"ephemeral","ttl":"1h"},
      "messages":[{"role":"user","content":[{"type":"text","text":"u",
        "cache_control":{"type":"ephemeral"}}]}])"));
  ASSERT_EQ(q.prefix_holds.size(), 1u);
  EXPECT_EQ(q.prefix_holds[0].ttl_seconds, 300);
}

TEST(AnthropicCodec, AtMostFourBreakpoints) {
  std::string blocks;
  for (int i = 0; i < 4; ++i) {
    blocks += R"({"type":"text","text":"x","cache_control":{"type":"ephemeral"}},)";
  }
  const std::string four = Body(R"("messages":[{"role":"user","content":[)" +
                                blocks.substr(0, blocks.size() - 1) + "]}]");
  EXPECT_EQ(Parse(four).prefix_holds.size(), 4u);
  const ApiError e = ParseError(Body(R"("system":[{"type":"text","text":"s",
      "cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[)" +
                                     blocks.substr(0, blocks.size() - 1) + "]}]"));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.message, "A maximum of 4 blocks with cache_control may be provided. Found 5.");
  EXPECT_EQ(e.param, "messages[0].content[3].cache_control");
}

TEST(AnthropicCodec, AOneHourBreakpointAfterAFiveMinuteOneIsRefused) {
  const ApiError e = ParseError(Body(R"(
      "tools":[{"name":"f","input_schema":{},"cache_control":{"type":"ephemeral"}}],
      "system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"1h"}}],
      "messages":[{"role":"user","content":"q"}])"));
  EXPECT_EQ(e.param, "system[0].cache_control.ttl");
  EXPECT_NE(e.message.find("must not come after"), std::string::npos);
  // 1h then 5m is the allowed order; two 1h are fine too.
  EXPECT_EQ(Parse(Body(R"(
      "tools":[{"name":"f","input_schema":{},"cache_control":{"type":"ephemeral","ttl":"1h"}}],
      "system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"1h"}}],
      "messages":[{"role":"user","content":[{"type":"text","text":"q",
        "cache_control":{"type":"ephemeral","ttl":"5m"}}]}])"))
                .prefix_holds.size(),
            3u);
}

TEST(AnthropicCodec, CacheControlTypeAndTtlAreChecked) {
  const auto on_text = [](const std::string& cc) {
    return Body(R"("messages":[{"role":"user","content":[{"type":"text","text":"q",
        "cache_control":)" +
                cc + "}]}]");
  };
  EXPECT_EQ(ErrorParam(on_text(R"({"type":"persistent"})")),
            "messages[0].content[0].cache_control.type");
  EXPECT_EQ(ErrorParam(on_text(R"({})")), "messages[0].content[0].cache_control.type");
  EXPECT_EQ(ErrorParam(on_text(R"({"type":"ephemeral","ttl":"10m"})")),
            "messages[0].content[0].cache_control.ttl");
  EXPECT_EQ(ErrorParam(on_text(R"({"type":"ephemeral","ttl":3600})")),
            "messages[0].content[0].cache_control.ttl");
  EXPECT_EQ(ErrorParam(on_text(R"("ephemeral")")), "messages[0].content[0].cache_control");
  EXPECT_EQ(ErrorParam(Body(R"("cache_control":{"type":"x"},
                               "messages":[{"role":"user","content":"q"}])")),
            "cache_control.type");
  EXPECT_EQ(Parse(on_text("null")).prefix_holds.size(), 0u);
}

TEST(AnthropicCodec, KeepsTheClientsKeyOrderInSchemasAndToolInputs) {
  GenerationParams p = Parse(kCachedBody);
  EXPECT_EQ(p.messages[2].tool_calls[0].arguments, R"({"a":2,"z":1})");  // sorted
  KeepMessagesClientOrder(kCachedBody, &p);
  EXPECT_EQ(p.messages[2].tool_calls[0].arguments, R"({"z":1,"a":2})");  // as sent
  EXPECT_EQ(p.prefix_holds[2].messages[2].tool_calls[0].arguments, R"({"z":1,"a":2})");
  const std::string schema = Body(R"("messages":[{"role":"user","content":"q"}],
      "tools":[{"name":"f","input_schema":{"type":"object","properties":{
        "zeta":{"type":"integer"},"alpha":{"type":"string"}}}}])");
  GenerationParams q = Parse(schema);
  EXPECT_LT(q.tool_specs[0].parameters.find("alpha"), q.tool_specs[0].parameters.find("zeta"));
  KeepMessagesClientOrder(schema, &q);
  EXPECT_LT(q.tool_specs[0].parameters.find("zeta"), q.tool_specs[0].parameters.find("alpha"));
  EXPECT_EQ(q.tools[0]["function"]["parameters"].dump(), q.tool_specs[0].parameters);
  EXPECT_EQ(q.tools[0].begin().key(), "type");
}

TEST(AnthropicCodec, StopReasons) {
  ChoiceOut c;
  c.finish_reason = "length";
  EXPECT_EQ(StopOf(c, {}).reason, "max_tokens");
  c.finish_reason = "tool_calls";
  EXPECT_EQ(StopOf(c, {"x"}).reason, "tool_use");
  c.finish_reason = "stop";
  EXPECT_EQ(StopOf(c, {}).reason, "end_turn");
  EXPECT_FALSE(StopOf(c, {}).sequence.has_value());
  // Reported by the engine: the matched string, or "" for an end-of-generation token.
  c.stop_sequence = "##";
  EXPECT_EQ(StopOf(c, {"x", "##"}).reason, "stop_sequence");
  EXPECT_EQ(StopOf(c, {"x", "##"}).sequence, "##");
  c.stop_sequence = "";
  EXPECT_EQ(StopOf(c, {"x", "##"}).reason, "end_turn");
  // Not reported: a request with stop sequences is taken to have stopped at one of them.
  c.stop_sequence.reset();
  EXPECT_EQ(StopOf(c, {"##"}).reason, "stop_sequence");
  EXPECT_EQ(StopOf(c, {"##"}).sequence, "##");
  EXPECT_EQ(StopOf(c, {"x", "##"}).reason, "stop_sequence");
  EXPECT_FALSE(StopOf(c, {"x", "##"}).sequence.has_value());
}

TEST(AnthropicCodec, UsageSplitsThePromptIntoUncachedReadAndWritten) {
  UsageOut u;
  u.prompt_tokens = 100;
  u.cached_tokens = 40;
  u.cache_creation_tokens = 30;
  u.cache_creation_5m_tokens = 10;
  u.cache_creation_1h_tokens = 20;
  u.completion_tokens = 7;
  EXPECT_EQ(json::parse(AnthropicUsageJson(u).dump()),
            json::parse(R"({"input_tokens":30,"cache_creation_input_tokens":30,
                "cache_read_input_tokens":40,"cache_creation":{"ephemeral_5m_input_tokens":10,
                "ephemeral_1h_input_tokens":20},"output_tokens":7})"));
  EXPECT_EQ(AnthropicUsageJson(u).begin().key(), "input_tokens");
  u.cache_creation_tokens = 90;
  EXPECT_EQ(AnthropicUsageJson(u)["input_tokens"], 0);  // never negative
}

TEST(AnthropicCodec, AMessageHasAnthropicsShape) {
  ChoiceOut c;
  c.text = "Let me check.";
  c.tool_calls.push_back({0, "call_0123abcd", "get_weather", R"({"city":"Paris","unit":"c"})"});
  c.finish_reason = "tool_calls";
  UsageOut u;
  u.prompt_tokens = 12;
  u.completion_tokens = 5;
  const nlohmann::ordered_json m = MessageJson("msg_1", "m", c, StopOf(c, {}), u);
  EXPECT_EQ(DumpOrdered(m),
            R"({"id":"msg_1","type":"message","role":"assistant","model":"m","content":[)"
            R"({"type":"text","text":"Let me check."},{"type":"tool_use","id":"toolu_0123abcd",)"
            R"("name":"get_weather","input":{"city":"Paris","unit":"c"}}],)"
            R"("stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":12,)"
            R"("cache_creation_input_tokens":0,"cache_read_input_tokens":0,"cache_creation":)"
            R"({"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},)"
            R"("output_tokens":5}})");
  // No text and no calls: empty content; a stop sequence is named.
  ChoiceOut empty;
  empty.finish_reason = "stop";
  const nlohmann::ordered_json e = MessageJson("msg_2", "m", empty, StopOf(empty, {"##"}), u);
  EXPECT_TRUE(e["content"].empty());
  EXPECT_EQ(e["stop_reason"], "stop_sequence");
  EXPECT_EQ(e["stop_sequence"], "##");
  EXPECT_EQ(ToolUseId("call_ab"), "toolu_ab");
  EXPECT_EQ(ToolUseId("x"), "toolu_x");
  // Invalid UTF-8 from a split token is replaced, not thrown.
  ChoiceOut bad;
  bad.text = "a\xff";
  EXPECT_NE(DumpOrdered(MessageJson("msg_3", "m", bad, StopOf(bad, {}), u)).find("a\xef\xbf\xbd"),
            std::string::npos);
}

// (event name, data) of each event in an SSE text; every event must be well framed.
std::vector<std::pair<std::string, json>> Events(const std::string& sse) {
  std::vector<std::pair<std::string, json>> out;
  size_t at = 0;
  while (at < sse.size()) {
    const size_t end = sse.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << sse.substr(at);
    if (end == std::string::npos) break;
    const std::string event = sse.substr(at, end - at);
    const size_t nl = event.find('\n');
    EXPECT_EQ(event.rfind("event: ", 0), 0u) << event;
    EXPECT_EQ(event.compare(nl + 1, 6, "data: "), 0) << event;
    out.emplace_back(event.substr(7, nl - 7), json::parse(event.substr(nl + 7)));
    EXPECT_EQ(out.back().second["type"], out.back().first);
    at = end + 2;
  }
  return out;
}

std::vector<std::string> Names(const std::vector<std::pair<std::string, json>>& events) {
  std::vector<std::string> names;
  for (const auto& [name, data] : events) names.push_back(name);
  return names;
}

TEST(AnthropicCodec, StreamEventsOpenTextThenToolUseBlocksAndEndWithTheStop) {
  MessageEventWriter w("msg_9", "m", {});
  UsageOut u;
  u.prompt_tokens = 20;
  const auto start = Events(w.Start(u));
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].second, json::parse(R"({"type":"message_start","message":{"id":"msg_9",
      "type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,
      "stop_sequence":null,"usage":{"input_tokens":20,"cache_creation_input_tokens":0,
      "cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,
      "ephemeral_1h_input_tokens":0},"output_tokens":0}}})"));

  ChoiceOut a;
  a.text = "Hel";
  ChoiceOut b;
  b.text = "lo";
  ChoiceOut empty;  // an update without text (a token held back) writes nothing
  ChoiceOut last;
  last.tool_calls.push_back({0, "call_1", "f", R"({"x":1})"});
  last.finish_reason = "tool_calls";
  std::string body = w.Update(a);  // one call per statement: the order matters
  body += w.Update(empty);
  body += w.Update(b);
  body += w.Update(last);
  EXPECT_EQ(w.finish_reason(), "tool_calls");
  u.completion_tokens = 9;
  u.cached_tokens = 16;
  body += w.Finish(u);
  const auto events = Events(body);
  EXPECT_EQ(Names(events), (std::vector<std::string>{
                               "content_block_start", "content_block_delta", "content_block_delta",
                               "content_block_stop", "content_block_start", "content_block_delta",
                               "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(events[0].second, json::parse(R"({"type":"content_block_start","index":0,
      "content_block":{"type":"text","text":""}})"));
  EXPECT_EQ(events[1].second, json::parse(R"({"type":"content_block_delta","index":0,
      "delta":{"type":"text_delta","text":"Hel"}})"));
  EXPECT_EQ(events[2].second["delta"]["text"], "lo");
  EXPECT_EQ(events[3].second, json::parse(R"({"type":"content_block_stop","index":0})"));
  EXPECT_EQ(events[4].second, json::parse(R"({"type":"content_block_start","index":1,
      "content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}})"));
  EXPECT_EQ(events[5].second, json::parse(R"({"type":"content_block_delta","index":1,
      "delta":{"type":"input_json_delta","partial_json":"{\"x\":1}"}})"));
  EXPECT_EQ(events[6].second, json::parse(R"({"type":"content_block_stop","index":1})"));
  EXPECT_EQ(events[7].second, json::parse(R"({"type":"message_delta",
      "delta":{"stop_reason":"tool_use","stop_sequence":null},
      "usage":{"input_tokens":4,"cache_creation_input_tokens":0,"cache_read_input_tokens":16,
      "cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},
      "output_tokens":9}})"));
  EXPECT_EQ(events[8].second, json::parse(R"({"type":"message_stop"})"));
}

TEST(AnthropicCodec, StreamEndsTheTextBlockAtTheFinishAndNamesTheStopSequence) {
  MessageEventWriter w("msg_1", "m", {"##"});
  ChoiceOut a;
  a.text = "hi";
  ChoiceOut last;
  last.finish_reason = "stop";
  std::string body = w.Update(a);
  body += w.Update(last);
  body += w.Finish(UsageOut{});
  const auto events = Events(body);
  EXPECT_EQ(Names(events),
            (std::vector<std::string>{"content_block_start", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(events[3].second["delta"], json::parse(R"({"stop_reason":"stop_sequence",
      "stop_sequence":"##"})"));
  // Nothing generated at all: no content block, only the end.
  MessageEventWriter none("msg_2", "m", {});
  ChoiceOut length;
  length.finish_reason = "length";
  std::string end = none.Update(length);
  end += none.Finish(UsageOut{});
  const auto only_end = Events(end);
  EXPECT_EQ(Names(only_end), (std::vector<std::string>{"message_delta", "message_stop"}));
  EXPECT_EQ(only_end[0].second["delta"]["stop_reason"], "max_tokens");
  EXPECT_EQ(Events(SseEvent(PingEvent()))[0].first, "ping");
}

TEST(AnthropicCodec, ErrorsHaveAnthropicsShapeAndTypeByStatus) {
  ApiError e = BadRequest("'messages' must not be empty", "messages");
  EXPECT_EQ(DumpOrdered(AnthropicErrorJson(e)),
            R"({"type":"error","error":{"type":"invalid_request_error",)"
            R"("message":"'messages' must not be empty"}})");
  const std::vector<std::pair<int, std::string>> types = {
      {400, "invalid_request_error"}, {401, "authentication_error"},  {403, "permission_error"},
      {404, "not_found_error"},       {405, "invalid_request_error"}, {413, "request_too_large"},
      {415, "invalid_request_error"}, {429, "rate_limit_error"},      {500, "api_error"},
      {503, "overloaded_error"},      {529, "overloaded_error"}};
  for (const auto& [status, type] : types) {
    e.status = status;
    EXPECT_EQ(AnthropicErrorJson(e)["error"]["type"], type) << status;
  }
}

}  // namespace anthropic_codec_test
}  // namespace
}  // namespace kvserve
