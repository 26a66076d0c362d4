// HttpServer: the OpenAI routes of `kvserve serve` on the event-driven HTTP layer (http/):
// API-key check, routing, JSON error shapes, generation (whole and server-sent events) and the
// cheap GET routes. It parses bodies with the codecs of openai_codec.h and hands generation to
// the EngineBridge.
//
// Contract: Bind() then Run() (blocks until Stop(), which any thread may call; running requests
// then finish or are closed within the shutdown timeout). Generation runs on the layer's worker
// threads, so a streaming client holds one worker for its duration; idle and slow connections
// hold none.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "http/server.h"
#include "kvserve/status.h"
#include "server/engine_bridge.h"

namespace kvserve {

struct HttpConfig {
  http::ServerConfig server;  // address, limits, timeouts, connections, workers
  // --api-key, repeatable: each key is a tenant; explicit caches and cached KV are never
  // shared between tenants. Empty = no key needed (one tenant).
  std::vector<std::string> api_keys;
  // With --debug-clock: POST /debug/clock {"advance_seconds": N} moves the retention clock
  // forward (tests of TTLs); null = the route does not exist.
  std::function<void(int64_t ms)> advance_clock;
};

class HttpServer {
 public:
  HttpServer(HttpConfig config, EngineBridge* bridge);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the socket; returns the port (the chosen one for port 0).
  Result<int> Bind();
  // Serves until Stop() has finished.
  Status Run();
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve
