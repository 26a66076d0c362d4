#include "http/client.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "util/check.h"

namespace kvserve::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using beast::error_code;

namespace {

// Send() holds the whole body in memory; Stream() hands it on piece by piece and has no limit.
constexpr uint64_t kSendBodyLimitBytes = uint64_t{256} << 20;
constexpr uint32_t kHeaderLimitBytes = 64 << 10;
// The most body bytes one on_data call gets.
constexpr size_t kPieceBytes = 64 << 10;
// Timeouts beyond this are clamped so that they fit a steady_clock duration.
constexpr double kMaxTimeoutS = 1e8;

struct Origin {
  std::string host;  // without brackets for IPv6
  uint16_t port = 80;
  std::string host_field;  // the Host header: "host" for port 80, else "host:port"
  std::string authority;   // "host:port", for error messages
};

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos) {
      return false;
    }
  }
  return true;
}

// A CR or LF in a value would let a caller's data start a header or a request of its own.
bool IsFieldValue(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

Result<Origin> ParseOrigin(std::string_view origin) {
  const auto bad = [origin](std::string_view why) {
    return InvalidArgument(
        fmt::format("bad origin '{}': {}; expected http://host[:port]", origin, why));
  };
  if (origin.substr(0, 8) == "https://") {
    return InvalidArgument(fmt::format("'{}': https is not supported; use http://", origin));
  }
  if (origin.substr(0, 7) != "http://") return bad("it does not start with http://");
  std::string_view rest = origin.substr(7);
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find_first_of("/?#@ ") != std::string_view::npos) {
    return bad("it has a path, a query or user info");
  }
  Origin o;
  std::string_view port_text;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad("an IPv6 address without ']'");
    o.host = std::string(rest.substr(1, close - 1));
    const std::string_view after = rest.substr(close + 1);
    if (!after.empty() && after.front() != ':') return bad("junk after ']'");
    if (!after.empty()) port_text = after.substr(1);
    if (after.size() == 1) return bad("an empty port");
  } else {
    const size_t colon = rest.find(':');
    o.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = rest.substr(colon + 1);
      if (port_text.empty()) return bad("an empty port");
    }
  }
  if (o.host.empty()) return bad("no host");
  if (!port_text.empty()) {
    unsigned port = 0;
    const auto [end, ec] =
        std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 ||
        port > 65535) {
      return bad("the port is not a number in [1, 65535]");
    }
    o.port = static_cast<uint16_t>(port);
  }
  const std::string bracketed = o.host.find(':') == std::string::npos ? o.host : "[" + o.host + "]";
  o.authority = fmt::format("{}:{}", bracketed, o.port);
  o.host_field = o.port == 80 ? bracketed : o.authority;
  return o;
}

Headers ToHeaders(const bhttp::fields& fields) {
  Headers out;
  for (const auto& field : fields) {
    out.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  return out;
}

}  // namespace

// NOTE: Beast's synchronous operations cannot time out, so every step runs as an asynchronous
// operation on an io_context that only this client uses, and the calling thread runs that
// context until the step completes. The tcp_stream's expiry ends a step that takes too long
// with beast::error::timeout and closes the socket.
struct Client::Impl {
  Impl(Origin o, double t, double connect_t)
      : origin(std::move(o)),
        timeout_s(t),
        connect_timeout_s(connect_t > 0 ? connect_t : t),
        piece(kPieceBytes) {}

  // How one try of a request ended. `retryable`: the connection ended before any byte of a
  // response came back, which on a kept-alive connection means the server had closed it.
  struct Attempt {
    Status status;
    bool retryable = false;
  };

  Status Exchange(const bhttp::request<bhttp::string_body>& req,
                  std::optional<uint64_t> body_limit_bytes,
                  const std::function<void(int, const Headers&)>& on_head,
                  const std::function<bool(std::string_view)>& on_data);
  Attempt Try(const bhttp::request<bhttp::string_body>& req,
              std::optional<uint64_t> body_limit_bytes,
              const std::function<void(int, const Headers&)>& on_head,
              const std::function<bool(std::string_view)>& on_data);
  Attempt ReadBody(bhttp::response_parser<bhttp::buffer_body>& parser,
                   const std::function<bool(std::string_view)>& on_data);
  Result<std::vector<tcp::endpoint>> Resolve();
  Status Connect();
  void Close();

