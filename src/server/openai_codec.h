// OpenAI JSON codecs: parse and validate /v1/completions and /v1/chat/completions bodies into
// GenerationParams, and build responses, streaming chunks and errors in OpenAI's shapes.
//
// Contract: parsing never throws; a bad body yields an ApiError whose message and `param` name
// the offending field. Unknown fields are ignored; known fields with a wrong type or out of
// range are errors; null counts as absent. Building never throws either: text that is not
// valid UTF-8 (a token piece that splits a character) is written with U+FFFD in its place.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sample/sampling_params.h"
#include "sched/kv_eviction.h"
#include "structured/constraint.h"
#include "tokenizer/chat_template.h"
#include "util/strong_id.h"

namespace kvserve {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty = null
  std::string code;   // empty = null
};

ApiError BadRequest(std::string message, std::string param = {});
std::string ErrorBody(const ApiError& error);
// json.dump that replaces invalid UTF-8 instead of throwing.
std::string Dump(const nlohmann::json& j);

enum class Endpoint { kCompletions, kChat };

struct PromptInput {
  bool is_ids = false;
  std::string text;
  std::vector<int32_t> ids;
};

struct GenerationParams {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;                  // empty when absent
  std::vector<PromptInput> prompts;   // completions
  std::vector<ChatMessage> messages;  // chat
  // Chat: OpenAI's reasoning_effort, "low" | "medium" | "high"; empty when absent. Templates
  // that print one (harmony) take it; others ignore it.
  std::string reasoning_effort;
  std::optional<int> max_tokens;      // max_completion_tokens wins when both are given
  int n = 1;
  SamplingParams sampling;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  bool ignore_eos = false;
  int logprobs = -1;  // completions: top-N count, -1 = off; chat: 0 with logprobs on, -1 off
  int32_t priority = 0;
  std::string cache_salt;
  bool speculative = true;  // extension: false turns speculative decoding off for the request
  // Extension kv_eviction: "none" | "window" | "sinks", or {"policy", "budget", "sink_tokens",
  // "evict_batch"}; what is left out comes from the server's --kv-* flags.
  struct KvEvictionRequest {
    KvEvictionPolicy policy = KvEvictionPolicy::kNone;
    std::optional<int> budget, sink_tokens, evict_batch, snapkv_window, snapkv_kernel;
    std::optional<float> h2o_recent_fraction;
  };
  std::optional<KvEvictionRequest> kv_eviction;
  // Structured output from response_format, structured_outputs or guided_*; `constraint_param`
  // names the field it came from (for compile errors).
  std::optional<structured::ConstraintSpec> constraint;
  std::string constraint_param;
  // Function calling (chat): `tools` as the client sent them (each {"type": "function",
  // "function": {...}}; KeepToolOrder restores the client's key order), their names and
  // parameter schemas, tool_choice and parallel_tool_calls.
  enum class ToolChoice { kNone, kAuto, kRequired, kNamed };
  std::vector<nlohmann::ordered_json> tools;
  std::vector<structured::ToolSpec> tool_specs;
  ToolChoice tool_choice = ToolChoice::kNone;  // "auto" by default when tools are given
  std::string tool_choice_name;                // kNamed
  bool parallel_tool_calls = true;
  // Prompt caching. Each hold keeps the prompt's prefix up to a breakpoint cached until its TTL
  // runs out (a hit renews it): the prefix is the chat rendered from `messages` with the
  // request's tools and no generation prompt (`tools_only`: the tools alone), cut to the tokens
  // it shares with the whole prompt. Anthropic's cache_control breakpoints (at most 4) and
  // OpenAI's prompt_cache_retention: "24h" (the whole prompt) become holds.
  struct PrefixHold {
    std::vector<ChatMessage> messages;
    bool tools_only = false;
    int64_t ttl_seconds = 300;
    bool whole_prompt = false;  // the whole prompt (completions, prompt_cache_retention)
  };
  std::vector<PrefixHold> prefix_holds;
  std::string prompt_cache_key;  // OpenAI's prompt_cache_key: reported back
  bool retention_24h = false;    // prompt_cache_retention: "24h"
  std::string cached_content;    // an explicit cache (POST /v1/caches) whose prompt leads
  std::string tenant;            // set by the server: who sent it (API key), for explicit caches
};

