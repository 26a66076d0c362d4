// Client: a blocking HTTP/1.1 client over one kept-alive connection (Boost.Beast), for
// `kvserve bench` and for anything else that talks to an HTTP server from a plain thread.
//
// Contract: not thread-safe; one Client per thread. Every call is bounded by `timeout_s`
// (connect, each write, and each read of the response: a server that stops sending for that
// long ends the call with an error). A kept-alive connection that the server closed in the
// meantime is noticed when a request fails before any byte of its response arrives; such a
// request is sent once more on a new connection, since it never reached the server.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "http/message.h"
#include "kvserve/status.h"

namespace kvserve::http {

struct ClientOptions {
  double timeout_s = 600;
};

struct ClientResponse {
  int status = 0;
  Headers headers;
  std::string body;
};

class Client {
 public:
  // `origin`: "http://host:port" or "http://host" (port 80). https is refused by Create.
  static Result<std::unique_ptr<Client>> Create(std::string_view origin, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends one request and reads the whole response.
  Result<ClientResponse> Send(std::string_view method, std::string_view target,
                              const Headers& headers, std::string_view body = {});

  // Sends one request and hands the response's status and headers to `on_head`, then each piece
  // of its body (chunked or not; chunk framing removed) to `on_data` as it arrives. Returning
  // false from `on_data` stops reading and drops the connection. An error after `on_head` ran
  // means the response broke off.
  Status Stream(std::string_view method, std::string_view target, const Headers& headers,
                std::string_view body, const std::function<void(int status, const Headers&)>& on_head,
                const std::function<bool(std::string_view data)>& on_data);

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::http
