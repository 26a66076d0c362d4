// The router in process in front of fake replicas (http::Server instances whose answers each test
// scripts): passthrough of whole responses, streams and errors, header handling, retries past a
// dead replica, client departure reaching the replica, keys, health, and a cache-aware choice from
// the block index. Also run under ThreadSanitizer. Waits are on events, never on time.
#include "router/proxy.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "http/client.h"
#include "http/server.h"
#include "router/prompt_hasher.h"
#include "router/router.h"

namespace kvserve::router {
namespace proxy_test {
namespace {

using nlohmann::json;

// A fake replica: answers /health with 200 on the I/O thread and hands every other request to
// the test's `serve`, recording what arrived.
class FakeReplica {
 public:
  using Serve = std::function<void(http::Request&, http::Exchange&)>;

  explicit FakeReplica(Serve serve) : serve_(std::move(serve)) {
    http::Handlers h;
    h.quick = [](const http::Request& req) -> std::optional<http::Response> {
      if (req.path != "/health") return std::nullopt;
      http::Response r;
      r.body = "{}";
      return r;
    };
    h.serve = [this](http::Request& req, http::Exchange& ex) {
      {
        std::lock_guard lock(mu_);
        requests_.push_back(req);
      }
      serve_(req, ex);
    };
    http::ServerConfig c;
    c.port = 0;
    server_ = std::make_unique<http::Server>(c, std::move(h));
    port_ = *server_->Bind();
    thread_ = std::thread([this] { (void)server_->Run(); });
  }
  ~FakeReplica() { Stop(); }

  void Stop() {
    if (!thread_.joinable()) return;
    server_->Stop();
    thread_.join();
  }
  std::string origin() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<http::Request> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }
  size_t num_requests(std::string_view path) {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const auto& r : requests_) n += r.path == path ? 1 : 0;
    return n;
  }

 private:
  Serve serve_;
  std::unique_ptr<http::Server> server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<http::Request> requests_;
};

http::Response Json(const json& j, int status = 200) {
  http::Response r;
  r.status = status;
  r.body = j.dump();
  return r;
}

// A replica that answers generation requests with its name and the usage it is told.
FakeReplica::Serve Answers(std::string name, int cached_tokens = 0) {
  return [name, cached_tokens](http::Request& req, http::Exchange& ex) {
    if (req.path == "/tokenize") {
      ex.Send(Json({{"tokens", json::array({1, 2, 3, 4, 5, 6, 7, 8, 9})}, {"count", 9}}));
      return;
    }
    ex.Send(Json({{"replica", name},
                  {"usage",
                   {{"prompt_tokens", 9},
                    {"completion_tokens", 1},
                    {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}}}}));
  };
}

class RouterUnderTest {
 public:
  explicit RouterUnderTest(RouterConfig c) {
    c.server.port = 0;
    c.start_health_thread = false;
    router_ = std::make_unique<Router>(std::move(c));
    port_ = *router_->Bind();
    thread_ = std::thread([this] { (void)router_->Run(); });
  }
  ~RouterUnderTest() {
    router_->Stop();
    thread_.join();
  }
  Router& operator*() { return *router_; }
  Router* operator->() { return router_.get(); }
  std::string origin() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::unique_ptr<http::Client> client() {
    return std::move(http::Client::Create(origin(), {.timeout_s = 30})).value();
  }

 private:
  std::unique_ptr<Router> router_;
  int port_ = 0;
  std::thread thread_;
};

RouterConfig Config(std::vector<FakeReplica*> replicas, PolicyKind policy) {
  RouterConfig c;
  for (FakeReplica* r : replicas) c.replicas.push_back(ReplicaSpec{r->origin(), {}});
  c.policy = policy;
  c.connect_timeout_s = 5;
  return c;
}

const http::Headers kJson = {{"Content-Type", "application/json"}};

std::string ReplicaOf(const http::ClientResponse& r) {
  return json::parse(r.body).value("replica", std::string("?"));
}

// The fake replicas tokenize every prompt as 1..9; with blocks of 4, its two full blocks.
const std::vector<int32_t> kPromptTokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};

// Replica `replica` announces (on "GPU") the prompt's full blocks hashed with `salt`.
void AnnouncePromptBlocks(RouterUnderTest& router, int replica, const std::string& salt = "") {
  KvEventBatch batch;
  batch.events.emplace_back(BlockStoredEvent{PromptHasher("").Hash(kPromptTokens, 4, salt),
                                             std::nullopt, 4, std::nullopt, "GPU"});
  router->index().Apply(replica, batch);
}

