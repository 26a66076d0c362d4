// The OpenAI codecs as a specification: what a body must hold, which errors name which field,
// and the exact shapes of responses, chunks, usage and errors.
#include "server/openai_codec.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace {

using nlohmann::json;

std::optional<ApiError> Parse(const char* body, Endpoint endpoint, GenerationParams* out) {
  return ParseGenerationParams(json::parse(body), endpoint, out);
}

ApiError ParseError(const char* body, Endpoint endpoint = Endpoint::kCompletions) {
  GenerationParams p;
  std::optional<ApiError> e = Parse(body, endpoint, &p);
  EXPECT_TRUE(e.has_value()) << body;
  return e.value_or(ApiError{});
}

TEST(OpenAiCodec, ReadsEveryCompletionParameter) {
  GenerationParams p;
  ASSERT_FALSE(Parse(R"({"model":"m","prompt":"hi","max_tokens":7,"temperature":0.5,"top_p":0.9,
      "n":3,"stop":["a","b"],"seed":-4,"presence_penalty":1,"frequency_penalty":-1,"logprobs":2,
      "stream":true,"stream_options":{"include_usage":true},"user":"u","top_k":-1,"min_p":0.1,
      "priority":5,"cache_salt":"s","ignore_eos":true,"echo":true,"stop_token_ids":[4],
      "some_future_field":{"x":1}})",
                     Endpoint::kCompletions, &p));
  EXPECT_EQ(p.model, "m");
  ASSERT_EQ(p.prompts.size(), 1u);
  EXPECT_EQ(p.prompts[0].text, "hi");
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_FLOAT_EQ(p.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.sampling.top_p, 0.9f);
  EXPECT_EQ(p.n, 3);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(p.sampling.has_seed);
  EXPECT_EQ(p.sampling.seed, static_cast<uint64_t>(int64_t{-4}));
  EXPECT_FLOAT_EQ(p.sampling.presence_penalty, 1.f);
  EXPECT_FLOAT_EQ(p.sampling.frequency_penalty, -1.f);
  EXPECT_TRUE(p.sampling.logprobs);
  EXPECT_EQ(p.sampling.top_logprobs, 2);
  EXPECT_TRUE(p.stream && p.include_usage && p.ignore_eos && p.echo);
  EXPECT_EQ(p.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(p.sampling.min_p, 0.1f);
  EXPECT_EQ(p.priority, 5);
  EXPECT_EQ(p.cache_salt, "s");
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{4}));
}

TEST(OpenAiCodec, ReadsKvEvictionAsANameOrAnObject) {
  GenerationParams p;
  ASSERT_FALSE(Parse(R"({"prompt":"hi","kv_eviction":"sinks"})", Endpoint::kCompletions, &p));
  ASSERT_TRUE(p.kv_eviction.has_value());
  EXPECT_EQ(p.kv_eviction->policy, KvEvictionPolicy::kSinks);
  EXPECT_FALSE(p.kv_eviction->budget.has_value());
  GenerationParams q;
  ASSERT_FALSE(Parse(R"({"prompt":"hi","kv_eviction":{"policy":"window","budget":512,
                        "sink_tokens":0,"evict_batch":64}})",
                     Endpoint::kCompletions, &q));
  EXPECT_EQ(q.kv_eviction->policy, KvEvictionPolicy::kWindow);
  EXPECT_EQ(q.kv_eviction->budget, 512);
  EXPECT_EQ(q.kv_eviction->sink_tokens, 0);
  EXPECT_EQ(q.kv_eviction->evict_batch, 64);
  GenerationParams h;
  ASSERT_FALSE(Parse(R"({"prompt":"hi","kv_eviction":{"policy":"snapkv","snapkv_window":16,
                        "snapkv_kernel":3,"h2o_recent_fraction":0.25}})",
                     Endpoint::kCompletions, &h));
  EXPECT_EQ(h.kv_eviction->policy, KvEvictionPolicy::kSnapKV);
  EXPECT_EQ(h.kv_eviction->snapkv_window, 16);
  EXPECT_EQ(h.kv_eviction->snapkv_kernel, 3);
  EXPECT_FLOAT_EQ(*h.kv_eviction->h2o_recent_fraction, 0.25f);
  EXPECT_EQ(ParseError(R"({"prompt":"hi","kv_eviction":{"policy":"h2o","h2o_recent_fraction":1}})")
                .param,
            "kv_eviction.h2o_recent_fraction");
  EXPECT_EQ(ParseError(R"({"prompt":"hi","kv_eviction":{"policy":"snapkv","snapkv_window":0}})")
                .param,
            "kv_eviction.snapkv_window");
  EXPECT_EQ(ParseError(R"({"prompt":"hi","kv_eviction":"fifo"})").param, "kv_eviction");
  EXPECT_EQ(ParseError(R"({"prompt":"hi","kv_eviction":7})").param, "kv_eviction");
  EXPECT_EQ(ParseError(R"({"prompt":"hi","kv_eviction":{"budget":5}})").param,
            "kv_eviction.policy");
  EXPECT_EQ(ParseError(R"({"prompt":"hi","kv_eviction":{"policy":"sinks","budget":0}})").param,
            "kv_eviction.budget");
  EXPECT_EQ(ParseError(R"({"prompt":"hi","kv_eviction":{"policy":"sinks","size":5}})").param,
            "kv_eviction.size");
}