  // Starts one operation with `start(handler)` and runs the context until it completes.
  template <typename Start>
  error_code Run(Start&& start) {
    error_code result;
    bool done = false;
    start([&result, &done](error_code ec, auto&&...) {
      result = ec;
      done = true;
    });
    ioc.restart();
    if (stop == nullptr || !*stop) {
      ioc.run();
    } else {
      // Short slices, asking the caller between them; once it says stop, the pending operation
      // is cancelled and ends (with operation_aborted) on the next slice.
      while (!done) {
        ioc.run_for(std::chrono::milliseconds(kStopPollMs));
        if (done) break;
        if (!stopped && (*stop)()) {
          stopped = true;
          if (stream) stream->cancel();
          resolver.cancel();
        }
        if (ioc.stopped()) ioc.restart();
      }
    }
    KV_CHECK(done, "the io_context ran out of work before the operation completed");
    return result;
  }

  static asio::steady_timer::duration Duration(double seconds) {
    return std::chrono::duration_cast<asio::steady_timer::duration>(
        std::chrono::duration<double>(std::min(seconds, kMaxTimeoutS)));
  }
  asio::steady_timer::duration Timeout() const { return Duration(timeout_s); }

  Status Failure(const error_code& ec, std::string_view timed_out_doing, std::string_view failed) {
    if (ec == beast::error::timeout) {
      return IoError(fmt::format("timed out after {:g} s {} {}", timeout_s, timed_out_doing,
                                 origin.authority));
    }
    return IoError(fmt::format("{}: {}", failed, ec.message()));
  }

  const Origin origin;
  const double timeout_s;
  const double connect_timeout_s;
  // The running call's stop predicate (Stream's `stop`), or null; `stopped` once it said so.
  const std::function<bool()>* stop = nullptr;
  bool stopped = false;
  asio::io_context ioc{1};
  tcp::resolver resolver{ioc};
  std::optional<beast::tcp_stream> stream;  // set while a connection is open
  beast::flat_buffer buffer;                // bytes read past what the parser consumed
  std::vector<char> piece;                  // [kPieceBytes] body bytes for one on_data call
};

Result<std::vector<tcp::endpoint>> Client::Impl::Resolve() {
  error_code ec;
  const asio::ip::address address = asio::ip::make_address(origin.host, ec);
  if (!ec) return std::vector<tcp::endpoint>{tcp::endpoint(address, origin.port)};

  // The resolver is not a tcp_stream, so its deadline is the context's own.
  std::vector<tcp::endpoint> endpoints;
  bool done = false;
  resolver.async_resolve(origin.host, std::to_string(origin.port),
                         [&](error_code e, const tcp::resolver::results_type& results) {
                           ec = e;
                           done = true;
                           for (const auto& r : results) endpoints.push_back(r.endpoint());
                         });
  ioc.restart();
  ioc.run_for(Timeout());
  if (!done) {
    resolver.cancel();
    ioc.restart();
    ioc.run();
    return IoError(fmt::format("timed out after {:g} s resolving {}", timeout_s, origin.host));
  }
  if (ec) return IoError(fmt::format("cannot resolve {}: {}", origin.host, ec.message()));
  if (endpoints.empty()) return IoError(fmt::format("{} has no address", origin.host));
  return endpoints;
}

