// Server: an event-driven HTTP/1.1 server (Boost.Beast over Asio). One I/O thread owns every
// socket: it accepts, reads heads and bodies under whole-request deadlines and size limits,
// writes responses, and keeps idle and slow connections without a thread each. Requests that
// may block (generation) run on a pool of worker threads that write their responses through
// an Exchange; cheap ones (health, metrics) are answered on the I/O thread.
//
// Per connection, requests are answered one at a time and in order, so pipelined requests get
// their responses in the order they were sent. While a worker serves a request, the I/O thread
// watches the socket: a client that closes its side or resets the connection is noticed at once
// (Exchange::ClientGone), streamed or not, and the handler stops its work.
//
// Contract: Bind() then Run() (blocks until Stop() and every connection has ended). Stop() may
// be called from any thread: the server stops accepting, drops connections that are not being
// served, lets running requests finish, and after `shutdown_timeout_s` closes what is left.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "http/message.h"
#include "kvserve/status.h"

namespace kvserve::http {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0 = any free port
  Limits limits;
  double header_timeout_s = 10;  // from a request's first byte to the end of its head (408)
  double read_timeout_s = 30;    // from a request's first byte to the end of its body (408)
  double write_timeout_s = 30;   // one write that the client does not take in this time: closed
  double idle_timeout_s = 5;     // a connection with no request in progress: closed
  double shutdown_timeout_s = 5; // Stop(): running requests get this long, then are closed
  int backlog = 1024;            // listen(2) backlog (the kernel may cap it: somaxconn)
  int max_connections = 4096;    // beyond it a new connection gets 503 and is closed
  int num_workers = 64;          // threads for the requests that block, at most
  double worker_idle_timeout_s = 30;  // a worker thread idle this long ends
};

// The response side of one request, for a handler on a worker thread. Each call blocks until
// its bytes are written (or the connection failed, then it returns false).
class Exchange {
 public:
  virtual ~Exchange() = default;
  // The whole response.
  virtual bool Send(Response response) = 0;
  // A streamed (chunked) response: its head (the body, if any, is its first piece), then
  // Write() for each piece and End() to finish it.
  virtual bool BeginStream(Response head) = 0;
  virtual bool Write(std::string_view data) = 0;
  virtual bool End() = 0;
  // The client has closed the connection or it broke: nothing more can reach it.
  virtual bool ClientGone() const = 0;
  // Notes why the request failed, for the access log (a stream that ended in an error).
  virtual void SetReason(std::string reason) = 0;
};

struct Handlers {
  // On the I/O thread when a head has been read: a response to answer at once without reading
  // the body (a missing key, an unknown route, a type that cannot be served), or nullopt.
  std::function<std::optional<Response>(const Request& head)> check;
  // On the I/O thread with the whole request: a response for what never blocks, or nullopt to
  // hand the request to a worker.
  std::function<std::optional<Response>(const Request& request)> quick;
  // On a worker thread: serves the request through the exchange.
  std::function<void(Request& request, Exchange& exchange)> serve;
  // The response for a request the layer refuses itself (malformed, too large, too slow, too
  // many connections): status and message. Defaults to a plain-text body.
  std::function<Response(int status, const std::string& message)> error;
};

class Conn;

class Server {
 public:
  Server(ServerConfig config, Handlers handlers);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens; returns the port (the chosen one for port 0).
  Result<int> Bind();
  // Serves until Stop() has finished. REQUIRES: Bind() succeeded.
  Status Run();
  void Stop();

  // Open connections, for tests and metrics.
  int num_connections() const;
  // Worker threads running now (busy or idle), for tests and metrics.
  int num_worker_threads() const;

 private:
  friend class Conn;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::http
