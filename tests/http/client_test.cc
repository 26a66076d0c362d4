#include "http/client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvserve::http {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// One accepted connection of CannedServer, driven by blocking calls on the server's thread.
class Conn {
 public:
  explicit Conn(tcp::socket socket) : socket_(std::move(socket)) {}

  // The next request's bytes (head and Content-Length body), or "" when the client closed.
  std::string ReadRequest() {
    error_code ec;
    const size_t head_bytes =
        asio::read_until(socket_, asio::dynamic_buffer(pending_), "\r\n\r\n", ec);
    if (ec) return "";
    size_t body_bytes = 0;
    std::string head = pending_.substr(0, head_bytes);
    for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (size_t at = head.find("\r\ncontent-length:"); at != std::string::npos) {
      body_bytes = std::stoul(head.substr(at + 17));
    }
    if (pending_.size() < head_bytes + body_bytes) {
      asio::read(socket_, asio::dynamic_buffer(pending_),
                 asio::transfer_exactly(head_bytes + body_bytes - pending_.size()), ec);
      if (ec) return "";
    }
    std::string request = pending_.substr(0, head_bytes + body_bytes);
    pending_.erase(0, request.size());
    return request;
  }

  void Write(std::string_view bytes) {
    error_code ec;
    asio::write(socket_, asio::buffer(bytes.data(), bytes.size()), ec);
  }

  // Blocks until the client closes its end (or resets it).
  void WaitForClose() {
    char byte;
    error_code ec;
    while (!ec) socket_.read_some(asio::buffer(&byte, 1), ec);
  }

 private:
  tcp::socket socket_;
  std::string pending_;  // bytes read past the last request
};

// A loopback server that hands each accepted connection, in order, to `serve(conn, index)` on
// its own thread and closes the connection when `serve` returns. It records every request that
// a handler read.
class CannedServer {
 public:
  using Serve = std::function<void(Conn& conn, int index)>;

  explicit CannedServer(Serve serve)
      : serve_(std::move(serve)),
        acceptor_(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    Accept();
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~CannedServer() {
    ioc_.stop();
    thread_.join();
  }

  std::string origin() const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }
  int num_connections() const { return num_connections_.load(); }

 private:
  void Accept() {
    acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
      if (ec) return;
      Conn conn(std::move(socket));
      serve_(conn, num_connections_++);
      Accept();
    });
  }

  Serve serve_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  std::atomic<int> num_connections_{0};
  std::thread thread_;
};

// A flag one thread raises and another waits on, with a bound so that a broken client fails
// the test instead of hanging it.
class Signal {
 public:
  void Raise() {
    std::lock_guard lock(mu_);
    raised_ = true;
    cv_.notify_all();
  }
  bool Wait() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [this] { return raised_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool raised_ = false;
};

std::string Ok(std::string_view body, std::string_view extra_headers = "") {
  return "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n" + std::string(extra_headers) + "\r\n" +
         std::string(body);
}

std::string Chunk(std::string_view data) {
  char size[16];
  std::snprintf(size, sizeof size, "%zx", data.size());
  return std::string(size) + "\r\n" + std::string(data) + "\r\n";
}

constexpr std::string_view kChunkedHead =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";

std::unique_ptr<Client> MakeClient(const std::string& origin, double timeout_s = 10) {
  auto client = Client::Create(origin, {.timeout_s = timeout_s});
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return std::move(client).value();
}

TEST(ClientTest, SendReadsAContentLengthResponseAndSendsHostAgentAndBody) {
  std::string request;
  CannedServer server([&](Conn& conn, int) {
    request = conn.ReadRequest();
    conn.Write(Ok("{\"ok\":true}", "X-Reply: yes\r\n"));
  });
  auto client = MakeClient(server.origin());
  auto res = client->Send("POST", "/v1/echo?x=1", {{"X-Test", "1"}}, "hello");
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "{\"ok\":true}");
  EXPECT_EQ(FindHeader(res->headers, "x-reply"), "yes");
  EXPECT_EQ(request.substr(0, request.find("\r\n")), "POST /v1/echo?x=1 HTTP/1.1");
  const std::string port = server.origin().substr(server.origin().rfind(':') + 1);
  EXPECT_NE(request.find("\r\nHost: 127.0.0.1:" + port + "\r\n"), std::string::npos) << request;
  EXPECT_NE(request.find("\r\nUser-Agent: kvserve\r\n"), std::string::npos) << request;
  EXPECT_NE(request.find("\r\nX-Test: 1\r\n"), std::string::npos) << request;
  EXPECT_NE(request.find("\r\nContent-Length: 5\r\n"), std::string::npos) << request;
  EXPECT_EQ(request.substr(request.size() - 5), "hello");
}

TEST(ClientTest, AnErrorStatusIsAResponseNotAFailure) {
  CannedServer server([](Conn& conn, int) {
    conn.ReadRequest();
    conn.Write("HTTP/1.1 404 Not Found\r\nContent-Length: 7\r\n\r\nmissing");
  });
  auto res = MakeClient(server.origin())->Send("GET", "/nope", {});
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(res->body, "missing");
}

