#include "http/server.h"

#include <sys/resource.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "http/request.h"
#include "util/log.h"

namespace kvserve::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// A client's X-Request-Id is kept when it is short printable ASCII; else one is made.
bool UsableRequestId(std::string_view id) {
  return !id.empty() && id.size() <= 128 &&
         std::all_of(id.begin(), id.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

Response PlainError(int status, const std::string& message) {
  Response r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = message + "\n";
  r.reason = message;
  return r;
}

// Each connection is a file descriptor: take the hard limit, so that --max-connections rather
// than a default soft limit of 1024 decides how many clients fit.
void RaiseFileLimit(int max_connections) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
    getrlimit(RLIMIT_NOFILE, &lim);
  }
  if (lim.rlim_cur != RLIM_INFINITY &&
      lim.rlim_cur < static_cast<rlim_t>(max_connections) + 256) {
    KV_LOG(Warning,
           "the process may open {} files, fewer than --max-connections ({}) needs; connections "
           "beyond that are refused by the kernel",
           static_cast<uint64_t>(lim.rlim_cur), max_connections);
  }
}

// Threads for the requests that block. They start on demand, up to `max`; one left idle for
// `idle_timeout` ends, so a burst's threads do not stay for the life of the process. A thread
// that ends is joined by the next Submit (or by Join), never by itself.
class WorkerPool {
 public:
  WorkerPool(int max, std::chrono::milliseconds idle_timeout)
      : max_(std::max(1, max)), idle_timeout_(idle_timeout) {}
  ~WorkerPool() { Join(); }

  void Submit(std::function<void()> fn) {
    std::vector<std::thread> ended;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ended.swap(ended_);
      queue_.push_back(std::move(fn));
      // Tasks are long (a stream lasts as long as its generation): a task must not wait behind
      // one that a woken thread has not picked up yet, so count the queue against idle threads.
      if (queue_.size() > idle_ && static_cast<int>(threads_.size()) < max_) {
        std::thread t([this] { Loop(); });
        const std::thread::id id = t.get_id();
        threads_.emplace(id, std::move(t));
      }
      cv_.notify_one();
    }
    for (std::thread& t : ended) t.join();
  }

  void Join() {
    std::vector<std::thread> all;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      all.swap(ended_);
      for (auto& [id, t] : threads_) all.push_back(std::move(t));
      threads_.clear();
    }
    cv_.notify_all();
    for (std::thread& t : all) t.join();
  }

  // Threads started and not ended.
  int num_threads() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(threads_.size());
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      const bool woken = cv_.wait_for(lock, idle_timeout_,
                                      [this] { return stop_ || !queue_.empty(); });
      --idle_;
      if (!woken) {  // idle for the whole timeout: this thread ends
        auto self = threads_.find(std::this_thread::get_id());
        ended_.push_back(std::move(self->second));
        threads_.erase(self);
        return;
      }
      if (queue_.empty()) return;  // stopping
      std::function<void()> fn = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  const int max_;
  const std::chrono::milliseconds idle_timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::unordered_map<std::thread::id, std::thread> threads_;  // running, by id
  std::vector<std::thread> ended_;  // ended on their idle timeout, to be joined
  size_t idle_ = 0;
  bool stop_ = false;
};

// What a worker's response looked like, for the access log.
struct Outcome {
  int status = 0;
  int64_t bytes = -1;  // body bytes of a whole response; -1 for a stream
  std::string reason;
  bool complete = true;  // false: a stream that was begun and not ended
};

}  // namespace

class Conn;

struct Server::Impl {
  ServerConfig config;
  Handlers handlers;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
  asio::steady_timer shutdown_timer{io};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  WorkerPool pool;
  std::unordered_map<Conn*, std::shared_ptr<Conn>> conns;  // I/O thread only
  std::atomic<int> num_conns{0};
  int num_overflow = 0;
  bool stopping = false;
  std::atomic<uint64_t> next_request_id{1};
  Clock::time_point last_accept_warning{};

  Impl(ServerConfig c, Handlers h)
      : config(std::move(c)),
        handlers(std::move(h)),
        pool(config.num_workers,
             std::chrono::milliseconds(
                 std::max<int64_t>(1, std::llround(config.worker_idle_timeout_s * 1e3)))) {
    if (!handlers.error) handlers.error = PlainError;
  }

