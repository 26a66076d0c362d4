// Anthropic Messages codec: parses and validates POST /v1/messages bodies into chat
// GenerationParams, and builds messages, streaming events, usage and errors in Anthropic's
// shapes.
//
// Contract: as openai_codec.h. Parsing never throws; a bad body yields an ApiError whose message
// names the offending field by its path (`messages[1].content[0].type`), which is also its
// `param`. Unknown fields are ignored, null counts as absent, and known fields that kvserve
// cannot honour (extended thinking, server tools, image blocks...) are refused rather than
// ignored. Building never throws: invalid UTF-8 in generated text becomes U+FFFD.
//
// How a conversation becomes ChatMessages (what the chat template renders):
// - `system` (a string, or text blocks joined with "\n") is a leading system message.
// - Consecutive messages of one role form one turn, as Anthropic merges them; a turn's text
//   blocks join with "\n" into one message.
// - A user turn's tool_result blocks become role "tool" messages (tool_call_id = tool_use_id),
//   in block order and before the user message that holds the turn's text; an assistant turn's
//   tool_use blocks become its tool_calls (arguments = the input object as JSON text).
//
// Prompt caching: each cache_control breakpoint (at most 4) becomes a GenerationParams::
// PrefixHold, in prompt order (tools, system, messages): a breakpoint on a tool holds the tools
// alone; on system block j, the system message of blocks 0..j; on block j of message i, the
// ChatMessages of the conversation cut after that block (the system message, the messages
// before i, and message i's blocks 0..j converted as above). A breakpoint inside a tool_result's
// content counts as one on the tool_result. The top-level `cache_control` is one on the last
// block of the last message.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/openai_codec.h"

namespace kvserve {

inline constexpr int kMaxCacheBreakpoints = 4;
inline constexpr int kMaxStopSequences = 16;

// `body` must be a parsed JSON value; anything but an object is an error. Sets endpoint kChat.
std::optional<ApiError> ParseMessagesRequest(const nlohmann::json& body, GenerationParams* out);

// nlohmann::json sorts object keys, but a chat template prints tool schemas and tool_use inputs
// in the client's order. Re-reads tools[i].input_schema and every tool_use block's input from
// the raw body in the client's order, after ParseMessagesRequest accepted it.
void KeepMessagesClientOrder(const std::string& body_text, GenerationParams* p);

// Anthropic's error type for an HTTP status: invalid_request_error, authentication_error,
// permission_error, not_found_error, request_too_large, rate_limit_error, overloaded_error,
// api_error.
const char* AnthropicErrorType(int status);
// {"type": "error", "error": {"type", "message"}}.
nlohmann::ordered_json AnthropicErrorJson(const ApiError& error);

// Why a message ended, in Anthropic's terms: stop_reason end_turn, max_tokens, stop_sequence or
// tool_use, and the stop sequence that matched (null when none, or not known).
struct MessageStop {
  std::string reason;
  std::optional<std::string> sequence;
};
// From a finished choice. finish_reason "stop" is end_turn, or stop_sequence when
// choice.stop_sequence names one; when the engine did not say (stop_sequence nullopt) and the
// request had `stop_sequences`, the stop is taken to be one of them (named when it was the
// only one).
MessageStop StopOf(const ChoiceOut& choice, const std::vector<std::string>& stop_sequences);

// {input_tokens, cache_creation_input_tokens, cache_read_input_tokens, cache_creation:
// {ephemeral_5m_input_tokens, ephemeral_1h_input_tokens}, output_tokens}: input_tokens are the
// prompt tokens neither read from nor written to the cache (never negative).
nlohmann::ordered_json AnthropicUsageJson(const UsageOut& usage);

// "toolu_" and the call id's random part.
std::string ToolUseId(const std::string& call_id);

// A non-streamed message: {id, type: "message", role, model, content: [text block if any text,
// then the tool_use blocks], stop_reason, stop_sequence, usage}.
nlohmann::ordered_json MessageJson(const std::string& id, const std::string& model,
                                   const ChoiceOut& choice, const MessageStop& stop,
                                   const UsageOut& usage);

// Dump() for the ordered values built here (Anthropic's key order is kept).
std::string DumpOrdered(const nlohmann::ordered_json& j);

// One server-sent event: "event: TYPE\ndata: JSON\n\n", TYPE being the event's "type".
std::string SseEvent(const nlohmann::ordered_json& event);
nlohmann::ordered_json PingEvent();

// Turns one generation's updates (a single choice) into the Messages stream: message_start,
// then per content block content_block_start, its deltas (text_delta; one input_json_delta
// holding a tool call's whole arguments) and content_block_stop, then message_delta (stop
// reason and the final usage) and message_stop. A text block opens with the first text and
// closes before a tool_use block or at the end. Used by one thread.
class MessageEventWriter {
 public:
  MessageEventWriter(std::string id, std::string model, std::vector<std::string> stop_sequences);

  // message_start: the message with empty content and the usage known so far.
  std::string Start(const UsageOut& usage) const;
  // The events of one update; an update with a finish_reason closes the open block.
  std::string Update(const ChoiceOut& update);
  // Closes what is open; message_delta with the stop reason and usage, and message_stop.
  std::string Finish(const UsageOut& usage);

  // The choice's finish_reason once an update carried it, else empty.
  const std::string& finish_reason() const { return finished_.finish_reason; }

 private:
  std::string CloseText();

  std::string id_;
  std::string model_;
  std::vector<std::string> stop_sequences_;
  int next_index_ = 0;
  int open_text_ = -1;  // index of the open text block, -1 when none
  ChoiceOut finished_;  // finish_reason and stop_sequence of the last update
};

}  // namespace kvserve
