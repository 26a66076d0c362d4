// Serve: `kvserve serve` as a library call. Loads the model (or the embedded default), starts the
// Engine, the EngineBridge and the HttpServer, prints the listening line, and serves until
// SIGINT or SIGTERM; then it stops accepting, cancels what is running and returns.
#pragma once

#include <string>

#include "engine/engine_config.h"
#include "kvserve/status.h"
#include "model/model.h"
#include "server/engine_bridge.h"
#include "server/http_server.h"

namespace kvserve {

struct ServeConfig {
  std::string model_path;          // empty = the embedded default model
  std::string served_model_name;   // empty = general.name, else the file name
  std::string chat_template;       // empty = the model's, else chatml
  EngineConfig engine;
  MlaForm mla_form = MlaForm::kAbsorbed;  // --mla-attention (deepseek2 only)
  HttpConfig http;
  int max_queued_requests = 256;
  uint64_t max_response_bytes = uint64_t{64} << 20;  // --max-response-bytes
  int structured_compile_timeout_ms = 10000;          // --structured-compile-timeout-ms
  bool debug_clock = false;  // --debug-clock: POST /debug/clock moves the TTL clock forward
};

Status Serve(const ServeConfig& config);

}  // namespace kvserve