  void Accept();
  void Overflow(tcp::socket socket);
  void Remove(Conn* c);
  void BeginShutdown();
  void MaybeFinish();
};

// One client connection. Every member is used on the I/O thread, except `gone`, which worker
// threads read. Each pending operation's handler holds a shared_ptr to it.
class Conn : public std::enable_shared_from_this<Conn> {
 public:
  // The read buffer holds at most a head (or a chunked body's trailers, which Beast also needs
  // whole) plus one read's worth of what follows it: trailers cannot grow it further.
  Conn(Server::Impl* server, tcp::socket socket)
      : s_(server),
        sock_(std::move(socket)),
        timer_(server->io),
        buf_(server->config.limits.max_header_bytes + (size_t{64} << 10)) {
    beast::error_code ec;
    const tcp::endpoint ep = sock_.remote_endpoint(ec);
    if (!ec) remote_ = fmt::format("{}:{}", ep.address().to_string(), ep.port());
  }

  void Start() { WaitRequest(); }

  // Closes the socket: pending operations end with an error, workers see ClientGone. The
  // connection leaves the server's set once no worker serves it.
  void CloseSocket() {
    if (closed_) return;
    closed_ = true;
    gone_.store(true);
    Disarm();
    beast::error_code ec;
    sock_.close(ec);
    if (!serving_) s_->Remove(this);
  }

  // Shutdown: a connection between requests is closed now; one being served or answered
  // finishes its response first (and is then closed, since keep-alive ends with stopping).
  void OnShutdown() {
    if (phase_ == Phase::kWait || phase_ == Phase::kHead || phase_ == Phase::kBody) {
      CloseSocket();
    }
  }

  bool gone() const { return gone_.load(); }

  // Runs on the I/O thread for a worker: writes a whole response or a stream's piece, then
  // calls done(ok).
  using Done = std::function<void(bool ok)>;
  // `close`: the connection ends after this response (keep-alive off).
  void WriteResponse(Response r, bool close, Done done);
  void WriteStreamHead(Response r, Done done);
  void WriteChunk(std::shared_ptr<std::string> data, bool last, Done done);
  // The worker has finished with the request.
  void Served(Outcome outcome);

 private:
  enum class Phase { kWait, kHead, kBody, kServing, kRespond, kLinger };

  void Arm(Clock::duration d) {
    timer_.expires_after(d);
    const uint64_t gen = ++timer_gen_;
    timer_.async_wait([self = shared_from_this(), gen](const beast::error_code& ec) {
      if (ec || gen != self->timer_gen_ || self->closed_) return;
      self->OnTimer();
    });
  }
  void Disarm() {
    ++timer_gen_;
    timer_.cancel();
  }
  void OnTimer() {
    if (phase_ == Phase::kHead || phase_ == Phase::kBody) {
      timed_out_ = true;
      beast::error_code ec;
      sock_.cancel(ec);  // the read ends with operation_aborted and answers 408
      return;
    }
    CloseSocket();  // idle, or a write the client does not take, or a linger that lasts
  }

  void WaitRequest();
  void ReadHead();
  void OnHead(beast::error_code ec);
  void ReadBody();
  void OnBody(beast::error_code ec);
  void Dispatch();
  void Watch();
  void Respond(Response r, bool close);
  void Refuse(const Refusal& r);
  void GracefulClose();
  void Drain(std::shared_ptr<std::array<char, 4096>> scratch, size_t total);
  void LogAccess();
  void StartLog(const std::string& method, const std::string& path) {
    log_method_ = method;
    log_path_ = path;
    log_status_ = 0;
    log_bytes_ = -1;
    log_reason_.clear();
  }
  static bool NetworkError(const beast::error_code& ec) {
    return ec.category() != bhttp::make_error_code(bhttp::error::end_of_stream).category() ||
           ec == bhttp::error::end_of_stream;
  }

  Server::Impl* s_;
  tcp::socket sock_;
  asio::steady_timer timer_;
  uint64_t timer_gen_ = 0;
  uint64_t watch_gen_ = 0;
  beast::flat_buffer buf_;
  std::optional<RequestParser> parser_;
  Request request_;
  std::string request_id_;  // of the request in progress, kept after request_ goes to a worker
  Phase phase_ = Phase::kWait;
  bool timed_out_ = false;
  bool keep_alive_ = false;
  bool closed_ = false;
  bool serving_ = false;
  std::atomic<bool> gone_{false};
  std::string remote_;
  Clock::time_point start_;
  std::string log_method_, log_path_, log_reason_;
  int log_status_ = 0;
  int64_t log_bytes_ = -1;
};