TEST(OpenAiCodec, ReadsEveryPromptForm) {
  GenerationParams p;
  ASSERT_FALSE(Parse(R"({"prompt":["a","b"]})", Endpoint::kCompletions, &p));
  EXPECT_EQ(p.prompts.size(), 2u);
  p = {};
  ASSERT_FALSE(Parse(R"({"prompt":[1,2,3]})", Endpoint::kCompletions, &p));
  ASSERT_EQ(p.prompts.size(), 1u);
  EXPECT_TRUE(p.prompts[0].is_ids);
  EXPECT_EQ(p.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  p = {};
  ASSERT_FALSE(Parse(R"({"prompt":[[1],[2,3]]})", Endpoint::kCompletions, &p));
  EXPECT_EQ(p.prompts.size(), 2u);
  EXPECT_EQ(ParseError(R"({"prompt":[]})").param, "prompt");
  EXPECT_EQ(ParseError(R"({"prompt":[1,-2]})").param, "prompt");
  EXPECT_EQ(ParseError(R"({"prompt":{"a":1}})").param, "prompt");
  EXPECT_EQ(ParseError(R"({"max_tokens":3})").param, "prompt");
}

TEST(OpenAiCodec, WrongTypesAndRangesNameTheField) {
  EXPECT_EQ(ParseError(R"({"prompt":"x","temperature":"hot"})").param, "temperature");
  EXPECT_EQ(ParseError(R"({"prompt":"x","temperature":2.5})").param, "temperature");
  EXPECT_EQ(ParseError(R"({"prompt":"x","top_p":0})").param, "top_p");
  EXPECT_EQ(ParseError(R"({"prompt":"x","max_tokens":0})").param, "max_tokens");
  EXPECT_EQ(ParseError(R"({"prompt":"x","max_tokens":1.5})").param, "max_tokens");
  EXPECT_EQ(ParseError(R"({"prompt":"x","n":0})").param, "n");
  EXPECT_EQ(ParseError(R"({"prompt":"x","n":129})").param, "n");
  EXPECT_EQ(ParseError(R"({"prompt":"x","stop":[1]})").param, "stop");
  EXPECT_EQ(ParseError(R"({"prompt":"x","stop":""})").param, "stop");
  EXPECT_EQ(ParseError(R"({"prompt":"x","presence_penalty":3})").param, "presence_penalty");
  EXPECT_EQ(ParseError(R"({"prompt":"x","logprobs":21})").param, "logprobs");
  EXPECT_EQ(ParseError(R"({"prompt":"x","logprobs":true})").param, "logprobs");
  EXPECT_EQ(ParseError(R"({"prompt":"x","stream":"yes"})").param, "stream");
  EXPECT_EQ(ParseError(R"({"prompt":"x","stream_options":{"include_usage":true}})").param,
            "stream_options");
  EXPECT_EQ(ParseError(R"({"prompt":"x","seed":"1"})").param, "seed");
  EXPECT_EQ(ParseError(R"({"prompt":"x","model":3})").param, "model");
  EXPECT_EQ(ParseError(R"([1,2])").status, 400);
  // Known fields that cannot be honoured are refused, not ignored.
  EXPECT_EQ(ParseError(R"({"prompt":"x","logit_bias":{"5":10}})").param, "logit_bias");
  EXPECT_EQ(ParseError(R"({"prompt":"x","response_format":{"type":"xml"}})").param,
            "response_format.type");
  EXPECT_EQ(ParseError(R"({"prompt":"x","tools":[{"type":"function","function":{"name":"f"}}]})")
                .param,
            "tools");  // tools belong to chat
  EXPECT_EQ(ParseError(R"({"prompt":"x","best_of":3})").param, "best_of");
  // Wrong nested types are the client's mistake too, never an exception.
  EXPECT_EQ(ParseError(R"({"prompt":"x","response_format":{"type":5}})").param, "response_format");
  EXPECT_EQ(ParseError(R"({"prompt":"x","response_format":[1]})").param, "response_format");
  // In range as a double, out of range as the engine's float: named, with the rounding said.
  const ApiError tiny = ParseError(R"({"prompt":"x","repetition_penalty":1e-320})");
  EXPECT_EQ(tiny.param, "repetition_penalty");
  EXPECT_NE(tiny.message.find("32-bit float"), std::string::npos) << tiny.message;
  EXPECT_EQ(ParseError(R"({"prompt":"x","max_tokens":1e300})").param, "max_tokens");
  // null counts as absent
  GenerationParams p;
  EXPECT_FALSE(Parse(R"({"prompt":"x","temperature":null,"stop":null})", Endpoint::kCompletions,
                     &p));
  EXPECT_FLOAT_EQ(p.sampling.temperature, 1.f);
  // A temperature too small to divide by is kept; the sampler treats it as greedy.
  ASSERT_FALSE(Parse(R"({"prompt":"x","temperature":1e-40})", Endpoint::kCompletions, &p));
  EXPECT_TRUE(p.sampling.greedy());
}

TEST(OpenAiCodec, ReadsToolsToolChoiceAndToolTurns) {
  GenerationParams p;
  const json body = json::parse(R"({"messages":[
      {"role":"user","content":"q"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
        "function":{"name":"f","arguments":"{\"a\":1}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"done"}],
    "tools":[{"type":"function","function":{"name":"f","description":"d",
      "parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}},
      {"type":"function","function":{"name":"g"}}],
    "tool_choice":{"type":"function","function":{"name":"g"}},"parallel_tool_calls":false})");
  ASSERT_FALSE(ParseGenerationParams(body, Endpoint::kChat, &p).has_value());
  ASSERT_EQ(p.messages.size(), 3u);
  ASSERT_EQ(p.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(p.messages[1].tool_calls[0].name, "f");
  EXPECT_EQ(p.messages[1].tool_calls[0].arguments, R"({"a":1})");
  EXPECT_EQ(p.messages[2].role, "tool");
  EXPECT_EQ(p.messages[2].tool_call_id, "c1");
  ASSERT_EQ(p.tool_specs.size(), 2u);
  EXPECT_EQ(p.tool_specs[1].name, "g");
  EXPECT_EQ(p.tool_specs[1].parameters, R"({"type":"object","properties":{}})");
  EXPECT_EQ(p.tool_choice, GenerationParams::ToolChoice::kNamed);
  EXPECT_EQ(p.tool_choice_name, "g");
  EXPECT_FALSE(p.parallel_tool_calls);
  // The client's key order comes back from the raw body ("type" before "function").
  KeepClientOrder(body.dump(), &p);
  EXPECT_EQ(p.tools[0].begin().key(), "function");  // sorted by nlohmann::json...
  KeepClientOrder(R"({"tools":[{"type":"function","function":{"name":"f"}},
                   {"type":"function","function":{"name":"g"}}]})",
                &p);
  EXPECT_EQ(p.tools[0].begin().key(), "type");  // ...and as the client wrote it
  // A JSON schema keeps the client's property order too (the order the output follows).
  const std::string rf = R"({"messages":[{"role":"user","content":"q"}],"response_format":{
      "type":"json_schema","json_schema":{"name":"x","schema":{"type":"object",
      "properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"}}}}}})";
  GenerationParams o;
  ASSERT_FALSE(ParseGenerationParams(json::parse(rf), Endpoint::kChat, &o));
  ASSERT_TRUE(o.constraint.has_value());
  EXPECT_LT(o.constraint->text.find("alpha"), o.constraint->text.find("zeta"));  // sorted
  KeepClientOrder(rf, &o);
  EXPECT_LT(o.constraint->text.find("zeta"), o.constraint->text.find("alpha"));
  // vLLM's disable_any_whitespace: false allows whitespace; compact by default.
  GenerationParams ws;
  ASSERT_FALSE(ParseGenerationParams(json::parse(R"({"messages":[{"role":"user","content":"q"}],
      "structured_outputs":{"json":{"type":"object"},"disable_any_whitespace":false}})"),
                                     Endpoint::kChat, &ws));
  ASSERT_TRUE(ws.constraint.has_value());
  EXPECT_TRUE(ws.constraint->json.flexible_whitespace);
  EXPECT_EQ(ParseError(R"({"messages":[{"role":"user","content":"q"}],"structured_outputs":{
                "json":{"type":"object"},"disable_any_whitespace":"no"}})",
                       Endpoint::kChat)
                .param,
            "structured_outputs.disable_any_whitespace");
  // Tools alone mean "auto"; no tools mean "none".
  GenerationParams q;
  ASSERT_FALSE(ParseGenerationParams(json::parse(R"({"messages":[{"role":"user","content":"q"}],
      "tools":[{"type":"function","function":{"name":"f"}}]})"),
                                     Endpoint::kChat, &q));
  EXPECT_EQ(q.tool_choice, GenerationParams::ToolChoice::kAuto);
  GenerationParams r;
  ASSERT_FALSE(ParseGenerationParams(json::parse(R"({"messages":[{"role":"user","content":"q"}],
      "tools":[], "tool_choice":"none"})"),
                                     Endpoint::kChat, &r));
  EXPECT_EQ(r.tool_choice, GenerationParams::ToolChoice::kNone);
}

