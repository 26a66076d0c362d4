// The event-driven server in-process: routing between the I/O thread and workers, streams,
// pipelining, limits, deadlines, the connection cap, a client that leaves while a worker serves
// it, and Stop() with requests in flight. Also run under ThreadSanitizer. Waits are on events
// (responses, closes, condition variables); the deadlines under test are short, and no test
// asserts how long anything took.
#include "http/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "http/client.h"

namespace kvserve::http {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// The handlers of these tests: GET /quick on the I/O thread; POST /echo echoes the body from a
// worker; GET /stream sends `n` pieces (from the query) as a chunked stream; GET /wait blocks
// its worker until the client leaves (or `release` is set) and reports what it saw.
struct TestHandlers {
  std::mutex mu;
  std::condition_variable cv;
  bool wait_started = false;
  bool saw_gone = false;
  bool release = false;
  bool endless_started = false;
  int gate_in = 0;      // requests inside /gate
  int gate_target = 0;  // /gate answers once this many are inside at the same time

  Handlers Make() {
    Handlers h;
    h.check = [](const Request& head) -> std::optional<Response> {
      if (head.path == "/forbidden") {
        Response r;
        r.status = 403;
        r.body = "no";
        return r;
      }
      return std::nullopt;
    };
    h.quick = [](const Request& req) -> std::optional<Response> {
      if (req.path != "/quick") return std::nullopt;
      Response r;
      r.content_type = "text/plain";
      r.body = "quick:" + req.request_id;
      return r;
    };
    h.serve = [this](Request& req, Exchange& ex) {
      if (req.path == "/echo") {
        Response r;
        r.content_type = "text/plain";
        r.body = req.body;
        ex.Send(std::move(r));
      } else if (req.path == "/stream") {
        const int n = std::stoi(req.target.substr(req.target.find('=') + 1));
        Response head;
        head.content_type = "text/event-stream";
        if (!ex.BeginStream(std::move(head))) return;
        for (int i = 0; i < n; ++i) {
          if (!ex.Write("piece " + std::to_string(i) + "\n")) return;
        }
        ex.End();
      } else if (req.path == "/wait") {
        std::unique_lock<std::mutex> lock(mu);
        wait_started = true;
        cv.notify_all();
        // A worker checks ClientGone between steps of its work, as generation does.
        while (!release && !ex.ClientGone()) cv.wait_for(lock, std::chrono::milliseconds(5));
        saw_gone = ex.ClientGone();
        cv.notify_all();
        if (!saw_gone) {
          lock.unlock();
          Response r;
          r.body = "released";
          ex.Send(std::move(r));
        }
      } else if (req.path == "/gate") {
        {
          std::unique_lock<std::mutex> lock(mu);
          ++gate_in;
          cv.notify_all();
          cv.wait(lock, [&] { return gate_in >= gate_target; });
        }
        Response r;
        r.body = "through";
        ex.Send(std::move(r));
      } else if (req.path == "/endless") {
        Response head;
        if (!ex.BeginStream(std::move(head))) return;
        {
          std::lock_guard<std::mutex> lock(mu);
          endless_started = true;
          cv.notify_all();
        }
        const std::string piece(4096, 'x');
        while (ex.Write(piece)) {
        }
      }
    };
    return h;
  }
};

class ServerTest : public ::testing::Test {
 protected:
  void Start(ServerConfig config = {}) {
    config.host = "127.0.0.1";
    config.port = 0;
    server_ = std::make_unique<Server>(config, handlers_.Make());
    Result<int> port = server_->Bind();
    ASSERT_TRUE(port.ok()) << port.status().message();
    port_ = *port;
    runner_ = std::thread([this] { run_status_ = server_->Run(); });
  }
  void TearDown() override {
    if (server_) {
      server_->Stop();
      runner_.join();
      EXPECT_TRUE(run_status_.ok());
    }
  }
  std::unique_ptr<Client> NewClient() {
    auto c = Client::Create("http://127.0.0.1:" + std::to_string(port_), ClientOptions{30});
    EXPECT_TRUE(c.ok());
    return std::move(c).value();
  }
  // Writes `bytes` on a new connection and reads until the server closes it.
  std::string Raw(const std::string& bytes, bool half_close = false) {
    asio::io_context io;
    tcp::socket s(io);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port_)));
    asio::write(s, asio::buffer(bytes));
    if (half_close) s.shutdown(tcp::socket::shutdown_send);
    std::string out;
    boost::system::error_code ec;
    asio::read(s, asio::dynamic_buffer(out), ec);
    return out;
  }

  TestHandlers handlers_;
  std::unique_ptr<Server> server_;
  std::thread runner_;
  Status run_status_;
  int port_ = 0;
};