namespace {

// The Exchange a worker gets: each call hands its bytes to the I/O thread and waits there.
class WorkerExchange final : public Exchange {
 public:
  WorkerExchange(std::shared_ptr<Conn> conn, asio::io_context& io)
      : conn_(std::move(conn)), io_(io) {}

  bool Send(Response r) override {
    if (begun_) return false;
    begun_ = ended_ = true;
    outcome_.status = r.status;
    outcome_.bytes = static_cast<int64_t>(r.body.size());
    if (outcome_.reason.empty()) outcome_.reason = r.reason;
    return RunOnIo([r = std::move(r)](Conn& c, Conn::Done done) mutable {
      c.WriteResponse(std::move(r), /*close=*/false, std::move(done));
    });
  }

  bool BeginStream(Response head) override {
    if (begun_) return false;
    begun_ = true;
    outcome_.status = head.status;
    outcome_.bytes = -1;
    if (outcome_.reason.empty()) outcome_.reason = head.reason;
    std::string first = std::move(head.body);
    head.body.clear();
    const bool ok = RunOnIo([head = std::move(head)](Conn& c, Conn::Done done) mutable {
      c.WriteStreamHead(std::move(head), std::move(done));
    });
    return ok && (first.empty() || Write(first));
  }

  bool Write(std::string_view data) override {
    if (!begun_ || ended_) return false;
    if (data.empty()) return !conn_->gone();
    auto bytes = std::make_shared<std::string>(data);
    return RunOnIo([bytes](Conn& c, Conn::Done done) {
      c.WriteChunk(bytes, false, std::move(done));
    });
  }

  bool End() override {
    if (!begun_ || ended_) return false;
    ended_ = true;
    return RunOnIo([](Conn& c, Conn::Done done) { c.WriteChunk(nullptr, true, std::move(done)); });
  }

  bool ClientGone() const override { return conn_->gone(); }
  void SetReason(std::string reason) override { outcome_.reason = std::move(reason); }

  bool begun() const { return begun_; }
  void Abandon() {
    outcome_.status = 499;
    outcome_.reason = "the client closed the connection before the response";
  }
  Outcome outcome() {
    outcome_.complete = !begun_ || ended_;
    return outcome_;
  }

 private:
  template <typename Op>
  bool RunOnIo(Op op) {
    struct Wait {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      bool ok = false;
    };
    auto wait = std::make_shared<Wait>();
    asio::post(io_, [conn = conn_, op = std::move(op), wait]() mutable {
      op(*conn, [wait](bool ok) {
        std::lock_guard<std::mutex> lock(wait->mu);
        wait->ok = ok;
        wait->done = true;
        wait->cv.notify_all();
      });
    });
    std::unique_lock<std::mutex> lock(wait->mu);
    wait->cv.wait(lock, [&] { return wait->done; });
    return wait->ok;
  }

  std::shared_ptr<Conn> conn_;
  asio::io_context& io_;
  bool begun_ = false;
  bool ended_ = false;
  Outcome outcome_;
};

}  // namespace

void Conn::WaitRequest() {
  phase_ = Phase::kWait;
  parser_.reset();
  timed_out_ = false;
  if (closed_) return;
  if (s_->stopping) return CloseSocket();
  if (buf_.size() > 0) return ReadHead();  // a pipelined request is already here
  Arm(Seconds(s_->config.idle_timeout_s));
  sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](const beast::error_code& ec) {
    if (self->closed_ || self->phase_ != Phase::kWait) return;
    if (ec) return self->CloseSocket();
    self->ReadHead();
  });
}

void Conn::ReadHead() {
  phase_ = Phase::kHead;
  start_ = Clock::now();
  request_id_.clear();
  parser_.emplace();
  ConfigureParser(*parser_, s_->config.limits);
  Arm(Seconds(s_->config.header_timeout_s));
  bhttp::async_read_header(sock_, buf_, *parser_,
                           [self = shared_from_this()](beast::error_code ec, size_t) {
                             self->OnHead(ec);
                           });
}