TEST(RouterProxyTest, WholeResponsesPassUnchangedAndHeadersAreForwardedWithTheReplicaKey) {
  FakeReplica a([](http::Request&, http::Exchange& ex) {
    http::Response r = Json({{"id", "x"}}, 201);
    r.headers.emplace_back("X-Upstream", "yes");
    ex.Send(std::move(r));
  });
  RouterConfig c = Config({&a}, PolicyKind::kRoundRobin);
  c.replica_api_key = "replica-key";
  RouterUnderTest router(c);
  auto res = router.client()->Send("POST", "/v1/completions?x=1",
                                   {{"Content-Type", "application/json"},
                                    {"Authorization", "Bearer client-key"},
                                    {"X-Request-Id", "req-1"},
                                    {"X-Custom", "kept"}},
                                   R"({"prompt":"hi"})");
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->status, 201);
  EXPECT_EQ(res->body, R"({"id":"x"})");
  EXPECT_EQ(http::FindHeader(res->headers, "X-Upstream"), "yes");
  EXPECT_EQ(http::FindHeader(res->headers, "X-Request-Id"), "req-1");
  std::vector<http::Request> seen = a.requests();
  // (The router also asked GET /v1/models without a key when the replica joined the pool.)
  std::erase_if(seen, [](const http::Request& r) { return r.path != "/v1/completions"; });
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].target, "/v1/completions?x=1");
  EXPECT_EQ(seen[0].body, R"({"prompt":"hi"})");
  EXPECT_EQ(seen[0].header("Authorization"), "Bearer replica-key");
  EXPECT_EQ(seen[0].header("X-Request-Id"), "req-1");
  EXPECT_EQ(seen[0].header("X-Custom"), "kept");
  EXPECT_EQ(http::CountHeaders(seen[0].headers, "Authorization"), 1u);
}

TEST(RouterProxyTest, ReplicaErrorsPassThroughUnchanged) {
  FakeReplica a([](http::Request&, http::Exchange& ex) {
    http::Response r = Json({{"error", {{"message", "bad"}, {"code", "x"}}}}, 400);
    ex.Send(std::move(r));
  });
  RouterUnderTest router(Config({&a}, PolicyKind::kRoundRobin));
  auto res = router.client()->Send("POST", "/v1/chat/completions", kJson, "{}");
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(res->body, R"({"error":{"code":"x","message":"bad"}})");
}

TEST(RouterProxyTest, AStreamReachesTheClientPieceByPieceAsTheReplicaSendsIt) {
  std::mutex mu;
  std::condition_variable cv;
  bool first_arrived = false;
  FakeReplica a([&](http::Request&, http::Exchange& ex) {
    http::Response head;
    head.content_type = "text/event-stream";
    ex.BeginStream(std::move(head));
    ex.Write("data: {\"n\":1}\n\n");
    {
      // The second piece waits until the client has the first: a router that buffered the
      // stream would never deliver it.
      std::unique_lock lock(mu);
      cv.wait_for(lock, std::chrono::seconds(20), [&] { return first_arrived; });
    }
    ex.Write("data: [DONE]\n\n");
    ex.End();
  });
  RouterUnderTest router(Config({&a}, PolicyKind::kRoundRobin));
  std::string got;
  std::string content_type;
  const Status s = router.client()->Stream(
      "POST", "/v1/completions", kJson, R"({"stream":true})",
      [&](int status, const http::Headers& h) {
        EXPECT_EQ(status, 200);
        content_type = std::string(http::FindHeader(h, "Content-Type"));
      },
      [&](std::string_view data) {
        got.append(data);
        if (got.find("\"n\":1") != std::string::npos) {
          std::lock_guard lock(mu);
          first_arrived = true;
          cv.notify_all();
        }
        return true;
      });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(first_arrived);
  EXPECT_EQ(content_type, "text/event-stream");
  EXPECT_EQ(got, "data: {\"n\":1}\n\ndata: [DONE]\n\n");
}

TEST(RouterProxyTest, RoundRobinTakesTurns) {
  FakeReplica a(Answers("a"));
  FakeReplica b(Answers("b"));
  RouterUnderTest router(Config({&a, &b}, PolicyKind::kRoundRobin));
  auto client = router.client();
  std::vector<std::string> order;
  for (int i = 0; i < 4; ++i) {
    auto res = client->Send("POST", "/v1/completions", kJson, R"({"prompt":"x"})");
    ASSERT_TRUE(res.ok());
    order.push_back(ReplicaOf(*res));
  }
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "a", "b"}));
}

