#include "router/request_info.h"

namespace kvserve::router {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

ApiRoute RouteOfPath(std::string_view path, bool* post) {
  *post = true;
  if (path == "/v1/completions") return ApiRoute::kCompletions;
  if (path == "/v1/chat/completions") return ApiRoute::kChat;
  if (path == "/v1/messages") return ApiRoute::kMessages;
  if (path == "/tokenize") return ApiRoute::kTokenize;
  if (path == "/detokenize") return ApiRoute::kDetokenize;
  *post = false;
  if (path == "/v1/models") return ApiRoute::kModels;
  if (path.rfind("/v1/models/", 0) == 0 && path.size() > 11) return ApiRoute::kModel;
  if (path == "/health") return ApiRoute::kHealth;
  if (path == "/metrics") return ApiRoute::kMetrics;
  return ApiRoute::kNone;
}

namespace {

std::string StringAt(const ojson& body, const char* key) {
  auto it = body.find(key);
  return it != body.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Anthropic content (a string, or blocks) as the text of its text blocks, joined by newlines as
// the replicas join them before the chat template.
std::string AnthropicText(const ojson& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (!content.is_array()) return out;
  bool first = true;
  for (const ojson& block : content) {
    if (!block.is_object() || StringAt(block, "type") != "text") continue;
    if (!first) out += "\n";
    out += StringAt(block, "text");
    first = false;
  }
  return out;
}

// Anthropic's system + messages as the OpenAI-style messages /tokenize reads. Exact for text
// conversations; tool blocks are left out, so a prompt with them matches a shorter prefix.
ojson AnthropicAsChat(const ojson& body) {
  ojson messages = ojson::array();
  if (auto it = body.find("system"); it != body.end() && !it->is_null()) {
    messages.push_back({{"role", "system"}, {"content", AnthropicText(*it)}});
  }
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array()) return ojson();
  for (const ojson& m : *it) {
    if (!m.is_object()) return ojson();
    messages.push_back(
        {{"role", StringAt(m, "role")},
         {"content", AnthropicText(m.contains("content") ? m["content"] : ojson())}});
  }
  return messages;
}

}  // namespace

RequestFacts InspectRequest(ApiRoute route, const ojson& body) {
  RequestFacts f;
  if (!body.is_object()) return f;
  f.cache_salt = StringAt(body, "cache_salt");
  if (route == ApiRoute::kMessages) {
    if (auto it = body.find("metadata"); it != body.end() && it->is_object()) {
      f.cache_key = StringAt(*it, "user_id");
    }
    ojson messages = AnthropicAsChat(body);
    if (!messages.is_null()) f.tokenize_body = {{"messages", std::move(messages)}};
    return f;
  }
  f.cache_key = StringAt(body, "prompt_cache_key");
  if (route == ApiRoute::kChat) {
    auto it = body.find("messages");
    if (it == body.end() || !it->is_array()) return f;
    f.tokenize_body = {{"messages", *it}};
    for (const char* key : {"tools", "add_generation_prompt"}) {
      if (auto k = body.find(key); k != body.end() && !k->is_null()) f.tokenize_body[key] = *k;
    }
    return f;
  }
  // Completions: a string, or the token ids themselves; a batch is scored by its first prompt.
  auto it = body.find("prompt");
  if (it == body.end()) return f;
  const ojson* prompt = &*it;
  if (prompt->is_array() && !prompt->empty() &&
      (prompt->front().is_array() || prompt->front().is_string())) {
    prompt = &prompt->front();
  }
  if (prompt->is_string()) {
    f.tokenize_body = {{"prompt", *prompt}};
  } else if (prompt->is_array()) {
    std::vector<int32_t> ids;
    ids.reserve(prompt->size());
    for (const ojson& t : *prompt) {
      if (!t.is_number_integer()) return f;
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    f.prompt_ids = std::move(ids);
  }
  return f;
}

std::optional<std::vector<int32_t>> TokensOf(std::string_view tokenize_response) {
  json j = json::parse(tokenize_response, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) return std::nullopt;
  std::vector<int32_t> ids;
  ids.reserve(j["tokens"].size());
  for (const json& t : j["tokens"]) {
    if (!t.is_number_integer()) return std::nullopt;
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

namespace {

int64_t IntAt(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

std::optional<ReportedUsage> FromUsage(const json& usage) {
  if (!usage.is_object()) return std::nullopt;
  ReportedUsage u;
  if (usage.contains("prompt_tokens")) {  // OpenAI
    u.prompt_tokens = IntAt(usage, "prompt_tokens");
    if (auto d = usage.find("prompt_tokens_details"); d != usage.end() && d->is_object()) {
      u.cached_tokens = IntAt(*d, "cached_tokens");
    }
    return u;
  }
  if (usage.contains("input_tokens")) {  // Anthropic: input_tokens leaves the cached ones out
    u.cached_tokens = IntAt(usage, "cache_read_input_tokens");
    u.prompt_tokens = IntAt(usage, "input_tokens") + u.cached_tokens +
                      IntAt(usage, "cache_creation_input_tokens");
    return u;
  }
  return std::nullopt;
}

}  // namespace

std::optional<ReportedUsage> UsageOfJson(const json& response) {
  if (!response.is_object()) return std::nullopt;
  if (auto it = response.find("usage"); it != response.end()) return FromUsage(*it);
  // Anthropic's message_start event: {"type": "message_start", "message": {..., "usage": ...}}.
  if (auto it = response.find("message"); it != response.end() && it->is_object()) {
    if (auto u = it->find("usage"); u != it->end()) return FromUsage(*u);
  }
  return std::nullopt;
}

namespace {
constexpr size_t kMaxLineBytes = size_t{1} << 20;
}  // namespace

void UsageScanner::Feed(std::string_view data) {
  size_t start = 0;
  for (size_t nl = data.find('\n'); nl != std::string_view::npos; nl = data.find('\n', start)) {
    if (partial_.empty()) {
      Line(data.substr(start, nl - start));
    } else {
      partial_.append(data.substr(start, nl - start));
      Line(partial_);
      partial_.clear();
    }
    start = nl + 1;
  }
  partial_.append(data.substr(start));
  if (partial_.size() > kMaxLineBytes) partial_.clear();  // no event of interest is this long
}

void UsageScanner::Line(std::string_view line) {
  if (line.rfind("data:", 0) != 0 || line.find("\"usage\"") == std::string_view::npos ||
      line.find("\"usage\":null") != std::string_view::npos) {
    return;
  }
  line.remove_prefix(5);
  const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  // Anthropic sends usage again in message_delta (output tokens only): the first report with the
  // prompt's numbers stands.
  if (std::optional<ReportedUsage> u = UsageOfJson(j); u && (!usage_ || u->prompt_tokens > 0)) {
    if (!usage_ || usage_->prompt_tokens == 0) usage_ = u;
  }
}

}  // namespace kvserve::router