void Conn::OnHead(beast::error_code ec) {
  if (closed_) return;
  Disarm();
  StartLog("-", "-");
  // A deadline that fires as the read completes loses: what arrived in time is served.
  if (!ec) timed_out_ = false;
  if (timed_out_) {
    return Refuse({408, fmt::format("the request's head did not arrive within {} s "
                                    "(--header-timeout)",
                                    s_->config.header_timeout_s)});
  }
  if (ec && NetworkError(ec)) return CloseSocket();  // the client left (or reset)
  if (ec) return Refuse(RefusalFor(ec));
  request_ = ToRequest(*parser_);
  StartLog(request_.method, request_.path);
  const std::string_view given = request_.header("X-Request-Id");
  request_.request_id = UsableRequestId(given)
                            ? std::string(given)
                            : fmt::format("req-{}", s_->next_request_id.fetch_add(1));
  request_.remote = remote_;
  request_id_ = request_.request_id;
  keep_alive_ = parser_->get().keep_alive();
  if (auto refusal = CheckHead(*parser_, s_->config.limits)) return Refuse(*refusal);
  if (s_->handlers.check) {
    if (std::optional<Response> early = s_->handlers.check(request_)) {
      // The body, if any, is not read: the connection cannot go on after this response.
      return Respond(std::move(*early), /*close=*/!parser_->is_done());
    }
  }
  if (!parser_->is_done() && ExpectsContinue(*parser_)) {
    auto interim = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
    Arm(Seconds(s_->config.write_timeout_s));
    asio::async_write(sock_, asio::buffer(*interim),
                      [self = shared_from_this(), interim](const beast::error_code& wec, size_t) {
                        if (self->closed_) return;
                        self->Disarm();
                        if (wec) return self->CloseSocket();
                        self->ReadBody();
                      });
    return;
  }
  ReadBody();
}

void Conn::ReadBody() {
  phase_ = Phase::kBody;
  if (parser_->is_done()) return OnBody({});
  const Clock::duration left = start_ + Seconds(s_->config.read_timeout_s) - Clock::now();
  Arm(std::max(left, Clock::duration::zero()));
  bhttp::async_read(sock_, buf_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->OnBody(ec);
  });
}

void Conn::OnBody(beast::error_code ec) {
  if (closed_) return;
  Disarm();
  if (!ec) timed_out_ = false;
  if (timed_out_) {
    return Refuse({408, fmt::format("the request's body did not arrive within {} s "
                                    "(--read-timeout)",
                                    s_->config.read_timeout_s)});
  }
  if (ec && NetworkError(ec)) return CloseSocket();
  if (ec) return Refuse(RefusalFor(ec));
  if (auto refusal = CheckFieldCount(*parser_, s_->config.limits)) return Refuse(*refusal);
  request_.body = std::move(parser_->get().body());
  parser_.reset();
  Dispatch();
}

void Conn::Dispatch() {
  if (s_->handlers.quick) {
    if (std::optional<Response> r = s_->handlers.quick(request_)) {
      return Respond(std::move(*r), /*close=*/false);
    }
  }
  phase_ = Phase::kServing;
  serving_ = true;
  Watch();
  auto request = std::make_shared<Request>(std::move(request_));
  request_ = Request{};
  s_->pool.Submit([self = shared_from_this(), request, s = s_] {
    WorkerExchange exchange(self, s->io);
    try {
      s->handlers.serve(*request, exchange);
    } catch (const std::exception& e) {
      if (!exchange.begun()) {
        Response r = s->handlers.error(500, fmt::format("internal error: {}", e.what()));
        exchange.Send(std::move(r));
      }
      exchange.SetReason(e.what());
    }
    if (!exchange.begun()) {
      if (exchange.ClientGone()) {
        exchange.Abandon();  // nothing can reach the client: logged as 499, nothing written
      } else {
        exchange.Send(s->handlers.error(500, "the request got no response"));
      }
    }
    // A large response (n x max_tokens x logprobs) leaves tens of megabytes free in this
    // worker's malloc arena, which glibc keeps; hand them back so that memory returns to its
    // idle level after the request.
    Outcome outcome = exchange.outcome();
#if defined(__GLIBC__)
    if (outcome.bytes >= (int64_t{1} << 20)) malloc_trim(0);
#endif
    asio::post(s->io, [self, outcome = std::move(outcome)]() mutable {
      self->Served(std::move(outcome));
    });
  });
}

