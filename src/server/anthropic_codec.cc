// The Messages API's input: request bodies into GenerationParams (anthropic_codec.h).
#include "server/anthropic_codec.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <span>
#include <string_view>

namespace kvserve {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

ApiError WrongType(const std::string& param, std::string_view want, const json& got) {
  return BadRequest(fmt::format("'{}' must be {}, not {}", param, want, got.type_name()), param);
}

// The member `key` of an object, or nullptr when absent or null.
const json* Find(const json& object, const char* key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

std::optional<ApiError> ReadInt(const json& v, const std::string& param, int64_t lo, int64_t hi,
                                int64_t* out) {
  int64_t i = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}) {
      return BadRequest(fmt::format("'{}' is out of range", param), param);
    }
    i = v.get<int64_t>();
  } else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
             std::fabs(v.get<double>()) < 9e15) {
    i = static_cast<int64_t>(v.get<double>());
  } else {
    return WrongType(param, "an integer", v);
  }
  if (i < lo || i > hi) {
    return BadRequest(fmt::format("'{}' is {}; it must be in [{}, {}]", param, i, lo, hi), param);
  }
  *out = i;
  return std::nullopt;
}

std::optional<ApiError> ReadNumber(const json& v, const std::string& param, double lo, double hi,
                                   bool lo_open, std::string_view range, float* out) {
  if (!v.is_number()) return WrongType(param, "a number", v);
  const double d = v.get<double>();
  const auto f = static_cast<float>(d);
  if (!(lo_open ? d > lo && f > static_cast<float>(lo) : d >= lo) || !(d <= hi)) {
    return BadRequest(fmt::format("'{}' is {}; it must be in {}", param, d, range), param);
  }
  *out = f;
  return std::nullopt;
}

// A cache_control breakpoint, where it sits in the prompt.
struct Breakpoint {
  enum class At { kTool, kSystem, kMessage };
  At at = At::kMessage;
  size_t count = 0;  // kSystem: system blocks up to it; kMessage: conversation blocks up to it
  int64_t ttl_seconds = 300;
  std::string param;  // the cache_control's path
};

// Reads `where`.cache_control when present: {"type": "ephemeral", "ttl"?: "5m" | "1h"}.
std::optional<ApiError> ReadCacheControl(const json& block, const std::string& where, Breakpoint bp,
                                         std::vector<Breakpoint>* out) {
  const json* cc = block.is_object() ? Find(block, "cache_control") : nullptr;
  if (cc == nullptr) return std::nullopt;
  bp.param = where.empty() ? "cache_control" : where + ".cache_control";
  if (!cc->is_object()) return WrongType(bp.param, "an object", *cc);
  const json* type = Find(*cc, "type");
  if (type == nullptr || *type != "ephemeral") {
    return BadRequest(fmt::format("'{}.type' must be 'ephemeral', the only cache type", bp.param),
                      bp.param + ".type");
  }
  if (const json* ttl = Find(*cc, "ttl")) {
    if (*ttl == "5m") {
      bp.ttl_seconds = 300;
    } else if (*ttl == "1h") {
      bp.ttl_seconds = 3600;
    } else {
      return BadRequest(
          fmt::format("'{}.ttl' is {}; it must be '5m' or '1h'", bp.param, Dump(*ttl)),
          bp.param + ".ttl");
    }
  }
  out->push_back(std::move(bp));
  return std::nullopt;
}

// One content block of the conversation, in prompt order.
struct Block {
  enum class Kind { kText, kToolUse, kToolResult };
  bool assistant = false;
  Kind kind = Kind::kText;
  std::string text;         // kText; kToolResult: the result's text
  ToolCall call;            // kToolUse
  std::string tool_use_id;  // kToolResult
};

std::string JoinLines(const std::vector<std::string>& lines) {
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    out += lines[i];
  }
  return out;
}

// The ChatMessages of the conversation made of `blocks` (see the header's mapping).
std::vector<ChatMessage> ToChat(const std::optional<ChatMessage>& system,
                                std::span<const Block> blocks) {
  std::vector<ChatMessage> out;
  if (system) out.push_back(*system);
  for (size_t begin = 0; begin < blocks.size();) {
    const bool assistant = blocks[begin].assistant;
    size_t end = begin;
    while (end < blocks.size() && blocks[end].assistant == assistant) ++end;
    ChatMessage turn;
    turn.role = assistant ? "assistant" : "user";
    std::vector<std::string> texts;
    for (const Block& b : blocks.subspan(begin, end - begin)) {
      switch (b.kind) {
        case Block::Kind::kText:
          texts.push_back(b.text);
          break;
        case Block::Kind::kToolUse:
          turn.tool_calls.push_back(b.call);
          break;
        case Block::Kind::kToolResult:
          out.push_back(ChatMessage{"tool", b.text, {}, b.tool_use_id});
          break;
      }
    }
    turn.content = JoinLines(texts);
    if (assistant || !texts.empty()) out.push_back(std::move(turn));
    begin = end;
  }
  return out;
}

// A tool_result's content: a string, or text blocks joined with "\n". A cache_control on one of
// those blocks is a breakpoint on the tool_result itself (at `bp`).
std::optional<ApiError> ReadToolResultContent(const json& content, const std::string& where,
                                              const Breakpoint& bp, std::string* text,
                                              std::vector<Breakpoint>* breakpoints) {
  if (content.is_string()) {
    *text = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return WrongType(where, "a string or an array of text blocks", content);
  std::vector<std::string> texts;
  for (size_t k = 0; k < content.size(); ++k) {
    const json& block = content[k];
    const std::string at = fmt::format("{}[{}]", where, k);
    if (!block.is_object()) return WrongType(at, "an object", block);
    const json* type = Find(block, "type");
    if (type == nullptr || *type != "text") {
      return BadRequest(fmt::format("'{}.type' is {}; a tool result holds text blocks only", at,
                                    type ? Dump(*type) : "missing"),
                        at + ".type");
    }
    const json* t = Find(block, "text");
    if (t == nullptr || !t->is_string()) {
      return BadRequest(fmt::format("'{}.text' must be a string", at), at + ".text");
    }
    texts.push_back(t->get<std::string>());
    if (auto e = ReadCacheControl(block, at, bp, breakpoints)) return e;
  }
  *text = JoinLines(texts);
  return std::nullopt;
}

// One block of messages[i].content (at `where`), appended to *blocks.
std::optional<ApiError> ReadBlock(const json& block, const std::string& where, bool assistant,
                                  std::vector<Block>* blocks,
                                  std::vector<Breakpoint>* breakpoints) {
  if (!block.is_object()) return WrongType(where, "a content block object", block);
  const json* type = Find(block, "type");
  if (type == nullptr || !type->is_string()) {
    return BadRequest(fmt::format("'{}.type' must be a string", where), where + ".type");
  }
  const std::string kind = type->get<std::string>();
  Block b;
  b.assistant = assistant;
  if (kind == "text") {
    const json* text = Find(block, "text");
    if (text == nullptr || !text->is_string()) {
      return BadRequest(fmt::format("'{}.text' must be a string", where), where + ".text");
    }
    b.text = text->get<std::string>();
  } else if (kind == "tool_use" && assistant) {
    b.kind = Block::Kind::kToolUse;
    const json* id = Find(block, "id");
    const json* name = Find(block, "name");
    const json* input = Find(block, "input");
    if (id == nullptr || !id->is_string() || id->get<std::string>().empty()) {
      return BadRequest(fmt::format("'{}.id' must be a non-empty string", where), where + ".id");
    }
    if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
      return BadRequest(fmt::format("'{}.name' must be a non-empty string", where),
                        where + ".name");
    }
    if (input == nullptr || !input->is_object()) {
      return BadRequest(fmt::format("'{}.input' must be an object", where), where + ".input");
    }
    b.call = ToolCall{id->get<std::string>(), name->get<std::string>(), input->dump()};
  } else if (kind == "tool_result" && !assistant) {
    b.kind = Block::Kind::kToolResult;
    const json* id = Find(block, "tool_use_id");
    if (id == nullptr || !id->is_string()) {
      return BadRequest(fmt::format("'{}.tool_use_id' must be a string", where),
                        where + ".tool_use_id");
    }
    b.tool_use_id = id->get<std::string>();
    if (const json* is_error = Find(block, "is_error"); is_error && !is_error->is_boolean()) {
      return WrongType(where + ".is_error", "a boolean", *is_error);
    }
    Breakpoint here;
    here.count = blocks->size() + 1;
    if (const json* content = Find(block, "content")) {
      if (auto e =
              ReadToolResultContent(*content, where + ".content", here, &b.text, breakpoints)) {
        return e;
      }
    }
  } else if (kind == "tool_use" || kind == "tool_result") {
    return BadRequest(fmt::format("'{}.type' is '{}', which only {} messages may hold", where, kind,
                                  assistant ? "user" : "assistant"),
                      where + ".type");
  } else {
    return BadRequest(fmt::format("'{}.type' is '{}'; kvserve reads text, tool_use (assistant) "
                                  "and tool_result (user) blocks only",
                                  where, kind),
                      where + ".type");
  }
  blocks->push_back(std::move(b));
  Breakpoint here;
  here.count = blocks->size();
  return ReadCacheControl(block, where, here, breakpoints);
}