TEST(OpenAiCodec, ReadsChatMessagesAndItsLogprobForm) {
  GenerationParams p;
  ASSERT_FALSE(Parse(R"({"messages":[{"role":"developer","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
      "logprobs":true,"top_logprobs":4,"max_completion_tokens":9})",
                     Endpoint::kChat, &p));
  ASSERT_EQ(p.messages.size(), 2u);
  EXPECT_EQ(p.messages[0].role, "system");
  EXPECT_EQ(p.messages[1].content, "ab");
  EXPECT_EQ(p.sampling.top_logprobs, 4);
  EXPECT_EQ(p.max_tokens, 9);
  EXPECT_EQ(ParseError(R"({"messages":[]})", Endpoint::kChat).param, "messages");
  EXPECT_EQ(ParseError(R"({"messages":[{"role":"wizard","content":"x"}]})", Endpoint::kChat).param,
            "messages[0].role");
  EXPECT_EQ(ParseError(R"({"messages":[{"role":"tool","content":"x"}]})", Endpoint::kChat).param,
            "messages[0].tool_call_id");
  EXPECT_EQ(ParseError(R"({"messages":[{"role":"user"}]})", Endpoint::kChat).param,
            "messages[0].content");
  EXPECT_EQ(ParseError(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
                       Endpoint::kChat)
                .param,
            "messages[0].content");
  EXPECT_EQ(ParseError(R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})",
                       Endpoint::kChat)
                .param,
            "top_logprobs");
}