TEST(RouterProxyTest, ARequestToADeadReplicaGoesToAnotherAndTheDeadOneLeavesThePool) {
  FakeReplica a(Answers("a"));
  FakeReplica b(Answers("b"));
  RouterUnderTest router(Config({&a, &b}, PolicyKind::kRoundRobin));
  a.Stop();  // still in the pool: no health round has run since
  ASSERT_TRUE(router->health().healthy(0));
  auto client = router.client();
  for (int i = 0; i < 3; ++i) {
    auto res = client->Send("POST", "/v1/completions", kJson, R"({"prompt":"x"})");
    ASSERT_TRUE(res.ok());
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(ReplicaOf(*res), "b");
  }
  EXPECT_FALSE(router->health().healthy(0));
  auto metrics = client->Send("GET", "/metrics", {});
  ASSERT_TRUE(metrics.ok());
  EXPECT_NE(metrics->body.find("kvserve_router:retries_total{replica=\"" + a.origin() + "\"} 1"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("kvserve_router:replica_healthy{replica=\"" + a.origin() + "\"} 0"),
            std::string::npos);
}

TEST(RouterProxyTest, WithNoReplicaLeftTheClientGetsA503AndHealthSaysSo) {
  FakeReplica a(Answers("a"));
  RouterUnderTest router(Config({&a}, PolicyKind::kLeastLoad));
  a.Stop();
  router->health().CheckAll();
  auto client = router.client();
  auto health = client->Send("GET", "/health", {});
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->status, 503);
  auto res = client->Send("POST", "/v1/messages", kJson, "{}");
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(json::parse(res->body)["error"]["type"], "overloaded_error");  // Anthropic's shape
}

TEST(RouterProxyTest, AClientThatLeavesEndsTheUpstreamRequest) {
  std::mutex mu;
  std::condition_variable cv;
  bool started = false;
  bool replica_saw_gone = false;
  FakeReplica a([&](http::Request&, http::Exchange& ex) {
    {
      std::lock_guard lock(mu);
      started = true;
      cv.notify_all();
    }
    // A long generation: it ends when the router drops the connection.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!ex.ClientGone() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::lock_guard lock(mu);
    replica_saw_gone = ex.ClientGone();
    cv.notify_all();
  });
  RouterUnderTest router(Config({&a}, PolicyKind::kRoundRobin));
  std::thread client_thread([&] {
    auto client = router.client();
    (void)client->Stream("POST", "/v1/completions", kJson, "{}", nullptr, nullptr, [&] {
      std::lock_guard lock(mu);
      return started;  // leave as soon as the replica is working on it
    });
  });
  client_thread.join();
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return replica_saw_gone; }));
}

TEST(RouterProxyTest, KeysAreRequiredWhereTheReplicasRequireThem) {
  FakeReplica a(Answers("a"));
  RouterConfig c = Config({&a}, PolicyKind::kRoundRobin);
  c.api_keys = {"k1"};
  RouterUnderTest router(c);
  auto client = router.client();
  auto res = client->Send("POST", "/v1/completions", kJson, "{}");
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->status, 401);
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "invalid_api_key");
  res = client->Send("POST", "/v1/completions", {{"x-api-key", "k1"}}, "{}");
  EXPECT_EQ(res->status, 200);
  res = client->Send("POST", "/v1/completions", {{"Authorization", "Bearer k1"}}, "{}");
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(a.requests().back().header("Authorization"), "Bearer k1");  // passed on as it came
  res = client->Send("GET", "/health", {});
  EXPECT_EQ(res->status, 200);
  res = client->Send("GET", "/v1/nope", {{"x-api-key", "k1"}});
  EXPECT_EQ(res->status, 404);
  res = client->Send("GET", "/v1/completions", {{"x-api-key", "k1"}});
  EXPECT_EQ(res->status, 405);
}

