// HttpServer: the HTTP layer of `kvserve serve` (cpp-httplib): routes, API-key check, body and
// time limits, JSON error shapes, and server-sent-event streaming. It parses bodies with the
// codecs of openai_codec.h and hands generation to the EngineBridge.
//
// Contract: Bind() then Run() (blocks until Stop(), which any thread or a signal handler's
// helper thread may call). Each connection is served on a worker of a fixed pool sized for the
// running plus queued requests, so a streaming client holds one worker for its duration.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kvserve/status.h"
#include "server/engine_bridge.h"

namespace kvserve {

struct HttpConfig {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0 = any free port
  std::string api_key;  // empty = no key needed
  size_t max_body_bytes = size_t{8} << 20;
  int read_timeout_s = 30;
  int write_timeout_s = 30;
  int idle_timeout_s = 5;
  int num_workers = 64;
};

class HttpServer {
 public:
  HttpServer(HttpConfig config, EngineBridge* bridge);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the socket; returns the port (the chosen one for port 0).
  Result<int> Bind();
  // Serves until Stop(). REQUIRES: Bind() succeeded.
  Status Run();
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve
