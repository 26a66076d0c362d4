// Router: `kvserve route`, an HTTP front for a fleet of kvserve (or any OpenAI-compatible)
// replicas (docs/router.md). It proxies the OpenAI routes, the Anthropic one, /tokenize,
// /detokenize and the model list to a replica chosen by a Policy, passes streams through as they
// arrive, keeps replicas in the pool by health checks, builds its picture of their KV caches from
// their KV events, and answers /health and its own /metrics.
//
// NOTE (retries): a request whose upstream attempt fails before any byte of the response reached
// the client (the replica refused the connection, died, or broke off a response the router was
// still buffering) is sent to another replica, up to once per replica; one whose stream had begun
// is broken off at the client too. Responses from replicas, errors included, pass unchanged.
//
// Contract: Bind() then Run() (blocks until Stop()). Stop() may be called from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "http/server.h"
#include "kvserve/status.h"
#include "router/block_index.h"
#include "router/health.h"
#include "router/policy.h"
#include "router/replica.h"

namespace kvserve::router {

struct RouterConfig {
  std::vector<ReplicaSpec> replicas;
  PolicyKind policy = PolicyKind::kCacheAware;
  CacheAwareConfig cache_aware;
  http::ServerConfig server;
  std::vector<std::string> api_keys;  // clients must present one (Bearer or x-api-key)
  std::string replica_api_key;        // sent to replicas instead of the client's key
  std::string hash_seed;              // the replicas' --kv-events-hash-seed
  int block_size = 0;                 // 0 = learn it from the KV events
  std::chrono::milliseconds pending_ttl{10000};
  std::chrono::milliseconds health_interval{1000};
  double health_timeout_s = 2;
  double upstream_timeout_s = 600;  // per read of a replica's response
  double connect_timeout_s = 2;
  bool start_health_thread = true;  // tests drive health rounds themselves
};

class Router {
 public:
  explicit Router(RouterConfig config);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Checks every replica once, starts the health checks and the event subscribers, binds and
  // listens. Returns the port.
  Result<int> Bind();
  Status Run();
  void Stop();

  // For tests.
  BlockIndex& index();
  HealthChecker& health();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `kvserve route`: Bind, print "kvserve: listening on http://HOST:PORT", Run until SIGINT or
// SIGTERM.
Status RunRouter(const RouterConfig& config);

}  // namespace kvserve::router