TEST(OpenAiCodec, ErrorsHaveOpenAisShape) {
  ApiError e = BadRequest("bad", "temperature");
  const json j = json::parse(ErrorBody(e));
  EXPECT_EQ(j["error"]["message"], "bad");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_TRUE(j["error"]["code"].is_null());
}

TEST(OpenAiCodec, ResponsesChunksAndUsageHaveOpenAisShape) {
  ResponseHeader h{Endpoint::kChat, "chatcmpl-1", 7, "m"};
  ChoiceOut c;
  c.text = "hi";
  c.finish_reason = "stop";
  c.with_logprobs = true;
  c.logprobs.push_back({"hi", -0.5f, {{"hi", -0.5f}, {"ho", -1.5f}}});
  const json r = Response(h, {c}, UsageOut{10, 1, 0});
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "hi");
  EXPECT_EQ(r["choices"][0]["logprobs"]["content"][0]["top_logprobs"][1]["token"], "ho");
  EXPECT_EQ(r["choices"][0]["logprobs"]["content"][0]["bytes"], json::array({104, 105}));
  EXPECT_EQ(r["usage"]["total_tokens"], 11);
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

  ChoiceOut first;
  const json chunk = Chunk(h, first, /*first=*/true, /*include_usage=*/true);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(chunk.contains("usage") && chunk["usage"].is_null());
  const json usage = UsageChunk(h, UsageOut{10, 1, 16});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 16);

  h.endpoint = Endpoint::kCompletions;
  const json text = Response(h, {c}, UsageOut{});
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "hi");
  EXPECT_EQ(text["choices"][0]["logprobs"]["top_logprobs"][0]["ho"], -1.5f);
  EXPECT_EQ(text["choices"][0]["logprobs"]["text_offset"][0], 0);
}

