// What the router reads of a request body and of a response, without understanding more of
// either than routing and its metrics need.
//
// Thread safety: pure functions; a UsageScanner belongs to one request.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::router {

enum class ApiRoute {
  kCompletions,
  kChat,
  kMessages,
  kTokenize,
  kDetokenize,
  kModels,
  kModel,
  kHealth,
  kMetrics,
  kNone
};

// The route of a path, and whether it is POSTed (else GET).
ApiRoute RouteOfPath(std::string_view path, bool* post);
// Whether the route generates (and so is worth scoring against the replicas' caches).
inline bool Generates(ApiRoute r) {
  return r == ApiRoute::kCompletions || r == ApiRoute::kChat || r == ApiRoute::kMessages;
}

struct RequestFacts {
  std::string cache_key;   // OpenAI prompt_cache_key, or Anthropic metadata.user_id
  std::string cache_salt;  // joins the first block's hash, as on the replicas
  // The body of a POST /tokenize that gives the prompt's token ids as the replicas compute them
  // (null when the prompt cannot be told: then no cache match is tried).
  nlohmann::ordered_json tokenize_body;  // in the client's key order (tool definitions)
  // The prompt's token ids when the request gave them itself (a completions prompt of ids).
  std::optional<std::vector<int32_t>> prompt_ids;
};

// REQUIRES: Generates(route). Never fails: what it cannot read it leaves out.
// `body` keeps the client's key order: the replicas render tool definitions in it.
RequestFacts InspectRequest(ApiRoute route, const nlohmann::ordered_json& body);

// The token ids in a /tokenize response ({"tokens": [...]}), or nullopt.
std::optional<std::vector<int32_t>> TokensOf(std::string_view tokenize_response);

// A response's prompt size and how much of it the replica served from its cache.
struct ReportedUsage {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
};

// From a whole JSON response: OpenAI's usage.prompt_tokens and
// usage.prompt_tokens_details.cached_tokens, or Anthropic's usage.input_tokens +
// cache_read_input_tokens + cache_creation_input_tokens and cache_read_input_tokens.
std::optional<ReportedUsage> UsageOfJson(const nlohmann::json& response);

// Watches a server-sent event stream as it passes for the usage it reports: OpenAI's final
// chunk with usage (stream_options.include_usage), Anthropic's message_start (its usage
// carries the prompt's cached tokens). Lines are parsed only when they mention "usage".
class UsageScanner {
 public:
  void Feed(std::string_view data);
  const std::optional<ReportedUsage>& usage() const { return usage_; }

 private:
  void Line(std::string_view line);
  std::string partial_;  // a line not ended yet
  std::optional<ReportedUsage> usage_;
};

}  // namespace kvserve::router
