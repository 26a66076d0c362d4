// The HTTP side of the benchmark: one ApiClient per worker thread talks to an OpenAI-compatible
// server (kvserve, llama.cpp's server, vLLM, SGLang) over one kept-alive connection.
//
// StreamRequest POSTs a streaming request and times every chunk on arrival with steady_clock;
// it never throws and never returns early on a bad response: failures are recorded in the
// RequestRecord. Not thread-safe: one ApiClient per thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "http/client.h"
#include "kvserve/status.h"

namespace kvserve::loadgen {

using Clock = std::chrono::steady_clock;

struct ServerTarget {
  std::string origin;       // "http://host:port"
  std::string path_prefix;  // "" or e.g. "/proxy" (a trailing "/v1" of the URL is removed)
  std::string api_key;      // sent as "Authorization: Bearer KEY" when not empty
  double timeout_s = 600;   // connect, read and write timeouts
};

// "http://127.0.0.1:8080", "http://host:8000/v1", "http://host/prefix". https is refused: the
// HTTP client speaks plain HTTP only.
Result<ServerTarget> ParseBaseUrl(std::string_view url);

// What happened to one request; times in seconds, relative to the benchmark's start.
struct RequestRecord {
  int id = -1;          // RequestSpec::id
  int seq = -1;         // position in send order
  bool sent = false;    // false: a multi-turn round whose earlier round failed
  bool ok = false;
  std::string error;
  int http_status = 0;
  double sent_s = 0;    // when the request was written
  double first_token_s = -1;  // first chunk with text
  double done_s = 0;    // last byte of the response
  std::vector<double> chunk_s;  // arrival of each chunk with text
  std::string text;     // generated text (multi-turn feeds it into the next round)
  int prompt_tokens = -1;       // reported; -1 = the server did not say
  int completion_tokens = -1;   // reported, else the number of text chunks
  int cached_tokens = -1;       // reported cached prompt tokens; -1 = not reported
  int ideal_cached_tokens = 0;  // see ideal_cache.h
};

class ApiClient {
 public:
  explicit ApiClient(const ServerTarget& target);
  ~ApiClient();
  ApiClient(const ApiClient&) = delete;
  ApiClient& operator=(const ApiClient&) = delete;

  // The first model id of GET /v1/models.
  Result<std::string> FirstModelId();
  // Tokens of `text` without special tokens from POST /tokenize, sent in both kvserve/vLLM's
  // ({"prompt"}) and llama.cpp's ({"content"}) shape; NotFound when the server has none.
  Result<int> CountTokens(std::string_view text, const std::string& model);
  // The Prometheus text of GET /metrics; NotFound when the server has none.
  Result<std::string> Metrics();
  // POSTs `body` (which must ask for a stream) to `path` and fills `record` (all but id, seq).
  void StreamRequest(const std::string& path, const nlohmann::json& body, Clock::time_point t0,
                     RequestRecord& record);

 private:
  // One request to path_prefix + `path`; IoError when the server cannot be reached.
  Result<http::ClientResponse> Call(std::string_view method, const std::string& path,
                                    std::string_view body = {});
  http::Headers BaseHeaders() const;

  ServerTarget target_;
  std::unique_ptr<http::Client> http_;  // null when the target is unusable: create_error_ says why
  Status create_error_;
};

}  // namespace kvserve::loadgen