Status Client::Impl::Connect() {
  KV_ASSIGN_OR_RETURN(const std::vector<tcp::endpoint> endpoints, Resolve());
  stream.emplace(ioc);
  stream->expires_after(Duration(connect_timeout_s));
  const error_code ec =
      Run([&](auto handler) { stream->async_connect(endpoints, std::move(handler)); });
  if (ec) {
    Close();
    if (ec == beast::error::timeout) {
      return IoError(fmt::format("timed out after {:g} s connecting to {}", connect_timeout_s,
                                 origin.authority));
    }
    return IoError(fmt::format("cannot connect to {}: {}", origin.authority, ec.message()));
  }
  // Requests and SSE events are small; Nagle's algorithm would hold them back.
  error_code ignored;
  stream->socket().set_option(tcp::no_delay(true), ignored);
  buffer.clear();
  return Status::Ok();
}

void Client::Impl::Close() {
  if (!stream) return;
  error_code ignored;
  stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream->socket().close(ignored);
  stream.reset();
  buffer.clear();
}

Status Client::Impl::Exchange(const bhttp::request<bhttp::string_body>& req,
                              std::optional<uint64_t> body_limit_bytes,
                              const std::function<void(int, const Headers&)>& on_head,
                              const std::function<bool(std::string_view)>& on_data) {
  stopped = false;
  const auto stopped_error = [this] {
    Close();
    return IoError(fmt::format("the request to {} was stopped by its caller", origin.authority));
  };
  const bool reused = stream.has_value();
  if (!reused) {
    const Status connected = Connect();
    if (stopped) return stopped_error();
    KV_RETURN_IF_ERROR(connected);
  }
  Attempt attempt = Try(req, body_limit_bytes, on_head, on_data);
  if (stopped) return stopped_error();
  if (!attempt.status.ok()) Close();
  if (!attempt.retryable || !reused) return attempt.status;
  // The request never reached a live server (see the header's contract): once more, afresh.
  const Status connected = Connect();
  if (stopped) return stopped_error();
  KV_RETURN_IF_ERROR(connected);
  attempt = Try(req, body_limit_bytes, on_head, on_data);
  if (stopped) return stopped_error();
  if (!attempt.status.ok()) Close();
  return attempt.status;
}

Client::Impl::Attempt Client::Impl::Try(const bhttp::request<bhttp::string_body>& req,
                                        std::optional<uint64_t> body_limit_bytes,
                                        const std::function<void(int, const Headers&)>& on_head,
                                        const std::function<bool(std::string_view)>& on_data) {
  buffer.clear();
  stream->expires_after(Timeout());
  error_code ec = Run([&](auto handler) { bhttp::async_write(*stream, req, std::move(handler)); });
  if (ec) {
    return {Failure(ec, "sending the request to",
                    fmt::format("cannot send the request to {}", origin.authority)),
            ec != beast::error::timeout};
  }

  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.header_limit(kHeaderLimitBytes);
  parser.body_limit(body_limit_bytes ? boost::optional<uint64_t>(*body_limit_bytes) : boost::none);
  if (req.method() == bhttp::verb::head) parser.skip(true);
  stream->expires_after(Timeout());
  ec = Run(
      [&](auto handler) { bhttp::async_read_header(*stream, buffer, parser, std::move(handler)); });
  if (ec) {
    const bool nothing_came = !parser.got_some() && buffer.size() == 0;
    return {Failure(ec, "reading the response from",
                    fmt::format("no response from {}", origin.authority)),
            nothing_came && ec != beast::error::timeout};
  }
  if (on_head) on_head(parser.get().result_int(), ToHeaders(parser.get().base()));

  Attempt body = ReadBody(parser, on_data);
  if (body.status.ok() && stream && (!parser.keep_alive() || !req.keep_alive())) Close();
  return body;
}

