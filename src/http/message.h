// The HTTP layer's own view of a request and a response: plain strings, no Beast types, so the
// modules above it (server, loadgen, a router) need no Boost headers of their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvserve::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

// The value of the first header named `name` (ASCII case-insensitive), or empty.
std::string_view FindHeader(const Headers& headers, std::string_view name);
// How many headers are named `name`.
size_t CountHeaders(const Headers& headers, std::string_view name);

// What the server reads of one request at most (beyond it: 431 or 413).
struct Limits {
  size_t max_header_bytes = size_t{16} << 10;  // request line and headers together
  int max_header_fields = 100;
  uint64_t max_body_bytes = uint64_t{8} << 20;
};

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  std::string path;    // the target up to '?'
  int version = 11;    // 10 = HTTP/1.0, 11 = HTTP/1.1
  Headers headers;
  std::string body;
  std::string remote;      // the client's address, "ip:port"
  std::string request_id;  // the client's X-Request-Id when usable, else one of ours

  std::string_view header(std::string_view name) const { return FindHeader(headers, name); }
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  Headers headers;
  // For the access log: why the request failed (an error's message), empty otherwise.
  std::string reason;
};

// The standard reason phrase of a status code ("Not Found"), or "Unknown".
std::string_view StatusText(int status);

}  // namespace kvserve::http