// While a worker serves the request, a client that closes the connection (or resets it) is
// noticed from the socket becoming readable with nothing to read. Bytes that arrive instead are
// the next pipelined request: they wait in the socket until this response is done.
void Conn::Watch() {
  const uint64_t gen = ++watch_gen_;
  sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), gen](
                                               const beast::error_code& ec) {
    if (self->closed_ || gen != self->watch_gen_ || self->phase_ != Phase::kServing) return;
    if (ec) {
      self->gone_.store(true);
      return;
    }
    char c = 0;
    beast::error_code rec;
    const size_t n = self->sock_.receive(asio::buffer(&c, 1), tcp::socket::message_peek, rec);
    if (rec == asio::error::would_block || rec == asio::error::try_again) return self->Watch();
    if (rec || n == 0) self->gone_.store(true);
  });
}

void Conn::Served(Outcome outcome) {
  serving_ = false;
  ++watch_gen_;
  log_status_ = outcome.status;
  log_bytes_ = outcome.bytes;
  log_reason_ = std::move(outcome.reason);
  LogAccess();
  if (closed_) return s_->Remove(this);
  beast::error_code ec;
  sock_.cancel(ec);  // the watch
  if (!outcome.complete || gone_.load()) return CloseSocket();
  if (!keep_alive_ || s_->stopping) return GracefulClose();
  WaitRequest();
}

namespace {

template <typename Message>
void SetCommonHeaders(Message& m, const Response& r, const std::string& request_id) {
  if (!r.content_type.empty()) m.set(bhttp::field::content_type, r.content_type);
  if (!request_id.empty()) m.set("X-Request-Id", request_id);
  for (const auto& [name, value] : r.headers) m.insert(name, value);
}

// A whole response as Beast writes it: status, headers, body, Content-Length, Connection.
bhttp::response<bhttp::string_body> Message(Response r, const std::string& request_id,
                                            bool keep_alive) {
  bhttp::response<bhttp::string_body> msg(static_cast<bhttp::status>(r.status), 11);
  SetCommonHeaders(msg, r, request_id);
  msg.body() = std::move(r.body);
  msg.keep_alive(keep_alive);
  msg.prepare_payload();
  return msg;
}

}  // namespace

void Conn::Respond(Response r, bool close) {
  phase_ = Phase::kRespond;
  log_status_ = r.status;
  log_bytes_ = static_cast<int64_t>(r.body.size());
  if (log_reason_.empty()) log_reason_ = r.reason;
  WriteResponse(std::move(r), close, [self = shared_from_this()](bool ok) {
    self->LogAccess();
    if (!ok) return;  // the connection is closed
    if (!self->keep_alive_) return self->GracefulClose();
    self->WaitRequest();
  });
}

void Conn::Refuse(const Refusal& r) {
  if (request_id_.empty()) {
    request_id_ = fmt::format("req-{}", s_->next_request_id.fetch_add(1));
  }
  log_reason_ = r.message;
  Response resp = s_->handlers.error(r.status, r.message);
  Respond(std::move(resp), /*close=*/true);
}

// After a response with Connection: close, the client may still be sending (a body that was
// not read). Closing at once would make the kernel reset the connection, and the client could
// lose the response; so the sending side is shut, and what arrives is read and dropped for a
// short while.
void Conn::GracefulClose() {
  if (closed_) return;
  phase_ = Phase::kLinger;
  beast::error_code ec;
  sock_.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return CloseSocket();
  Arm(std::chrono::seconds(1));
  Drain(std::make_shared<std::array<char, 4096>>(), 0);
}

void Conn::Drain(std::shared_ptr<std::array<char, 4096>> scratch, size_t total) {
  sock_.async_read_some(asio::buffer(*scratch), [self = shared_from_this(), scratch, total](
                                                    const beast::error_code& ec, size_t n) {
    if (self->closed_) return;
    if (ec || total + n > (size_t{1} << 20)) return self->CloseSocket();
    self->Drain(scratch, total + n);
  });
}

