// Client: a blocking HTTP/1.1 client over one kept-alive connection (Boost.Beast), for
// `kvserve bench` and for anything else that talks to an HTTP server from a plain thread.
//
// Contract: not thread-safe; one Client per thread. Every call is bounded by `timeout_s`
// (connect, each write, and each read of the response: a server that stops sending for that
// long ends the call with an error). A kept-alive connection that the server closed in the
// meantime is noticed when a request fails before any byte of its response arrives; such a
// request is sent once more on a new connection, since it never reached the server.
// Stream() may also be given a `stop` predicate, asked every kStopPollMs while the call waits on
// the network: true ends the call at once and closes the connection (a proxy whose own client
// left uses it to drop the upstream request).
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
  // Connecting alone; 0 = timeout_s. A proxy keeps it short so that an unreachable server is
  // given up quickly while a slow response may still take timeout_s per read.
  double connect_timeout_s = 0;
};

struct ClientResponse {
  int status = 0;
  Headers headers;
  std::string body;
};

class Client {
 public:
  // `origin`: "http://host:port" or "http://host" (port 80). https is refused by Create.
  static Result<std::unique_ptr<Client>> Create(std::string_view origin,
                                                ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends one request and reads the whole response.
  Result<ClientResponse> Send(std::string_view method, std::string_view target,
                              const Headers& headers, std::string_view body = {});

  // Sends one request and hands the response's status and headers to `on_head`, then each piece
  // of its body (chunked or not; chunk framing removed) to `on_data` as it arrives. Returning
  // false from `on_data` stops reading and drops the connection. An error after `on_head` ran
  // means the response broke off. `stop`, when set, is asked every kStopPollMs while the call
  // waits; once it returns true the connection is closed and the call returns an error at once
  // (never sent again).
  Status Stream(std::string_view method, std::string_view target, const Headers& headers,
                std::string_view body,
                const std::function<void(int status, const Headers&)>& on_head,
                const std::function<bool(std::string_view data)>& on_data,
                const std::function<bool()>& stop = {});

  static constexpr int kStopPollMs = 20;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::http
