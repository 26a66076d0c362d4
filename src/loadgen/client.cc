#include "loadgen/client.h"

#include <fmt/format.h>

#include "loadgen/sse.h"

namespace kvserve::loadgen {

using nlohmann::json;

namespace {

double Seconds(Clock::time_point t0, Clock::time_point t) {
  return std::chrono::duration<double>(t - t0).count();
}

std::string ErrorMessage(int status, const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("error")) {
    const json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string()) {
      return fmt::format("HTTP {}: {}", status, e["message"].get<std::string>());
    }
    if (e.is_string()) return fmt::format("HTTP {}: {}", status, e.get<std::string>());
  }
  return fmt::format("HTTP {}: {}", status, body.substr(0, 300));
}

}  // namespace

Result<ServerTarget> ParseBaseUrl(std::string_view url) {
  ServerTarget t;
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos ||
      (url.substr(0, scheme_end) != "http" && url.substr(0, scheme_end) != "https")) {
    return InvalidArgument(fmt::format("--base-url '{}' must start with http://", url));
  }
  const size_t path_start = url.find('/', scheme_end + 3);
  t.origin = std::string(url.substr(0, path_start));
  if (t.origin.size() == scheme_end + 3) {
    return InvalidArgument(fmt::format("--base-url '{}' has no host", url));
  }
  // The client's own check of the origin (https, the port), so that a bad URL stops the
  // benchmark here rather than failing every request.
  if (auto probe = http::Client::Create(t.origin); !probe.ok()) {
    return InvalidArgument(fmt::format("--base-url: {}", probe.status().message()));
  }
  std::string path = path_start == std::string_view::npos ? "" : std::string(url.substr(path_start));
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0) path.resize(path.size() - 3);
  t.path_prefix = path;
  return t;
}

ApiClient::ApiClient(const ServerTarget& target) : target_(target) {
  auto client = http::Client::Create(target.origin, {.timeout_s = target.timeout_s});
  if (client.ok()) {
    http_ = std::move(client).value();
  } else {
    create_error_ = client.status();
  }
}

ApiClient::~ApiClient() = default;

http::Headers ApiClient::BaseHeaders() const {
  http::Headers headers;
  if (!target_.api_key.empty()) headers.emplace_back("Authorization", "Bearer " + target_.api_key);
  return headers;
}

Result<http::ClientResponse> ApiClient::Call(std::string_view method, const std::string& path,
                                             std::string_view body) {
  if (!http_) return create_error_;
  http::Headers headers = BaseHeaders();
  if (!body.empty()) headers.emplace_back("Content-Type", "application/json");
  auto res = http_->Send(method, target_.path_prefix + path, headers, body);
  if (!res.ok()) {
    return IoError(fmt::format("cannot reach {}: {}", target_.origin, res.status().message()));
  }
  return res;
}

Result<std::string> ApiClient::FirstModelId() {
  KV_ASSIGN_OR_RETURN(const http::ClientResponse res, Call("GET", "/v1/models"));
  if (res.status != 200) return NotFound("GET /v1/models: " + ErrorMessage(res.status, res.body));
  json j = json::parse(res.body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].contains("id") || !j["data"][0]["id"].is_string()) {
    return NotFound("GET /v1/models lists no model; pass --model");
  }
  return j["data"][0]["id"].get<std::string>();
}

Result<std::string> ApiClient::Metrics() {
  KV_ASSIGN_OR_RETURN(http::ClientResponse res, Call("GET", "/metrics"));
  if (res.status != 200) return NotFound("GET /metrics: " + ErrorMessage(res.status, res.body));
  return std::move(res.body);
}

Result<int> ApiClient::CountTokens(std::string_view text, const std::string& model) {
  json body = {{"prompt", text}, {"content", text}, {"add_special_tokens", false},
               {"add_special", false}};
  if (!model.empty()) body["model"] = model;
  KV_ASSIGN_OR_RETURN(const http::ClientResponse res, Call("POST", "/tokenize", body.dump()));
  if (res.status != 200) return NotFound("POST /tokenize: " + ErrorMessage(res.status, res.body));
  json j = json::parse(res.body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return NotFound("POST /tokenize answered no JSON object");
  if (j.contains("count") && j["count"].is_number_integer()) return j["count"].get<int>();
  if (j.contains("tokens") && j["tokens"].is_array()) return static_cast<int>(j["tokens"].size());
  return NotFound("POST /tokenize answered neither count nor tokens");
}

void ApiClient::StreamRequest(const std::string& path, const json& body, Clock::time_point t0,
                              RequestRecord& r) {
  SseParser parser;
  std::string error_body;
  int num_text_chunks = 0;
  bool saw_done = false;
  auto on_event = [&](std::string_view data) {
    const double now = Seconds(t0, Clock::now());
    auto chunk = ParseStreamChunk(data);
    if (!chunk.ok()) {
      if (r.error.empty()) r.error = chunk.status().message();
      return;
    }
    if (chunk->done) saw_done = true;
    if (!chunk->error.empty() && r.error.empty()) r.error = chunk->error;
    if (!chunk->text.empty()) {
      if (r.first_token_s < 0) r.first_token_s = now;
      r.chunk_s.push_back(now);
      r.text += chunk->text;
      ++num_text_chunks;
    }
    if (chunk->prompt_tokens) r.prompt_tokens = *chunk->prompt_tokens;
    if (chunk->completion_tokens) r.completion_tokens = *chunk->completion_tokens;
    if (chunk->cached_tokens) r.cached_tokens = *chunk->cached_tokens;
  };

  http::Headers headers = BaseHeaders();
  headers.emplace_back("Content-Type", "application/json");
  headers.emplace_back("Accept", "text/event-stream");
  r.sent = true;
  r.sent_s = Seconds(t0, Clock::now());
  // The client resends on its own a request that met a kept-alive connection the server had
  // closed; that costs microseconds, so sent_s stays the time of the first try.
  const Status transport =
      !http_ ? create_error_
             : http_->Stream(
                   "POST", target_.path_prefix + path, headers, body.dump(),
                   [&](int status, const http::Headers&) { r.http_status = status; },
                   [&](std::string_view data) {
                     if (r.http_status != 200) {
                       if (error_body.size() < 4096) error_body.append(data);
                     } else {
                       parser.Feed(data, on_event);
                     }
                     return true;
                   });
  if (r.http_status == 200) parser.Finish(on_event);
  r.done_s = Seconds(t0, Clock::now());
  if (!transport.ok() && r.http_status == 0) {
    r.error = fmt::format("request failed: {}", transport.message());
  } else if (r.http_status != 200) {
    r.error = ErrorMessage(r.http_status, error_body);
  } else if (!transport.ok() && r.error.empty()) {
    r.error = fmt::format("stream broken: {}", transport.message());
  } else if (r.error.empty() && !saw_done && num_text_chunks == 0) {
    r.error = "the stream ended without data";
  }
  if (r.completion_tokens < 0) r.completion_tokens = num_text_chunks;
  r.ok = r.error.empty() && r.first_token_s >= 0;
  if (r.error.empty() && !r.ok) r.error = "no token was generated";
}

}  // namespace kvserve::loadgen