std::optional<ApiError> ReadConversation(const json& messages, std::vector<Block>* blocks,
                                         std::vector<Breakpoint>* breakpoints) {
  if (!messages.is_array()) return WrongType("messages", "an array", messages);
  if (messages.empty()) return BadRequest("'messages' must not be empty", "messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) return WrongType(where, "an object", m);
    const json* role = Find(m, "role");
    if (role == nullptr || (*role != "user" && *role != "assistant")) {
      return BadRequest(fmt::format("'{}.role' is {}; it must be 'user' or 'assistant' (the "
                                    "system prompt goes in 'system')",
                                    where, role ? Dump(*role) : "missing"),
                        where + ".role");
    }
    const bool assistant = *role == "assistant";
    if (assistant && i == 0) {
      return BadRequest(fmt::format("'{}.role': the first message must be the user's", where),
                        where + ".role");
    }
    if (assistant && i + 1 == messages.size()) {
      return BadRequest(fmt::format("'{}.role': a final assistant message (a prefill to "
                                    "continue) is not supported; end with a user message",
                                    where),
                        where + ".role");
    }
    const json* content = Find(m, "content");
    const std::string at = where + ".content";
    if (content == nullptr) return BadRequest(fmt::format("'{}' is required", at), at);
    if (content->is_string()) {
      Block b;
      b.assistant = assistant;
      b.text = content->get<std::string>();
      blocks->push_back(std::move(b));
      continue;
    }
    if (!content->is_array()) {
      return WrongType(at, "a string or an array of content blocks", *content);
    }
    if (content->empty()) return BadRequest(fmt::format("'{}' must not be empty", at), at);
    for (size_t j = 0; j < content->size(); ++j) {
      if (auto e = ReadBlock((*content)[j], fmt::format("{}[{}]", at, j), assistant, blocks,
                             breakpoints)) {
        return e;
      }
    }
  }
  return std::nullopt;
}

// `system`: a string or text blocks. *texts gets one entry per block.
std::optional<ApiError> ReadSystem(const json& system, std::vector<std::string>* texts,
                                   std::vector<Breakpoint>* breakpoints) {
  if (system.is_string()) {
    if (!system.get<std::string>().empty()) texts->push_back(system.get<std::string>());
    return std::nullopt;
  }
  if (!system.is_array()) return WrongType("system", "a string or an array of text blocks", system);
  for (size_t k = 0; k < system.size(); ++k) {
    const json& block = system[k];
    const std::string at = fmt::format("system[{}]", k);
    if (!block.is_object()) return WrongType(at, "an object", block);
    const json* type = Find(block, "type");
    if (type == nullptr || *type != "text") {
      return BadRequest(fmt::format("'{}.type' is {}; the system prompt holds text blocks only", at,
                                    type ? Dump(*type) : "missing"),
                        at + ".type");
    }
    const json* text = Find(block, "text");
    if (text == nullptr || !text->is_string()) {
      return BadRequest(fmt::format("'{}.text' must be a string", at), at + ".text");
    }
    texts->push_back(text->get<std::string>());
    Breakpoint bp;
    bp.at = Breakpoint::At::kSystem;
    bp.count = texts->size();
    if (auto e = ReadCacheControl(block, at, bp, breakpoints)) return e;
  }
  return std::nullopt;
}

