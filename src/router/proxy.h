// Fleet: serves one proxied request on a worker thread: reads what routing needs from the body,
// scores the candidates against the block index, asks the policy, forwards the request to the
// chosen replica over a pooled connection, passes the response back (a stream piece by piece as
// it arrives), and on an upstream failure before any byte reached the client tries the next
// replica (router.h's NOTE on retries).
//
// Thread safety: Serve runs on many worker threads at once; the decision (candidates' loads, the
// policy's rotation, cache keys) is taken under one lock.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "http/server.h"
#include "router/block_index.h"
#include "router/health.h"
#include "router/policy.h"
#include "router/prompt_hasher.h"
#include "router/replica.h"
#include "router/request_info.h"
#include "router/router_metrics.h"

namespace kvserve::router {

struct FleetConfig {
  std::vector<std::unique_ptr<Replica>>* replicas = nullptr;
  BlockIndex* index = nullptr;
  const PromptHasher* hasher = nullptr;
  RouterMetrics* metrics = nullptr;
  HealthChecker* health = nullptr;
  PolicyKind policy = PolicyKind::kCacheAware;
  CacheAwareConfig cache_aware;
  std::string replica_api_key;  // empty: the client's own key headers are passed on
};

class Fleet {
 public:
  explicit Fleet(FleetConfig config);

  void Serve(http::Request& req, http::Exchange& ex);

 private:
  // What cache-aware routing knows of a request's prompt.
  struct Scoring {
    std::vector<uint64_t> hashes;  // [prompt blocks]
    size_t prompt_tokens = 0;      // 0 = not scored
    int block_size = 0;
  };
  struct Choice {
    int replica = -1;
    Rule rule = Rule::kLeastLoad;
    size_t matched_blocks = 0;
  };
  enum class Outcome { kAnswered, kClientGone, kBrokeOff, kRetry };

  Scoring Score(const RequestFacts& facts, const http::Headers& headers);
  Choice Decide(bool generates, const Scoring& scoring, const std::string& cache_key,
                const std::vector<int>& tried);
  Outcome Forward(Replica& replica, const http::Request& req, const http::Headers& headers,
                  http::Exchange& ex, int64_t predicted_cached_tokens, std::string* error);
  // The headers a replica gets: the client's, less hop-by-hop ones, with the replica key.
  http::Headers UpstreamHeaders(const http::Request& req) const;

  FleetConfig config_;
  std::vector<std::unique_ptr<Replica>>& replicas_;
  std::mutex decide_mu_;
  std::unique_ptr<Policy> policy_;   // generation routes
  std::unique_ptr<Policy> utility_;  // tokenize, detokenize, models: least-load
  StickyKeys sticky_;
};

// The salt a replica hashes a prompt's first block with: the request's cache_salt, and when the
// replicas require keys, the tenant before it (`<first 32 hex digits of SHA-256 of the key the
// replica sees>\x1f<cache_salt>`, docs/kv_events.md), the key being the Bearer one, else
// x-api-key.
std::string HashSalt(const http::Headers& upstream_headers, const std::string& cache_salt,
                     bool replicas_require_keys);

// The router's own error response: Anthropic's shape on /v1/messages, OpenAI's elsewhere.
http::Response ErrorResponse(std::string_view path, int status, std::string message,
                             std::string code);

}  // namespace kvserve::router