TEST_F(ServerTest, QuickAndWorkerRoutesAnswerWithTheRequestId) {
  Start();
  auto client = NewClient();
  Result<ClientResponse> quick = client->Send("GET", "/quick", {{"X-Request-Id", "abc-1"}});
  ASSERT_TRUE(quick.ok()) << quick.status().message();
  EXPECT_EQ(quick->status, 200);
  EXPECT_EQ(quick->body, "quick:abc-1");
  EXPECT_EQ(FindHeader(quick->headers, "x-request-id"), "abc-1");
  Result<ClientResponse> echo = client->Send("POST", "/echo", {}, "hello body");
  ASSERT_TRUE(echo.ok());
  EXPECT_EQ(echo->body, "hello body");
  Result<ClientResponse> early = client->Send("GET", "/forbidden", {});
  ASSERT_TRUE(early.ok());
  EXPECT_EQ(early->status, 403);
}

TEST_F(ServerTest, AStreamArrivesWholeAndTheConnectionIsKeptForTheNextRequest) {
  Start();
  auto client = NewClient();
  for (int round = 0; round < 3; ++round) {
    std::string body;
    int status = 0;
    Status s = client->Stream(
        "GET", "/stream?n=50", {}, {}, [&](int st, const Headers&) { status = st; },
        [&](std::string_view d) {
          body.append(d);
          return true;
        });
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(status, 200);
    std::string want;
    for (int i = 0; i < 50; ++i) want += "piece " + std::to_string(i) + "\n";
    EXPECT_EQ(body, want);
  }
}