// Client tools {name, description?, input_schema, cache_control?}, as OpenAI-shaped function
// tools and their ToolSpecs.
std::optional<ApiError> ReadTools(const json& tools, GenerationParams* p,
                                  std::vector<Breakpoint>* breakpoints) {
  if (!tools.is_array()) return WrongType("tools", "an array", tools);
  if (tools.size() > 128) return BadRequest("'tools' may list at most 128 tools", "tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string at = fmt::format("tools[{}]", i);
    if (!t.is_object()) return WrongType(at, "an object", t);
    if (const json* type = Find(t, "type"); type && *type != "custom") {
      return BadRequest(fmt::format("'{}.type' is {}; kvserve runs no server tools, only client "
                                    "tools (no type, or 'custom')",
                                    at, Dump(*type)),
                        at + ".type");
    }
    if (Find(t, "input_schema") == nullptr) {
      return BadRequest(fmt::format("'{}.input_schema' is required", at), at + ".input_schema");
    }
    if (auto e = AddToolSpec(t, at, "input_schema", p)) return e;
    ordered_json fn = {{"name", p->tool_specs.back().name}};
    if (const json* d = Find(t, "description")) fn["description"] = d->get<std::string>();
    fn["parameters"] = ordered_json::parse(p->tool_specs.back().parameters);
    p->tools.push_back(ordered_json{{"type", "function"}, {"function", std::move(fn)}});
    Breakpoint bp;
    bp.at = Breakpoint::At::kTool;
    if (auto e = ReadCacheControl(t, at, bp, breakpoints)) return e;
  }
  if (!p->tools.empty()) p->tool_choice = GenerationParams::ToolChoice::kAuto;
  return std::nullopt;
}

// {type: auto | any | tool | none, name (tool), disable_parallel_tool_use?}.
std::optional<ApiError> ReadToolChoice(const json& choice, GenerationParams* p) {
  using TC = GenerationParams::ToolChoice;
  if (!choice.is_object()) return WrongType("tool_choice", "an object", choice);
  const json* type = Find(choice, "type");
  const std::string t = type && type->is_string() ? type->get<std::string>() : "";
  if (t == "none" || (t == "auto" && p->tools.empty())) {
    p->tool_choice = TC::kNone;
  } else if (t == "auto" || t == "any" || t == "tool") {
    if (p->tools.empty()) {
      return BadRequest(fmt::format("'tool_choice.type' is '{}' but no 'tools' are given", t),
                        "tool_choice.type");
    }
    p->tool_choice = t == "auto" ? TC::kAuto : t == "any" ? TC::kRequired : TC::kNamed;
  } else {
    return BadRequest(fmt::format("'tool_choice.type' is {}; it must be auto, any, tool or none",
                                  type ? Dump(*type) : "missing"),
                      "tool_choice.type");
  }
  if (t == "tool") {
    const json* name = Find(choice, "name");
    bool known = false;
    for (const structured::ToolSpec& s : p->tool_specs) known |= name && *name == s.name;
    if (!known) {
      return BadRequest(fmt::format("'tool_choice.name' is {}, which is not in 'tools'",
                                    name ? Dump(*name) : "missing"),
                        "tool_choice.name");
    }
    p->tool_choice_name = name->get<std::string>();
  }
  if (const json* d = Find(choice, "disable_parallel_tool_use")) {
    if (!d->is_boolean())
      return WrongType("tool_choice.disable_parallel_tool_use", "a boolean", *d);
    p->parallel_tool_calls = !d->get<bool>();
  }
  return std::nullopt;
}

std::optional<ApiError> ReadSampling(const json& body, GenerationParams* p) {
  SamplingParams& s = p->sampling;
  if (const json* v = Find(body, "temperature")) {
    if (auto e = ReadNumber(*v, "temperature", 0, 1, false, "[0, 1]", &s.temperature)) return e;
  }
  if (const json* v = Find(body, "top_p")) {
    if (auto e = ReadNumber(*v, "top_p", 0, 1, true, "(0, 1]", &s.top_p)) return e;
  }
  if (const json* v = Find(body, "top_k")) {
    int64_t k = 0;
    if (auto e = ReadInt(*v, "top_k", 0, std::numeric_limits<int32_t>::max(), &k)) return e;
    s.top_k = static_cast<int32_t>(k);
  }
  if (const json* v = Find(body, "stop_sequences")) {
    if (!v->is_array()) return WrongType("stop_sequences", "an array of strings", *v);
    if (v->size() > kMaxStopSequences) {
      return BadRequest(
          fmt::format("'stop_sequences' may hold at most {} strings", kMaxStopSequences),
          "stop_sequences");
    }
    for (const json& stop : *v) {
      if (!stop.is_string() || stop.get<std::string>().empty()) {
        return BadRequest("'stop_sequences' must hold non-empty strings", "stop_sequences");
      }
      p->stop.push_back(stop.get<std::string>());
    }
  }
  return std::nullopt;
}

