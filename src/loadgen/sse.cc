#include "loadgen/sse.h"

#include <nlohmann/json.hpp>

namespace kvserve::loadgen {

using nlohmann::json;

void SseParser::Feed(std::string_view bytes, const EventFn& on_event) {
  pending_.append(bytes);
  size_t start = 0;
  while (true) {
    const size_t nl = pending_.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view line(pending_.data() + start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    Line(line, on_event);
    start = nl + 1;
  }
  pending_.erase(0, start);
}

void SseParser::Finish(const EventFn& on_event) {
  if (!pending_.empty()) {
    std::string line = std::move(pending_);
    pending_.clear();
    if (!line.empty() && line.back() == '\r') line.pop_back();
    Line(line, on_event);
  }
  Line("", on_event);
}

void SseParser::Line(std::string_view line, const EventFn& on_event) {
  if (line.empty()) {
    if (has_data_) on_event(data_);
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // comment
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  if (field != "data") return;
  std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (has_data_) data_ += '\n';
  data_.append(value);
  has_data_ = true;
}

namespace {

std::optional<int> IntAt(const json& obj, const char* key) {
  if (!obj.is_object()) return std::nullopt;
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) return std::nullopt;
  return it->get<int>();
}

void AppendString(const json& obj, const char* key, std::string& out) {
  if (!obj.is_object()) return;
  auto it = obj.find(key);
  if (it != obj.end() && it->is_string()) out += it->get_ref<const std::string&>();
}

}  // namespace

Result<StreamChunk> ParseStreamChunk(std::string_view data) {
  StreamChunk chunk;
  if (data == "[DONE]") {
    chunk.done = true;
    return chunk;
  }
  json j = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("stream chunk is not a JSON object: " +
                           std::string(data.substr(0, 200)));
  }
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    if (e->is_object() && e->contains("message") && (*e)["message"].is_string()) {
      chunk.error = (*e)["message"].get<std::string>();
    } else {
      chunk.error = e->dump();
    }
  }
  if (auto c = j.find("choices"); c != j.end() && c->is_array() && !c->empty()) {
    const json& choice = (*c)[0];
    AppendString(choice, "text", chunk.text);
    if (choice.is_object() && choice.contains("delta")) {
      AppendString(choice["delta"], "reasoning_content", chunk.text);
      AppendString(choice["delta"], "content", chunk.text);
    }
  } else {
    AppendString(j, "content", chunk.text);  // llama.cpp's native /completion
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    chunk.prompt_tokens = IntAt(*u, "prompt_tokens");
    chunk.completion_tokens = IntAt(*u, "completion_tokens");
    if (auto d = u->find("prompt_tokens_details"); d != u->end()) {
      chunk.cached_tokens = IntAt(*d, "cached_tokens");
    }
  }
  if (auto t = j.find("timings"); t != j.end() && t->is_object()) {
    const auto cache_n = IntAt(*t, "cache_n");
    const auto prompt_n = IntAt(*t, "prompt_n");
    const auto predicted_n = IntAt(*t, "predicted_n");
    if (!chunk.cached_tokens) chunk.cached_tokens = cache_n;
    if (!chunk.prompt_tokens && prompt_n) chunk.prompt_tokens = *prompt_n + cache_n.value_or(0);
    if (!chunk.completion_tokens) chunk.completion_tokens = predicted_n;
  }
  if (!chunk.cached_tokens) chunk.cached_tokens = IntAt(j, "tokens_cached");
  if (!chunk.completion_tokens) chunk.completion_tokens = IntAt(j, "tokens_predicted");
  return chunk;
}

}  // namespace kvserve::loadgen