TEST(RouterProxyTest, CacheAwareSendsAPromptToTheReplicaHoldingItsBlocksAndCountsTheHit) {
  FakeReplica a(Answers("a"));
  FakeReplica b(Answers("b", /*cached_tokens=*/8));
  FakeReplica c(Answers("c"));
  RouterUnderTest router(Config({&a, &b, &c}, PolicyKind::kCacheAware));
  AnnouncePromptBlocks(router, 1);  // replica b holds both full blocks
  auto client = router.client();
  for (int i = 0; i < 2; ++i) {
    auto res = client->Send("POST", "/v1/chat/completions", kJson,
                            R"({"messages":[{"role":"user","content":"hi"}]})");
    ASSERT_TRUE(res.ok());
    EXPECT_EQ(ReplicaOf(*res), "b");
  }
  auto metrics = client->Send("GET", "/metrics", {});
  const std::string b_label = "replica=\"" + b.origin() + "\"";
  EXPECT_NE(metrics->body.find("kvserve_router:requests_total{" + b_label +
                               ",policy=\"cache-aware\",rule=\"cache_match\"} 2"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("kvserve_router:predicted_cached_tokens_total{" + b_label + "} 16"),
            std::string::npos);
  EXPECT_NE(metrics->body.find("kvserve_router:reported_cached_tokens_total{" + b_label + "} 16"),
            std::string::npos);
  // Each request was tokenized once, by a replica in the pool.
  EXPECT_EQ(a.num_requests("/tokenize") + b.num_requests("/tokenize") + c.num_requests("/tokenize"),
            2u);
}

TEST(RouterProxyTest, ACacheKeySticksToItsReplica) {
  FakeReplica a(Answers("a"));
  FakeReplica b(Answers("b"));
  RouterConfig c = Config({&a, &b}, PolicyKind::kCacheAware);
  c.block_size = 4;  // no events: prompts are still hashed, for the pending blocks
  RouterUnderTest router(c);
  auto client = router.client();
  std::vector<std::string> order;
  for (int i = 0; i < 3; ++i) {
    auto res =
        client->Send("POST", "/v1/chat/completions", kJson,
                     R"({"messages":[{"role":"user","content":"hi"}],"prompt_cache_key":"k"})");
    ASSERT_TRUE(res.ok());
    order.push_back(ReplicaOf(*res));
  }
  EXPECT_EQ(order[1], order[0]);
  EXPECT_EQ(order[2], order[0]);
}

TEST(RouterProxyTest, ReplicasWithKeysHaveEachTenantsBlocksHashedWithItsKey) {
  // Replicas that refuse requests without a key, and salt each tenant's blocks with it.
  const auto keyed = [](std::string name) {
    FakeReplica::Serve answer = Answers(name);
    return [answer](http::Request& req, http::Exchange& ex) {
      if (req.header("Authorization").empty()) {
        ex.Send(Json({{"error", {{"message", "missing API key"}}}}, 401));
        return;
      }
      answer(req, ex);
    };
  };
  FakeReplica a(keyed("a"));
  FakeReplica b(keyed("b"));
  RouterConfig c = Config({&a, &b}, PolicyKind::kCacheAware);
  c.replica_api_key = "rk";
  RouterUnderTest router(c);
  // Replica a holds the prompt's blocks unsalted (another tenant's view), b salted with rk's
  // tenant: only b's match.
  const std::string salt = HashSalt({{"Authorization", "Bearer rk"}}, "", true);
  EXPECT_EQ(salt.size(), 33u);
  EXPECT_EQ(salt.back(), '\x1f');
  AnnouncePromptBlocks(router, 0);
  AnnouncePromptBlocks(router, 1, salt);
  auto client = router.client();
  for (int i = 0; i < 2; ++i) {
    auto res = client->Send("POST", "/v1/chat/completions", kJson,
                            R"({"messages":[{"role":"user","content":"hi"}]})");
    ASSERT_TRUE(res.ok());
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(ReplicaOf(*res), "b");
  }
}

TEST(RouterProxyTest, TheHashSaltIsTheCacheSaltWithoutKeysAndTheTenantBeforeItWithThem) {
  EXPECT_EQ(HashSalt({{"Authorization", "Bearer k"}}, "s", false), "s");
  EXPECT_EQ(HashSalt({}, "s", true), "s");  // no key: no tenant
  // SHA-256("k") = 8254c329a92850f6d539dd376f4816ee2764517da5e0235514af433164480d7a
  EXPECT_EQ(HashSalt({{"x-api-key", "k"}}, "s", true), "8254c329a92850f6d539dd376f4816ee\x1fs");
  EXPECT_EQ(HashSalt({{"Authorization", "Bearer k"}, {"x-api-key", "other"}}, "", true),
            "8254c329a92850f6d539dd376f4816ee\x1f");
}

}  // namespace
}  // namespace proxy_test
}  // namespace kvserve::router