// Fields of the Messages API that kvserve cannot honour are refused, not ignored.
std::optional<ApiError> RefuseUnsupported(const json& body) {
  if (const json* thinking = Find(body, "thinking")) {
    if (!thinking->is_object() || Find(*thinking, "type") == nullptr ||
        *Find(*thinking, "type") != "disabled") {
      return BadRequest(
          "'thinking': extended thinking is not supported; leave it out or send "
          "{\"type\": \"disabled\"}",
          "thinking");
    }
  }
  if (const json* servers = Find(body, "mcp_servers");
      servers && !(servers->is_array() && servers->empty())) {
    return BadRequest("'mcp_servers' is not supported", "mcp_servers");
  }
  if (Find(body, "container") != nullptr) {
    return BadRequest("'container' is not supported", "container");
  }
  if (Find(body, "output_format") != nullptr) {
    return BadRequest("'output_format' is not supported", "output_format");
  }
  if (const json* oc = Find(body, "output_config"); oc && oc->is_object() && Find(*oc, "format")) {
    return BadRequest("'output_config.format' is not supported", "output_config.format");
  }
  return std::nullopt;
}

// At most kMaxCacheBreakpoints, and a 1h one never after a 5m one (in the order tools, system,
// messages), as Anthropic requires.
std::optional<ApiError> CheckBreakpoints(const std::vector<Breakpoint>& breakpoints) {
  if (breakpoints.size() > kMaxCacheBreakpoints) {
    return BadRequest(fmt::format("A maximum of {} blocks with cache_control may be provided. "
                                  "Found {}.",
                                  kMaxCacheBreakpoints, breakpoints.size()),
                      breakpoints[kMaxCacheBreakpoints].param);
  }
  bool after_5m = false;
  for (const Breakpoint& bp : breakpoints) {
    if (bp.ttl_seconds > 300 && after_5m) {
      return BadRequest(fmt::format("'{}.ttl': a ttl='1h' cache_control block must not come "
                                    "after a ttl='5m' cache_control block (blocks are taken in "
                                    "the order tools, system, messages)",
                                    bp.param),
                        bp.param + ".ttl");
    }
    after_5m |= bp.ttl_seconds <= 300;
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseMessagesRequest(const json& body, GenerationParams* out) {
  if (!body.is_object()) return BadRequest("the request body must be a JSON object");
  GenerationParams& p = *out;
  p.endpoint = Endpoint::kChat;
  const json* model = Find(body, "model");
  if (model == nullptr) return BadRequest("'model' is required", "model");
  if (!model->is_string()) return WrongType("model", "a string", *model);
  p.model = model->get<std::string>();
  const json* max_tokens = Find(body, "max_tokens");
  if (max_tokens == nullptr) return BadRequest("'max_tokens' is required", "max_tokens");
  int64_t n = 0;
  if (auto e = ReadInt(*max_tokens, "max_tokens", 1, std::numeric_limits<int32_t>::max(), &n)) {
    return e;
  }
  p.max_tokens = static_cast<int>(n);

  // Prompt order: tools, system, messages (the order breakpoints are counted in).
  std::vector<Breakpoint> breakpoints;
  if (const json* tools = Find(body, "tools")) {
    if (auto e = ReadTools(*tools, &p, &breakpoints)) return e;
  }
  std::vector<std::string> system_texts;
  if (const json* system = Find(body, "system")) {
    if (auto e = ReadSystem(*system, &system_texts, &breakpoints)) return e;
  }
  const json* messages = Find(body, "messages");
  if (messages == nullptr) return BadRequest("'messages' is required", "messages");
  std::vector<Block> blocks;
  if (auto e = ReadConversation(*messages, &blocks, &breakpoints)) return e;
  // The top-level cache_control marks the last block, unless that block carries its own.
  const bool last_marked = !breakpoints.empty() &&
                           breakpoints.back().at == Breakpoint::At::kMessage &&
                           breakpoints.back().count == blocks.size();
  std::vector<Breakpoint> top;
  Breakpoint last;
  last.count = blocks.size();
  if (auto e = ReadCacheControl(body, "", last, &top)) return e;
  if (!top.empty() && !last_marked) breakpoints.push_back(top.front());
  if (auto e = CheckBreakpoints(breakpoints)) return e;

  if (auto e = ReadSampling(body, &p)) return e;
  if (const json* stream = Find(body, "stream")) {
    if (!stream->is_boolean()) return WrongType("stream", "a boolean", *stream);
    p.stream = stream->get<bool>();
  }
  if (const json* metadata = Find(body, "metadata"); metadata && !metadata->is_object()) {
    return WrongType("metadata", "an object", *metadata);
  }
  if (const json* choice = Find(body, "tool_choice")) {
    if (auto e = ReadToolChoice(*choice, &p)) return e;
  }
  if (auto e = RefuseUnsupported(body)) return e;

  std::optional<ChatMessage> system;
  if (!system_texts.empty()) system = ChatMessage{"system", JoinLines(system_texts), {}, {}};
  p.messages = ToChat(system, blocks);
  for (const Breakpoint& bp : breakpoints) {
    GenerationParams::PrefixHold hold;
    hold.ttl_seconds = bp.ttl_seconds;
    switch (bp.at) {
      case Breakpoint::At::kTool:
        hold.tools_only = true;
        break;
      case Breakpoint::At::kSystem:
        hold.messages.push_back(
            ChatMessage{"system",
                        JoinLines(std::vector<std::string>(
                            system_texts.begin(),
                            system_texts.begin() + static_cast<std::ptrdiff_t>(bp.count))),
                        {},
                        {}});
        break;
      case Breakpoint::At::kMessage:
        hold.messages = ToChat(system, std::span<const Block>(blocks).first(bp.count));
        break;
    }
    p.prefix_holds.push_back(std::move(hold));
  }
  return std::nullopt;
}

void KeepMessagesClientOrder(const std::string& body_text, GenerationParams* p) {
  size_t num_calls = 0;
  for (const ChatMessage& m : p->messages) num_calls += m.tool_calls.size();
  if (p->tools.empty() && num_calls == 0) return;
  const ordered_json body = ordered_json::parse(body_text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return;
  if (auto tools = body.find("tools");
      tools != body.end() && tools->is_array() && tools->size() == p->tools.size()) {
    for (size_t i = 0; i < p->tools.size(); ++i) {
      const ordered_json& t = (*tools)[i];
      auto schema = t.is_object() ? t.find("input_schema") : t.end();
      if (schema == t.end() || !schema->is_object()) continue;
      p->tools[i]["function"]["parameters"] = *schema;
      p->tool_specs[i].parameters = schema->dump();
    }
  }
  // The tool_use inputs in block order, which is the order of the calls in p->messages and in
  // each hold's messages (a prefix of the same conversion).
  std::vector<std::string> inputs;
  if (auto messages = body.find("messages"); messages != body.end() && messages->is_array()) {
    for (const ordered_json& m : *messages) {
      auto content = m.is_object() ? m.find("content") : m.end();
      if (content == m.end() || !content->is_array()) continue;
      for (const ordered_json& b : *content) {
        auto type = b.is_object() ? b.find("type") : b.end();
        if (type != b.end() && *type == "tool_use" && b.contains("input")) {
          inputs.push_back(b["input"].dump());
        }
      }
    }
  }
  if (inputs.size() != num_calls) return;
  const auto reorder = [&inputs](std::vector<ChatMessage>* list) {
    size_t k = 0;
    for (ChatMessage& m : *list) {
      for (ToolCall& call : m.tool_calls) call.arguments = inputs[k++];
    }
  };
  reorder(&p->messages);
  for (GenerationParams::PrefixHold& hold : p->prefix_holds) reorder(&hold.messages);
}

}  // namespace kvserve
