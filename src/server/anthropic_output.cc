// The Messages API's output: messages, stream events, usage and errors (anthropic_codec.h).
#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "server/anthropic_codec.h"

namespace kvserve {

using nlohmann::ordered_json;

namespace {

// A tool call's arguments as the tool_use input object ({} if they are not one, which the
// call grammar does not let happen).
ordered_json ToolInput(const std::string& arguments) {
  ordered_json input = ordered_json::parse(arguments, nullptr, false);
  return input.is_object() ? input : ordered_json::object();
}

ordered_json OptionalString(const std::optional<std::string>& s) {
  return s ? ordered_json(*s) : ordered_json(nullptr);
}

}  // namespace

const char* AnthropicErrorType(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

ordered_json AnthropicErrorJson(const ApiError& e) {
  return {{"type", "error"},
          {"error", {{"type", AnthropicErrorType(e.status)}, {"message", e.message}}}};
}

MessageStop StopOf(const ChoiceOut& c, const std::vector<std::string>& stop_sequences) {
  if (c.finish_reason == "length") return {"max_tokens", std::nullopt};
  if (c.finish_reason == "tool_calls") return {"tool_use", std::nullopt};
  if (c.finish_reason != "stop") return {"end_turn", std::nullopt};
  if (c.stop_sequence) {
    if (c.stop_sequence->empty()) return {"end_turn", std::nullopt};
    return {"stop_sequence", c.stop_sequence};
  }
  if (stop_sequences.empty()) return {"end_turn", std::nullopt};
  if (stop_sequences.size() == 1) return {"stop_sequence", stop_sequences.front()};
  return {"stop_sequence", std::nullopt};
}

ordered_json AnthropicUsageJson(const UsageOut& u) {
  const int64_t input =
      std::max<int64_t>(0, u.prompt_tokens - u.cached_tokens - u.cache_creation_tokens);
  return {{"input_tokens", input},
          {"cache_creation_input_tokens", u.cache_creation_tokens},
          {"cache_read_input_tokens", u.cached_tokens},
          {"cache_creation",
           {{"ephemeral_5m_input_tokens", u.cache_creation_5m_tokens},
            {"ephemeral_1h_input_tokens", u.cache_creation_1h_tokens}}},
          {"output_tokens", u.completion_tokens}};
}

std::string ToolUseId(const std::string& call_id) {
  constexpr std::string_view kCall = "call_";
  const std::string_view rest = std::string_view(call_id).starts_with(kCall)
                                    ? std::string_view(call_id).substr(kCall.size())
                                    : std::string_view(call_id);
  return "toolu_" + std::string(rest);
}

ordered_json MessageJson(const std::string& id, const std::string& model, const ChoiceOut& c,
                         const MessageStop& stop, const UsageOut& usage) {
  ordered_json content = ordered_json::array();
  if (!c.text.empty()) content.push_back({{"type", "text"}, {"text", c.text}});
  for (const ToolCallOut& call : c.tool_calls) {
    content.push_back({{"type", "tool_use"},
                       {"id", ToolUseId(call.id)},
                       {"name", call.name},
                       {"input", ToolInput(call.arguments)}});
  }
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model},
          {"content", std::move(content)},
          {"stop_reason", stop.reason},
          {"stop_sequence", OptionalString(stop.sequence)},
          {"usage", AnthropicUsageJson(usage)}};
}

std::string DumpOrdered(const ordered_json& j) {
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

std::string SseEvent(const ordered_json& event) {
  return fmt::format("event: {}\ndata: {}\n\n", event.value("type", "message"), DumpOrdered(event));
}

ordered_json PingEvent() { return {{"type", "ping"}}; }

MessageEventWriter::MessageEventWriter(std::string id, std::string model,
                                       std::vector<std::string> stop_sequences)
    : id_(std::move(id)), model_(std::move(model)), stop_sequences_(std::move(stop_sequences)) {}

std::string MessageEventWriter::Start(const UsageOut& usage) const {
  return SseEvent({{"type", "message_start"},
                   {"message",
                    {{"id", id_},
                     {"type", "message"},
                     {"role", "assistant"},
                     {"model", model_},
                     {"content", ordered_json::array()},
                     {"stop_reason", nullptr},
                     {"stop_sequence", nullptr},
                     {"usage", AnthropicUsageJson(usage)}}}});
}

std::string MessageEventWriter::CloseText() {
  if (open_text_ < 0) return {};
  const int index = open_text_;
  open_text_ = -1;
  return SseEvent({{"type", "content_block_stop"}, {"index", index}});
}

std::string MessageEventWriter::Update(const ChoiceOut& u) {
  std::string out;
  if (!u.text.empty()) {
    if (open_text_ < 0) {
      open_text_ = next_index_++;
      out += SseEvent({{"type", "content_block_start"},
                       {"index", open_text_},
                       {"content_block", {{"type", "text"}, {"text", ""}}}});
    }
    out += SseEvent({{"type", "content_block_delta"},
                     {"index", open_text_},
                     {"delta", {{"type", "text_delta"}, {"text", u.text}}}});
  }
  if (!u.tool_calls.empty()) out += CloseText();
  for (const ToolCallOut& call : u.tool_calls) {
    const int index = next_index_++;
    out += SseEvent({{"type", "content_block_start"},
                     {"index", index},
                     {"content_block",
                      {{"type", "tool_use"},
                       {"id", ToolUseId(call.id)},
                       {"name", call.name},
                       {"input", ordered_json::object()}}}});
    if (!call.arguments.empty()) {
      out +=
          SseEvent({{"type", "content_block_delta"},
                    {"index", index},
                    {"delta", {{"type", "input_json_delta"}, {"partial_json", call.arguments}}}});
    }
    out += SseEvent({{"type", "content_block_stop"}, {"index", index}});
  }
  if (!u.finish_reason.empty()) {
    finished_.finish_reason = u.finish_reason;
    finished_.stop_sequence = u.stop_sequence;
    out += CloseText();
  }
  return out;
}

std::string MessageEventWriter::Finish(const UsageOut& usage) {
  std::string out = CloseText();
  const MessageStop stop = StopOf(finished_, stop_sequences_);
  out += SseEvent(
      {{"type", "message_delta"},
       {"delta", {{"stop_reason", stop.reason}, {"stop_sequence", OptionalString(stop.sequence)}}},
       {"usage", AnthropicUsageJson(usage)}});
  out += SseEvent({{"type", "message_stop"}});
  return out;
}

}  // namespace kvserve