void Conn::WriteResponse(Response r, bool close, Done done) {
  if (closed_) return done(false);
  keep_alive_ = keep_alive_ && !close && !s_->stopping;
  auto msg = std::make_shared<bhttp::response<bhttp::string_body>>(
      Message(std::move(r), request_id_, keep_alive_));
  Arm(Seconds(s_->config.write_timeout_s));
  bhttp::async_write(sock_, *msg, [self = shared_from_this(), msg, done = std::move(done)](
                                      const beast::error_code& ec, size_t) {
    if (!self->closed_) self->Disarm();
    if (ec) self->CloseSocket();
    done(!ec);
  });
}

void Conn::WriteStreamHead(Response r, Done done) {
  if (closed_) return done(false);
  auto msg = std::make_shared<bhttp::response<bhttp::empty_body>>(
      static_cast<bhttp::status>(r.status), 11);
  SetCommonHeaders(*msg, r, request_id_);
  keep_alive_ = keep_alive_ && !s_->stopping;
  msg->keep_alive(keep_alive_);
  msg->chunked(true);
  auto sr = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*msg);
  Arm(Seconds(s_->config.write_timeout_s));
  bhttp::async_write_header(sock_, *sr, [self = shared_from_this(), msg, sr, done = std::move(done)](
                                            const beast::error_code& ec, size_t) {
    if (!self->closed_) self->Disarm();
    if (ec) self->CloseSocket();
    done(!ec);
  });
}

void Conn::WriteChunk(std::shared_ptr<std::string> data, bool last, Done done) {
  if (closed_) return done(false);
  Arm(Seconds(s_->config.write_timeout_s));
  auto finish = [self = shared_from_this(), data, done = std::move(done)](
                    const beast::error_code& ec, size_t) {
    if (!self->closed_) self->Disarm();
    if (ec) self->CloseSocket();
    done(!ec);
  };
  if (last) {
    asio::async_write(sock_, bhttp::make_chunk_last(), std::move(finish));
  } else {
    asio::async_write(sock_, bhttp::make_chunk(asio::buffer(*data)), std::move(finish));
  }
}

// One access-log line per request once its response has been written: method, path, status,
// bytes (of bodies that are not streamed), duration, client address, request id, and for
// errors the reason. 2xx/3xx at info, 4xx at warning, 5xx at error (--log-level).
void Conn::LogAccess() {
  if (log_status_ == 0) return;
  const LogLevel level = log_status_ >= 500   ? LogLevel::kError
                         : log_status_ >= 400 ? LogLevel::kWarning
                                              : LogLevel::kInfo;
  if (level >= GetLogLevel()) {
    std::vector<LogField> fields = {{"method", log_method_},
                                    {"path", log_path_},
                                    {"status", int64_t{log_status_}},
                                    {"client", remote_},
                                    {"request_id", request_id_},
                                    {"duration_ms", std::chrono::duration<double, std::milli>(
                                                        Clock::now() - start_)
                                                        .count()}};
    if (log_bytes_ >= 0) fields.push_back({"bytes", log_bytes_});
    if (log_status_ >= 400) fields.push_back({"error", log_reason_});
    LogRecord(level, fmt::format("{} {} {}", log_method_, log_path_, log_status_), fields);
  }
  log_status_ = 0;
}

void Server::Impl::Accept() {
  acceptor.async_accept([this](const beast::error_code& ec, tcp::socket socket) {
    if (stopping || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors or buffers: the pending connection stays in the backlog; try again
      // shortly rather than spinning on the same error.
      const Clock::time_point now = Clock::now();
      if (now - last_accept_warning > std::chrono::seconds(10)) {
        last_accept_warning = now;
        KV_LOG(Warning, "accept failed: {} ({} connections open)", ec.message(), conns.size());
      }
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](const beast::error_code& wec) {
        if (!wec) Accept();
      });
      return;
    }
    beast::error_code oec;
    socket.set_option(tcp::no_delay(true), oec);
    if (static_cast<int>(conns.size()) >= config.max_connections) {
      Overflow(std::move(socket));
    } else {
      auto c = std::make_shared<Conn>(this, std::move(socket));
      conns.emplace(c.get(), c);
      num_conns.store(static_cast<int>(conns.size()));
      c->Start();
    }
    Accept();
  });
}