TEST(ClientTest, ABodyThatEndsWithTheConnectionIsReadToTheEnd) {
  CannedServer server([](Conn& conn, int) {
    conn.ReadRequest();
    conn.Write("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end");
  });
  auto res = MakeClient(server.origin())->Send("GET", "/", {});
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->body, "until the end");
}

TEST(ClientTest, StreamHandsOnEachChunkBeforeTheNextIsSent) {
  Signal first_piece_seen;
  CannedServer server([&](Conn& conn, int) {
    conn.ReadRequest();
    conn.Write(std::string(kChunkedHead) + Chunk("data: one\n\n"));
    // The second chunk is only written once the client has handed on the first, so the test
    // passes only if Stream delivers pieces as they arrive.
    if (!first_piece_seen.Wait()) return;
    conn.Write(Chunk("data: two\n\n") + Chunk("") + "\r\n");
  });
  auto client = MakeClient(server.origin());
  int status = 0;
  std::string content_type;
  std::string received;
  std::vector<std::string> pieces;
  const Status s = client->Stream(
      "POST", "/v1/completions", {{"Content-Type", "application/json"}}, "{}",
      [&](int st, const Headers& headers) {
        status = st;
        content_type = FindHeader(headers, "content-type");
      },
      [&](std::string_view data) {
        EXPECT_EQ(status, 200) << "on_head runs first";
        pieces.emplace_back(data);
        received += data;
        if (received == "data: one\n\n") first_piece_seen.Raise();
        return true;
      });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(content_type, "text/event-stream");
  EXPECT_EQ(received, "data: one\n\ndata: two\n\n");
  EXPECT_GE(pieces.size(), 2u);
}

TEST(ClientTest, ReusesTheKeptAliveConnection) {
  CannedServer server([](Conn& conn, int) {
    for (const char* body : {"first", "second"}) {
      if (conn.ReadRequest().empty()) return;
      conn.Write(Ok(body));
    }
    conn.WaitForClose();
  });
  auto client = MakeClient(server.origin());
  auto a = client->Send("GET", "/a", {});
  auto b = client->Send("GET", "/b", {});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(a->body, "first");
  EXPECT_EQ(b->body, "second");
  EXPECT_EQ(server.num_connections(), 1);
}

TEST(ClientTest, ResendsOnANewConnectionWhenTheServerClosedTheKeptAliveOne) {
  std::atomic<int> num_requests{0};
  CannedServer server([&](Conn& conn, int index) {
    if (conn.ReadRequest().empty()) return;
    ++num_requests;
    // The first connection is closed right after its response although it was not marked
    // "Connection: close", as servers do when their idle timeout fires.
    conn.Write(Ok(index == 0 ? "first" : "second"));
  });
  auto client = MakeClient(server.origin());
  auto a = client->Send("GET", "/a", {});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = client->Send("POST", "/b", {}, "body");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->body, "second");
  EXPECT_EQ(server.num_connections(), 2);
  EXPECT_EQ(num_requests.load(), 2);
}

TEST(ClientTest, HonoursConnectionCloseFromTheServer) {
  CannedServer server([](Conn& conn, int index) {
    if (conn.ReadRequest().empty()) return;
    conn.Write(Ok(index == 0 ? "first" : "second", "Connection: close\r\n"));
  });
  auto client = MakeClient(server.origin());
  auto a = client->Send("GET", "/a", {});
  auto b = client->Send("GET", "/b", {});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->body, "second");
  EXPECT_EQ(server.num_connections(), 2);
}

TEST(ClientTest, ANewConnectionThatGetsNoResponseIsNotRetried) {
  CannedServer server([](Conn& conn, int) { conn.ReadRequest(); });
  auto res = MakeClient(server.origin())->Send("GET", "/", {});
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), StatusCode::kIoError);
  EXPECT_NE(res.status().message().find("no response from 127.0.0.1:"), std::string::npos)
      << res.status().message();
  EXPECT_EQ(server.num_connections(), 1);
}

TEST(ClientTest, AResponseThatBreaksOffIsAnErrorAfterItsHead) {
  CannedServer server([](Conn& conn, int) {
    conn.ReadRequest();
    conn.Write("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
  });
  int status = 0;
  std::string received;
  const Status s = MakeClient(server.origin())
                       ->Stream(
                           "GET", "/", {}, "", [&](int st, const Headers&) { status = st; },
                           [&](std::string_view data) {
                             received += data;
                             return true;
                           });
  EXPECT_EQ(status, 200);
  EXPECT_EQ(received, "abc");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("broke off"), std::string::npos) << s.message();
}

