#include "server/tool_calls.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "server/engine_bridge.h"

namespace kvserve {
namespace {

using ordered_json = nlohmann::ordered_json;

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kSpace = " \t\n\r";

bool Known(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// {"name": N, <args_key>: {...}} → a call; nullopt when malformed or N is not a tool.
std::optional<ToolCallOut> CallFromJson(std::string_view text,
                                        std::initializer_list<const char*> args_keys,
                                        const std::vector<std::string>& names) {
  const ordered_json j = ordered_json::parse(text, nullptr, false);  // whitespace around is fine
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || !Known(names, name->get<std::string>())) {
    return std::nullopt;
  }
  for (const char* key : args_keys) {
    auto args = j.find(key);
    if (args == j.end() || !args->is_object()) continue;
    ToolCallOut call;
    call.name = name->get<std::string>();
    call.arguments = args->dump(-1, ' ', false, ordered_json::error_handler_t::replace);
    return call;
  }
  return std::nullopt;
}

}  // namespace

std::optional<ParsedToolCalls> ParseToolCallText(ToolFormat format, std::string_view text,
                                                 const std::vector<std::string>& tool_names) {
  ParsedToolCalls out;
  if (format == ToolFormat::kLlama3Json) {
    std::optional<ToolCallOut> call = CallFromJson(text, {"parameters", "arguments"}, tool_names);
    if (!call) return std::nullopt;
    out.calls.push_back(std::move(*call));
    return out;
  }
  if (format != ToolFormat::kHermes) return std::nullopt;
  size_t at = text.find(kOpen);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view before = text.substr(0, at);
  const size_t keep = before.find_last_not_of(kSpace);
  out.content = keep == std::string_view::npos ? std::string() : std::string(before.substr(0, keep + 1));
  while (at != std::string_view::npos) {
    const size_t body = at + kOpen.size();
    const size_t close = text.find(kClose, body);
    if (close == std::string_view::npos) return std::nullopt;
    std::optional<ToolCallOut> call =
        CallFromJson(text.substr(body, close - body), {"arguments", "parameters"}, tool_names);
    if (!call) return std::nullopt;
    call->index = static_cast<int>(out.calls.size());
    out.calls.push_back(std::move(*call));
    const std::string_view rest = text.substr(close + kClose.size());
    const size_t next = rest.find_first_not_of(kSpace);
    if (next == std::string_view::npos) break;
    if (!rest.substr(next).starts_with(kOpen)) return std::nullopt;
    at = close + kClose.size() + next;
  }
  return out;
}

ToolCallStream::ToolCallStream(ToolFormat format, std::vector<std::string> tool_names)
    : format_(format), names_(std::move(tool_names)) {}

std::string ToolCallStream::Push(std::string_view text) {
  all_ += text;
  size_t safe = all_.size();
  if (format_ == ToolFormat::kLlama3Json) {
    // The call is the whole turn: hold everything while the turn may still be one.
    const size_t first = all_.find_first_not_of(kSpace);
    if (first == std::string::npos || all_[first] == '{') safe = emitted_;
  } else if (format_ == ToolFormat::kHermes) {
    const size_t open = all_.find(kOpen, emitted_);
    if (open != std::string::npos) {
      safe = open;
    } else {
      // A partial "<tool_call>" at the end.
      for (size_t k = std::min(kOpen.size() - 1, all_.size()); k > 0; --k) {
        if (std::string_view(all_).substr(all_.size() - k) == kOpen.substr(0, k)) {
          safe = all_.size() - k;
          break;
        }
      }
    }
    // Whitespace right before a call is dropped with it, so it waits too.
    while (safe > emitted_ && kSpace.find(all_[safe - 1]) != std::string_view::npos) --safe;
  }
  safe = std::max(safe, emitted_);
  std::string out = all_.substr(emitted_, safe - emitted_);
  emitted_ = safe;
  return out;
}

ParsedToolCalls ToolCallStream::Finish() {
  ParsedToolCalls result;
  std::optional<ParsedToolCalls> parsed = ParseToolCallText(format_, all_, names_);
  if (!parsed || parsed->content.size() < emitted_) {
    result.content = all_.substr(emitted_);
    emitted_ = all_.size();
    return result;
  }
  result.content = parsed->content.substr(emitted_);
  result.calls = std::move(parsed->calls);
  for (ToolCallOut& call : result.calls) call.id = NewResponseId("call_");
  emitted_ = all_.size();
  return result;
}

}  // namespace kvserve