// A connection beyond --max-connections gets a 503 with Retry-After and is closed, within a
// second whatever the client does. Past a few hundred such at once, they are closed unanswered.
void Server::Impl::Overflow(tcp::socket socket) {
  if (num_overflow >= 256) return;
  ++num_overflow;
  struct Pending {
    tcp::socket sock;
    asio::steady_timer timer;
    std::string bytes;
  };
  Response r = handlers.error(
      503, fmt::format("the server is at its limit of {} connections (--max-connections); "
                       "retry later",
                       config.max_connections));
  r.headers.emplace_back("Retry-After", "1");
  std::ostringstream os;
  os << Message(std::move(r), "", /*keep_alive=*/false);
  auto p = std::make_shared<Pending>(Pending{std::move(socket), asio::steady_timer(io), os.str()});
  p->timer.expires_after(std::chrono::seconds(1));
  p->timer.async_wait([p](const beast::error_code& ec) {
    if (ec) return;
    beast::error_code cec;
    p->sock.close(cec);
  });
  asio::async_write(p->sock, asio::buffer(p->bytes), [this, p](const beast::error_code&, size_t) {
    beast::error_code ec;
    p->sock.shutdown(tcp::socket::shutdown_both, ec);
    p->sock.close(ec);
    p->timer.cancel();
    --num_overflow;
  });
}

void Server::Impl::Remove(Conn* c) {
  conns.erase(c);
  num_conns.store(static_cast<int>(conns.size()));
  MaybeFinish();
}

void Server::Impl::BeginShutdown() {
  if (stopping) return;
  stopping = true;
  beast::error_code ec;
  acceptor.close(ec);
  accept_retry.cancel();
  std::vector<std::shared_ptr<Conn>> all;
  all.reserve(conns.size());
  for (auto& [ptr, c] : conns) all.push_back(c);
  for (auto& c : all) c->OnShutdown();
  shutdown_timer.expires_after(Seconds(config.shutdown_timeout_s));
  shutdown_timer.async_wait([this](const beast::error_code& tec) {
    if (tec) return;
    std::vector<std::shared_ptr<Conn>> left;
    for (auto& [ptr, c] : conns) left.push_back(c);
    if (!left.empty()) {
      KV_LOG(Warning, "shutdown: closing {} connections still open after {} s", left.size(),
             config.shutdown_timeout_s);
    }
    for (auto& c : left) c->CloseSocket();
  });
  MaybeFinish();
}

void Server::Impl::MaybeFinish() {
  if (!stopping || !conns.empty()) return;
  shutdown_timer.cancel();
  guard.reset();  // run() returns once the last handlers (overflow answers) are done
}

Server::Server(ServerConfig config, Handlers handlers)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(handlers))) {}

Server::~Server() = default;

Result<int> Server::Bind() {
  Impl& s = *impl_;
  RaiseFileLimit(s.config.max_connections);
  beast::error_code ec;
  tcp::resolver resolver(s.io);
  const auto results = resolver.resolve(s.config.host, std::to_string(s.config.port),
                                        tcp::resolver::passive, ec);
  if (ec || results.empty()) {
    return IoError(fmt::format("cannot resolve the address '{}': {}", s.config.host,
                               ec ? ec.message() : "no address"));
  }
  const tcp::endpoint ep = results.begin()->endpoint();
  s.acceptor.open(ep.protocol(), ec);
  // SO_REUSEADDR keeps restarts quick; SO_REUSEPORT is left off, so a second server cannot
  // bind a port in use and split its connections.
  if (!ec) s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(ep, ec);
  if (!ec) s.acceptor.listen(std::max(1, s.config.backlog), ec);
  if (ec) {
    return IoError(fmt::format("cannot bind to {}:{} ({}: in use, or not an address of this host)",
                               s.config.host, s.config.port, ec.message()));
  }
  return static_cast<int>(s.acceptor.local_endpoint().port());
}

Status Server::Run() {
  Impl& s = *impl_;
  if (!s.acceptor.is_open()) return IoError("the HTTP server is not bound");
  s.guard.emplace(s.io.get_executor());
  s.Accept();
  try {
    s.io.run();
  } catch (const std::exception& e) {
    s.pool.Join();
    return IoError(fmt::format("the HTTP server stopped with an error: {}", e.what()));
  }
  s.pool.Join();
  return Status::Ok();
}

void Server::Stop() {
  asio::post(impl_->io, [impl = impl_.get()] { impl->BeginShutdown(); });
}

int Server::num_connections() const { return impl_->num_conns.load(); }

int Server::num_worker_threads() const { return impl_->pool.num_threads(); }

}  // namespace kvserve::http