TEST(OpenAiCodec, ReadsReasoningEffortOfChat) {
  GenerationParams p;
  ASSERT_FALSE(Parse(R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":"high"})",
                     Endpoint::kChat, &p));
  EXPECT_EQ(p.reasoning_effort, "high");
  GenerationParams absent;
  ASSERT_FALSE(Parse(R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":null})",
                     Endpoint::kChat, &absent));
  EXPECT_EQ(absent.reasoning_effort, "");
  const ApiError e =
      ParseError(R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":"minimal"})",
                 Endpoint::kChat);
  EXPECT_EQ(e.param, "reasoning_effort");
  EXPECT_NE(e.message.find("low, medium or high"), std::string::npos) << e.message;
  EXPECT_EQ(ParseError(R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":1})",
                       Endpoint::kChat)
                .param,
            "reasoning_effort");
}

TEST(OpenAiCodec, ReasoningGoesToReasoningContentOnlyWhenThereIsSome) {
  const ResponseHeader h{Endpoint::kChat, "chatcmpl-1", 7, "m"};
  ChoiceOut c;
  c.text = "4";
  c.reasoning = "2+2 is 4.";
  c.finish_reason = "stop";
  const json r = Response(h, {c}, UsageOut{});
  EXPECT_EQ(r["choices"][0]["message"]["content"], "4");
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "2+2 is 4.");
  ChoiceOut delta;
  delta.reasoning = "2+2";
  const json chunk = Chunk(h, delta, /*first=*/false, /*include_usage=*/false);
  EXPECT_EQ(chunk["choices"][0]["delta"], json({{"reasoning_content", "2+2"}}));

  c.reasoning.clear();
  EXPECT_FALSE(Response(h, {c}, UsageOut{})["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_FALSE(Chunk(h, c, false, false)["choices"][0]["delta"].contains("reasoning_content"));
}

TEST(OpenAiCodec, InvalidUtf8InOutputIsReplacedNotThrown) {
  const std::string s = Dump(json{{"t", std::string("a\xff")}});
  EXPECT_EQ(s, "{\"t\":\"a\xef\xbf\xbd\"}");
}

}  // namespace
}  // namespace kvserve