// The server parses bodies into nlohmann::json, which sorts object keys; but a chat template
// prints tool definitions in the client's order, and JSON Schema properties are generated in
// the order the schema lists them. Re-reads `tools` and the JSON schema (response_format,
// structured_outputs.json, guided_json) from the raw body in the client's order, after
// ParseGenerationParams accepted them.
void KeepClientOrder(const std::string& body_text, GenerationParams* p);

// `body` must be a parsed JSON value; anything but an object is an error.
std::optional<ApiError> ParseGenerationParams(const nlohmann::json& body, Endpoint endpoint,
                                              GenerationParams* out);
// /tokenize's `tools` (and `tool_choice`), checked as chat checks them and kept in the
// client's order, so that a chat prompt with tools tokenizes as chat renders it.
std::optional<ApiError> ParseTokenizeTools(const nlohmann::json& body, const std::string& body_text,
                                           std::vector<nlohmann::ordered_json>* tools);
// reasoning_effort of a chat (or /tokenize) body into *out; left untouched when absent.
std::optional<ApiError> ParseReasoningEffort(const nlohmann::json& body, std::string* out);
// The messages array of chat (and /tokenize); `param` names it in errors.
std::optional<ApiError> ParseMessages(const nlohmann::json& messages,
                                      std::vector<ChatMessage>* out);

// Validates one function definition, `tool` being the object that holds its name,
// description and parameter schema under `params_key`, and appends its ToolSpec (an absent
// schema takes no arguments). `at` is its path for errors (names must be unique across
// p->tool_specs). Shared by the chat and Messages codecs so both constrain calls alike.
std::optional<ApiError> AddToolSpec(const nlohmann::json& tool, const std::string& at,
                                    const char* params_key, GenerationParams* p);

// One generated token's logprob report, with token ids already turned into text.
struct TokenLogprobOut {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

struct ToolCallOut {
  int index = 0;   // the call's place in the message (streamed deltas carry it)
  std::string id;  // "call_" + random hex
  std::string name;
  std::string arguments;  // JSON text
};

struct ChoiceOut {
  int index = 0;
  std::string text;
  // Chat with a template whose replies carry reasoning (harmony): the reasoning, sent as
  // message.reasoning_content / delta.reasoning_content (vLLM's and DeepSeek's name) when
  // not empty; `text` holds the answer.
  std::string reasoning;
  // Chat with tools: the calls parsed out of the text (which then holds only what came before
  // them; null content when that is empty).
  std::vector<ToolCallOut> tool_calls;
  std::string finish_reason;  // empty = null (still running)
  // With finish_reason "stop": the stop string that ended the choice, or "" when an
  // end-of-generation or stop token did; nullopt while the engine does not say which.
  std::optional<std::string> stop_sequence;
  bool with_logprobs = false;
  std::vector<TokenLogprobOut> logprobs;
  size_t text_offset = 0;  // where `text` starts in the choice's whole text (completions)
};

struct UsageOut {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  // prompt_tokens_details.cached_tokens_by_tier, present when lower KV tiers are configured:
  // (tier, tokens) with "ram" first.
  std::vector<std::pair<std::string, int64_t>> cached_tokens_by_tier;
  // Prompt caching with holds (PrefixHold): prompt tokens up to the last breakpoint that were
  // not cached (written to the cache now), split by the TTL of the breakpoint that covers them.
  int64_t cache_creation_tokens = 0;
  int64_t cache_creation_5m_tokens = 0;  // TTL <= 5 minutes
  int64_t cache_creation_1h_tokens = 0;  // longer TTLs
  std::string prompt_cache_key;          // echoed back when the request gave one
};

struct ResponseHeader {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;
  int64_t created = 0;
  std::string model;
};

nlohmann::json UsageJson(const UsageOut& usage);
nlohmann::json Response(const ResponseHeader& h, const std::vector<ChoiceOut>& choices,
                        const UsageOut& usage);
// A streaming chunk for one choice. For chat, `first` adds the assistant role to the delta and a
// choice with a finish_reason and no text gets an empty delta.
nlohmann::json Chunk(const ResponseHeader& h, const ChoiceOut& choice, bool first,
                     bool include_usage);
nlohmann::json UsageChunk(const ResponseHeader& h, const UsageOut& usage);

}  // namespace kvserve