TEST(ClientTest, ReturningFalseFromOnDataStopsAndDropsTheConnection) {
  Signal client_closed;
  CannedServer server([&](Conn& conn, int index) {
    conn.ReadRequest();
    if (index == 0) {
      conn.Write(std::string(kChunkedHead) + Chunk("data: one\n\n"));
      conn.WaitForClose();
      client_closed.Raise();
    } else {
      conn.Write(Ok("next"));
    }
  });
  auto client = MakeClient(server.origin());
  int num_calls = 0;
  const Status s = client->Stream("GET", "/", {}, "", nullptr, [&](std::string_view) {
    ++num_calls;
    return false;
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(num_calls, 1);
  EXPECT_TRUE(client_closed.Wait());
  auto next = client->Send("GET", "/", {});
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->body, "next");
  EXPECT_EQ(server.num_connections(), 2);
}

TEST(ClientTest, ConnectionRefusedIsAnIoError) {
  uint16_t port = 0;
  {
    asio::io_context ioc;
    tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port = acceptor.local_endpoint().port();
  }  // closed: nothing listens on `port` now
  auto res = MakeClient("http://127.0.0.1:" + std::to_string(port))->Send("GET", "/", {});
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), StatusCode::kIoError);
  EXPECT_EQ(res.status().message(),
            "cannot connect to 127.0.0.1:" + std::to_string(port) + ": Connection refused");
}

TEST(ClientTest, AServerThatNeverAnswersTimesOut) {
  CannedServer server([](Conn& conn, int) {
    conn.ReadRequest();
    conn.WaitForClose();
  });
  auto res = MakeClient(server.origin(), 0.3)->Send("GET", "/", {});
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), StatusCode::kIoError);
  EXPECT_NE(res.status().message().find("timed out after 0.3 s reading the response"),
            std::string::npos)
      << res.status().message();
}

TEST(ClientTest, StopEndsAWaitingStreamAndClosesItsConnection) {
  std::atomic<bool> request_read{false};
  Signal closed;
  CannedServer server([&](Conn& conn, int) {
    conn.ReadRequest();
    request_read.store(true);
    conn.WaitForClose();  // the server never answers; only the client's close ends this
    closed.Raise();
  });
  auto client = MakeClient(server.origin());
  bool head_seen = false;
  const Status s = client->Stream(
      "POST", "/v1/completions", {}, "{}", [&](int, const Headers&) { head_seen = true; },
      [](std::string_view) { return true; }, [&] { return request_read.load(); });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("stopped by its caller"), std::string::npos) << s.message();
  EXPECT_FALSE(head_seen);
  EXPECT_TRUE(closed.Wait());
  EXPECT_EQ(server.num_connections(), 1);  // a stopped request is never sent again
}

TEST(ClientTest, AShortConnectTimeoutLeavesTheReadTimeoutLong) {
  auto client = Client::Create("http://127.0.0.1:1", {.timeout_s = 600, .connect_timeout_s = 0.5});
  ASSERT_TRUE(client.ok());
  EXPECT_FALSE(Client::Create("http://127.0.0.1:1", {.connect_timeout_s = -1}).ok());
}

TEST(ClientTest, HttpsIsRefused) {
  auto client = Client::Create("https://127.0.0.1:8443");
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(client.status().message().find("https is not supported"), std::string::npos);
}

TEST(ClientTest, BadOriginsAreRefused) {
  for (const char* origin :
       {"127.0.0.1:8080", "ftp://host", "http://", "http://:80", "http://host:", "http://host:port",
        "http://host:0", "http://host:65536", "http://host/v1", "http://[::1"}) {
    auto client = Client::Create(origin);
    EXPECT_FALSE(client.ok()) << origin;
    EXPECT_EQ(client.status().code(), StatusCode::kInvalidArgument) << origin;
  }
  for (const char* origin : {"http://host", "http://host:8080/", "http://[::1]:8080"}) {
    EXPECT_TRUE(Client::Create(origin).ok()) << origin;
  }
  EXPECT_FALSE(Client::Create("http://host", {.timeout_s = 0}).ok());
}

TEST(ClientTest, BadRequestPartsAreRefusedBeforeSending) {
  auto client = MakeClient("http://127.0.0.1:1");
  EXPECT_EQ(client->Send("GET", "/", {{"X-Bad", "a\r\nInjected: 1"}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Send("GE T", "/", {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Send("GET", "no-slash", {}).status().code(), StatusCode::kInvalidArgument);
}

TEST(HeaderLookupTest, NamesMatchWithoutRegardToAsciiCase) {
  const Headers headers = {{"Content-Type", "a"}, {"X-Id", "1"}, {"x-id", "2"}};
  EXPECT_EQ(FindHeader(headers, "content-type"), "a");
  EXPECT_EQ(FindHeader(headers, "X-ID"), "1");
  EXPECT_EQ(FindHeader(headers, "missing"), "");
  EXPECT_EQ(CountHeaders(headers, "x-Id"), 2u);
  EXPECT_EQ(CountHeaders(headers, "X-I"), 0u);
}

TEST(StatusTextTest, StandardPhrasesAndUnknown) {
  EXPECT_EQ(StatusText(200), "OK");
  EXPECT_EQ(StatusText(404), "Not Found");
  EXPECT_EQ(StatusText(503), "Service Unavailable");
  EXPECT_EQ(StatusText(299), "Unknown");
  EXPECT_EQ(StatusText(-1), "Unknown");
}

}  // namespace
}  // namespace kvserve::http