Client::Impl::Attempt Client::Impl::ReadBody(bhttp::response_parser<bhttp::buffer_body>& parser,
                                             const std::function<bool(std::string_view)>& on_data) {
  while (!parser.is_done()) {
    parser.get().body().data = piece.data();
    parser.get().body().size = piece.size();
    stream->expires_after(Timeout());
    // read_some returns as soon as the parser made progress, so each piece is handed on when
    // it arrives rather than when the piece buffer is full.
    error_code ec = Run(
        [&](auto handler) { bhttp::async_read_some(*stream, buffer, parser, std::move(handler)); });
    if (ec == bhttp::error::need_buffer) ec = {};  // the piece is full
    const size_t n = piece.size() - parser.get().body().size;
    if (n > 0 && on_data && !on_data(std::string_view(piece.data(), n))) {
      // The rest of the response is unwanted; only a new connection is sure to be past it.
      Close();
      return {Status::Ok()};
    }
    if (ec == bhttp::error::body_limit) {
      return {IoError(fmt::format("the response from {} is over the {} MiB limit", origin.authority,
                                  kSendBodyLimitBytes >> 20))};
    }
    if (ec) {
      return {Failure(ec, "reading the response from",
                      fmt::format("the response from {} broke off", origin.authority))};
    }
  }
  return {Status::Ok()};
}

Result<std::unique_ptr<Client>> Client::Create(std::string_view origin, ClientOptions options) {
  if (!(options.timeout_s > 0)) {
    return InvalidArgument(
        fmt::format("the timeout must be > 0 seconds (got {})", options.timeout_s));
  }
  KV_ASSIGN_OR_RETURN(Origin parsed, ParseOrigin(origin));
  if (!(options.connect_timeout_s >= 0)) {
    return InvalidArgument(fmt::format("the connect timeout must be >= 0 seconds (got {})",
                                       options.connect_timeout_s));
  }
  return std::unique_ptr<Client>(new Client(
      std::make_unique<Impl>(std::move(parsed), options.timeout_s, options.connect_timeout_s)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() = default;

namespace {

Result<bhttp::request<bhttp::string_body>> BuildRequest(std::string_view method,
                                                        std::string_view target,
                                                        const Headers& headers,
                                                        std::string_view body,
                                                        const std::string& host_field) {
  if (!IsToken(method)) return InvalidArgument(fmt::format("bad HTTP method '{}'", method));
  if (!target.empty() && (target.front() != '/' || !IsFieldValue(target) ||
                          target.find(' ') != std::string_view::npos)) {
    return InvalidArgument(fmt::format("bad request target '{}': expected /path[?query]", target));
  }
  bhttp::request<bhttp::string_body> req;
  req.version(11);
  req.method_string(method);
  req.target(target.empty() ? std::string_view("/") : target);
  for (const auto& [name, value] : headers) {
    if (!IsToken(name) || !IsFieldValue(value)) {
      return InvalidArgument(fmt::format("bad request header '{}'", name));
    }
    req.insert(name, value);
  }
  if (req.find(bhttp::field::host) == req.end()) req.set(bhttp::field::host, host_field);
  if (req.find(bhttp::field::user_agent) == req.end()) req.set(bhttp::field::user_agent, "kvserve");
  req.body() = std::string(body);
  req.prepare_payload();
  return req;
}

}  // namespace

Result<ClientResponse> Client::Send(std::string_view method, std::string_view target,
                                    const Headers& headers, std::string_view body) {
  KV_ASSIGN_OR_RETURN(const auto req,
                      BuildRequest(method, target, headers, body, impl_->origin.host_field));
  ClientResponse response;
  const Status s = impl_->Exchange(
      req, kSendBodyLimitBytes,
      [&](int status, const Headers& head) {
        response.status = status;
        response.headers = head;
      },
      [&](std::string_view data) {
        response.body.append(data);
        return true;
      });
  if (!s.ok()) return s;
  return response;
}

Status Client::Stream(std::string_view method, std::string_view target, const Headers& headers,
                      std::string_view body,
                      const std::function<void(int status, const Headers&)>& on_head,
                      const std::function<bool(std::string_view data)>& on_data,
                      const std::function<bool()>& stop) {
  KV_ASSIGN_OR_RETURN(const auto req,
                      BuildRequest(method, target, headers, body, impl_->origin.host_field));
  impl_->stop = stop ? &stop : nullptr;
  Status s = impl_->Exchange(req, std::nullopt, on_head, on_data);
  impl_->stop = nullptr;
  return s;
}

}  // namespace kvserve::http