TEST_F(ServerTest, PipelinedRequestsAreAnsweredInOrder) {
  Start();
  const std::string out = Raw(
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nfirst"
      "GET /quick HTTP/1.1\r\nHost: x\r\nX-Request-Id: two\r\n\r\n"
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nthird");
  const size_t a = out.find("first"), b = out.find("quick:two"), c = out.find("third");
  ASSERT_NE(a, std::string::npos) << out;
  ASSERT_NE(b, std::string::npos) << out;
  ASSERT_NE(c, std::string::npos) << out;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
}

TEST_F(ServerTest, LimitsAndFramingAreRefusedWithTheirStatus) {
  ServerConfig config;
  config.limits.max_header_bytes = 1024;
  config.limits.max_header_fields = 10;
  config.limits.max_body_bytes = 100;
  Start(config);
  const auto status_of = [](const std::string& out) { return out.substr(0, 12); };
  EXPECT_EQ(status_of(Raw("GET /quick HTTP/1.1\r\nX: " + std::string(2000, 'a') + "\r\n\r\n")),
            "HTTP/1.1 431");
  std::string many = "GET /quick HTTP/1.1\r\n";
  for (int i = 0; i < 12; ++i) many += "A" + std::to_string(i) + ": b\r\n";
  EXPECT_EQ(status_of(Raw(many + "\r\n")), "HTTP/1.1 431");
  EXPECT_EQ(status_of(Raw("POST /echo HTTP/1.1\r\nContent-Length: 101\r\n\r\n")), "HTTP/1.1 413");
  EXPECT_EQ(status_of(Raw("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "65\r\n" + std::string(101, 'z') + "\r\n0\r\n\r\n")),
            "HTTP/1.1 413");
  EXPECT_EQ(status_of(Raw("POST /echo HTTP/1.1\r\n\r\n")), "HTTP/1.1 411");
  EXPECT_EQ(status_of(Raw("POST /echo HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc")),
            "HTTP/1.1 400");
  EXPECT_EQ(status_of(Raw("POST /echo HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n")),
            "HTTP/1.1 400");
  EXPECT_EQ(status_of(Raw("GARBAGE\r\n\r\n")), "HTTP/1.1 400");
  // A coding other than chunked is not implemented (RFC 9112, 6.1): 501, and the connection
  // closes (the body's end is unknown); chunked applied twice is malformed.
  for (const char* coding : {"gzip", "gzip, chunked", "chunked, gzip", "identity"}) {
    const std::string out =
        Raw(fmt::format("POST /echo HTTP/1.1\r\nTransfer-Encoding: {}\r\n\r\nabc", coding));
    EXPECT_EQ(status_of(out), "HTTP/1.1 501") << coding;
    EXPECT_NE(out.find("Connection: close"), std::string::npos) << out;
  }
  EXPECT_EQ(status_of(Raw("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n")),
            "HTTP/1.1 400");
  EXPECT_EQ(status_of(Raw("GET /quick HTTP/1.2\r\n\r\n")), "HTTP/1.1 400");
  // A chunked body's trailer fields count against the field limit, and their bytes are bounded.
  std::string trailers;
  for (int i = 0; i < 12; ++i) trailers += "T" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(status_of(Raw("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "3\r\nabc\r\n0\r\n" + trailers + "\r\n")),
            "HTTP/1.1 431");
  EXPECT_EQ(status_of(Raw("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "3\r\nabc\r\n0\r\nBig: " + std::string(200000, 'b') + "\r\n\r\n")),
            "HTTP/1.1 431");
  // A chunked body within the limit is read and served.
  const std::string chunked = Raw(
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
      "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
  EXPECT_EQ(status_of(chunked), "HTTP/1.1 200");
  EXPECT_NE(chunked.find("abcde"), std::string::npos);
}

TEST_F(ServerTest, AHeadOrBodyPastItsDeadlineIsA408) {
  ServerConfig config;
  config.header_timeout_s = 0.2;
  config.read_timeout_s = 0.4;
  Start(config);
  // The sockets stay open and silent: only the server's deadline can end them.
  EXPECT_EQ(Raw("GET /quick HTTP/1.1\r\nHost: x\r\n").substr(0, 12), "HTTP/1.1 408");
  EXPECT_EQ(Raw("POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc").substr(0, 12),
            "HTTP/1.1 408");
}

TEST_F(ServerTest, AClientThatLeavesIsSeenByTheWorkerServingIt) {
  Start();
  {
    asio::io_context io;
    tcp::socket s(io);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port_)));
    asio::write(s, asio::buffer(std::string("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")));
    std::unique_lock<std::mutex> lock(handlers_.mu);
    handlers_.cv.wait(lock, [&] { return handlers_.wait_started; });
  }  // the socket closes here
  std::unique_lock<std::mutex> lock(handlers_.mu);
  handlers_.cv.wait(lock, [&] { return handlers_.saw_gone; });
  EXPECT_TRUE(handlers_.saw_gone);
}

TEST_F(ServerTest, ConnectionsBeyondTheCapGet503AndTheOthersAreServed) {
  ServerConfig config;
  config.max_connections = 3;
  config.idle_timeout_s = 60;
  Start(config);
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(NewClient());
    ASSERT_EQ(held.back()->Send("GET", "/quick", {})->status, 200);
  }
  const std::string over = Raw("GET /quick HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(over.substr(0, 12), "HTTP/1.1 503") << over;
  EXPECT_NE(over.find("Retry-After: 1"), std::string::npos);
  // The held connections still work.
  for (auto& c : held) EXPECT_EQ(c->Send("GET", "/quick", {})->status, 200);
}

TEST_F(ServerTest, ManyClientsAtOnceAllGetTheirAnswers) {
  Start();
  constexpr int kThreads = 8, kRounds = 20;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto client = NewClient();
      for (int r = 0; r < kRounds; ++r) {
        const std::string body = fmt::format("t{}r{}", t, r);
        if (r % 3 == 0) {
          std::string got;
          Status s = client->Stream("GET", "/stream?n=5", {}, {}, [](int, const Headers&) {},
                                    [&](std::string_view d) {
                                      got.append(d);
                                      return true;
                                    });
          if (s.ok() && got.find("piece 4") != std::string::npos) ++ok;
        } else {
          Result<ClientResponse> res = client->Send("POST", "/echo", {}, body);
          if (res.ok() && res->body == body) ++ok;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kThreads * kRounds);
}

TEST_F(ServerTest, WorkerThreadsOfABurstEndAfterTheirIdleTimeout) {
  ServerConfig config;
  config.num_workers = 16;
  config.worker_idle_timeout_s = 0.02;
  Start(config);
  constexpr int kBurst = 6;
  handlers_.gate_target = kBurst;  // every request of the burst holds a worker until all are in
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < kBurst; ++i) {
    clients.emplace_back([&] {
      auto client = NewClient();
      Result<ClientResponse> res = client->Send("POST", "/gate", {}, "x");
      if (res.ok() && res->body == "through") ++ok;
    });
  }
  {
    std::unique_lock<std::mutex> lock(handlers_.mu);
    handlers_.cv.wait(lock, [&] { return handlers_.gate_in == kBurst; });
    // Each of them is on a thread of its own (none returns before all are in).
    EXPECT_EQ(server_->num_worker_threads(), kBurst);
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), kBurst);
  // Idle past their timeout, the burst's threads end. The wait is on the count, bounded only so
  // that a broken pool fails instead of hanging.
  for (int i = 0; i < 6000 && server_->num_worker_threads() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server_->num_worker_threads(), 0);
  // A later request starts a thread again (and the ended ones are joined).
  auto client = NewClient();
  Result<ClientResponse> res = client->Send("POST", "/echo", {}, "again");
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->body, "again");
}

TEST_F(ServerTest, StopEndsWithAStalledStreamAndAnIdleConnectionOpen) {
  ServerConfig config;
  config.shutdown_timeout_s = 0.2;
  config.write_timeout_s = 60;  // only the shutdown timeout can end the stalled stream
  Start(config);
  asio::io_context io;
  tcp::socket stalled(io), idle(io);
  const tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port_));
  stalled.connect(ep);
  idle.connect(ep);
  // The client never reads: the worker's writes stall once the socket buffers are full.
  asio::write(stalled, asio::buffer(std::string("GET /endless HTTP/1.1\r\nHost: x\r\n\r\n")));
  {
    std::unique_lock<std::mutex> lock(handlers_.mu);
    handlers_.cv.wait(lock, [&] { return handlers_.endless_started; });
  }
  server_->Stop();
  runner_.join();
  EXPECT_TRUE(run_status_.ok());
  server_.reset();
}

}  // namespace
}  // namespace kvserve::http
