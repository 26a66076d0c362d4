// RedisTier against a real redis-server on a free loopback port: binary-safe round trips, the
// leading-run semantics of GetRun, replicas sharing keys, TTLs, and outages (a killed server, a
// server that never answers) that cost at most a timeout and put the tier in back-off, measured
// on an injected clock so that nothing here depends on timing.
#include "prefix/redis_tier.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "prefix/redis_test_server.h"

namespace kvserve {
namespace {
// The test executables are unity builds: this file's helpers stay apart from its neighbours'.
namespace redis_tier_test {

using testing_util::RedisTestServer;
using Clock = std::chrono::steady_clock;

BlockKey Key(int i) { return Sha256Of(&i, sizeof i); }

std::vector<uint8_t> Value(int i, size_t bytes = 360 * 1024) {
  std::vector<uint8_t> v(bytes);
  for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<uint8_t>((j * 31 + static_cast<size_t>(i)) % 251);
  v[0] = 0;  // binary-safe: NUL bytes inside
  return v;
}

// A clock the test moves by hand.
struct FakeClock {
  Clock::time_point t = Clock::time_point() + std::chrono::hours(1);
  std::function<Clock::time_point()> fn() {
    return [this] { return t; };
  }
};

std::unique_ptr<RedisTier> OpenTier(int port, FakeClock* clock = nullptr, int ttl = 0,
                                    int timeout_ms = 500) {
  RedisTierConfig c;
  c.port = port;
  c.ttl_seconds = ttl;
  c.timeout_ms = timeout_ms;
  if (clock) c.now = clock->fn();
  auto t = RedisTier::Open(c);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

int64_t Errors(const RedisTier& t, TierError kind) {
  return t.stats().errors[static_cast<int>(kind)];
}

TEST(RedisUrl, ParsesHostPortAndDatabase) {
  auto a = ParseRedisUrl("redis://10.1.2.3:7000/2");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "10.1.2.3");
  EXPECT_EQ(a->port, 7000);
  EXPECT_EQ(a->db, 2);
  auto b = ParseRedisUrl("redis://cache.local");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "cache.local");
  EXPECT_EQ(b->port, 6379);
  EXPECT_EQ(b->db, 0);
  auto c = ParseRedisUrl("redis://[::1]:6380");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->port, 6380);
  for (const char* bad : {"http://h:1", "redis://", "redis://h:0", "redis://h:70000",
                          "redis://h:x", "redis://h:1/db", "redis://[::1"}) {
    auto r = ParseRedisUrl(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("redis://HOST:PORT"), std::string::npos) << bad;
  }
}

TEST(RedisTier, RoundTripsBinaryValuesAndStopsAtTheFirstMiss) {
  RedisTestServer redis;
  ASSERT_TRUE(redis.Start());
  auto tier = OpenTier(redis.port());
  ASSERT_TRUE(tier->Put(Key(0), Value(0)).ok());
  ASSERT_TRUE(tier->Put(Key(1), Value(1)).ok());
  ASSERT_TRUE(tier->Put(Key(3), Value(3)).ok());
  std::vector<std::vector<uint8_t>> values;
  EXPECT_EQ(tier->GetRun(std::vector<BlockKey>{Key(0), Key(1), Key(2), Key(3)}, &values), 2);
  EXPECT_EQ(values[0], Value(0));
  EXPECT_EQ(values[1], Value(1));
  EXPECT_EQ(tier->GetRun(std::vector<BlockKey>{Key(2)}, &values), 0);
  // Runs longer than one pipelined batch.
  std::vector<BlockKey> many;
  for (int i = 10; i < 80; ++i) {
    ASSERT_TRUE(tier->Put(Key(i), Value(i, 1000)).ok());
    many.push_back(Key(i));
  }
  ASSERT_EQ(tier->GetRun(many, &values), 70);
  EXPECT_EQ(values[69], Value(79, 1000));
  tier->Remove(Key(0));
  EXPECT_EQ(tier->GetRun(std::vector<BlockKey>{Key(0)}, &values), 0);
  const TierStats s = tier->stats();
  EXPECT_EQ(s.name, "redis");
  EXPECT_EQ(s.blocks_written, 73);
  EXPECT_EQ(s.blocks_read, 72);
  EXPECT_EQ(s.errors, (std::array<int64_t, kNumTierErrors>{}));
  EXPECT_TRUE(tier->MayContain(Key(12345)));  // unknown without a round trip
  EXPECT_NE(tier->Describe().find("keys"), std::string::npos) << tier->Describe();
}

TEST(RedisTier, ReplicasSeeEachOthersBlocksUnderTheKvservePrefix) {
  RedisTestServer redis;
  ASSERT_TRUE(redis.Start());
  auto a = OpenTier(redis.port());
  auto b = OpenTier(redis.port());
  ASSERT_TRUE(a->Put(Key(7), Value(7)).ok());
  std::vector<std::vector<uint8_t>> values;
  ASSERT_EQ(b->GetRun(std::vector<BlockKey>{Key(7)}, &values), 1);
  EXPECT_EQ(values[0], Value(7));
  redisReply* r = redis.Command("EXISTS %s", RedisTier::KeyOf(Key(7)).c_str());
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->integer, 1);
  freeReplyObject(r);
  EXPECT_EQ(RedisTier::KeyOf(Key(7)).rfind("kvserve:blk:", 0), 0u);
}

TEST(RedisTier, AppliesTheTtl) {
  RedisTestServer redis;
  ASSERT_TRUE(redis.Start());
  auto tier = OpenTier(redis.port(), nullptr, /*ttl=*/3600);
  ASSERT_TRUE(tier->Put(Key(1), Value(1, 100)).ok());
  redisReply* r = redis.Command("TTL %s", RedisTier::KeyOf(Key(1)).c_str());
  ASSERT_NE(r, nullptr);
  EXPECT_GT(r->integer, 3500);
  EXPECT_LE(r->integer, 3600);
  freeReplyObject(r);
}

TEST(RedisTier, AKilledServerIsCountedAndBypassedUntilTheBackoffEnds) {
  RedisTestServer redis;
  ASSERT_TRUE(redis.Start());
  FakeClock clock;
  auto tier = OpenTier(redis.port(), &clock);
  ASSERT_TRUE(tier->Put(Key(1), Value(1, 100)).ok());
  redis.Kill();
  std::vector<std::vector<uint8_t>> values;
  EXPECT_EQ(tier->GetRun(std::vector<BlockKey>{Key(1)}, &values), 0);
  const int64_t failures = Errors(*tier, TierError::kConnection) + Errors(*tier, TierError::kTimeout);
  EXPECT_GE(failures, 1);
  EXPECT_TRUE(tier->in_backoff());
  EXPECT_FALSE(tier->MayContain(Key(1)));
  // While the (fake) clock stands still, nothing reaches Redis: no new errors, writes dropped.
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(tier->GetRun(std::vector<BlockKey>{Key(1)}, &values), 0);
    EXPECT_FALSE(tier->Put(Key(2), Value(2, 100)).ok());
  }
  EXPECT_EQ(Errors(*tier, TierError::kConnection) + Errors(*tier, TierError::kTimeout), failures);
  EXPECT_EQ(tier->stats().dropped_writes, 5);
  EXPECT_NE(tier->Describe().find("unreachable"), std::string::npos);
  // Back again: after the back-off the tier reconnects and works (the data died with Redis).
  ASSERT_TRUE(redis.Restart());
  clock.t += std::chrono::seconds(10);
  ASSERT_TRUE(tier->Put(Key(3), Value(3, 100)).ok());
  EXPECT_FALSE(tier->in_backoff());
  ASSERT_EQ(tier->GetRun(std::vector<BlockKey>{Key(3)}, &values), 1);
  EXPECT_EQ(values[0], Value(3, 100));
}

TEST(RedisTier, TheBackoffDoublesWhileTheServerStaysDown) {
  RedisTestServer redis;  // never started: its port refuses connections
  FakeClock clock;
  auto tier = OpenTier(redis.port(), &clock);
  std::vector<std::vector<uint8_t>> values;
  EXPECT_EQ(Errors(*tier, TierError::kConnection), 1);  // Open tried once
  clock.t += std::chrono::milliseconds(99);
  EXPECT_EQ(tier->GetRun(std::vector<BlockKey>{Key(1)}, &values), 0);
  EXPECT_EQ(Errors(*tier, TierError::kConnection), 1);  // still within 100 ms
  clock.t += std::chrono::milliseconds(2);
  EXPECT_EQ(tier->GetRun(std::vector<BlockKey>{Key(1)}, &values), 0);
  EXPECT_EQ(Errors(*tier, TierError::kConnection), 2);  // tried again: now 200 ms
  clock.t += std::chrono::milliseconds(150);
  EXPECT_EQ(tier->GetRun(std::vector<BlockKey>{Key(1)}, &values), 0);
  EXPECT_EQ(Errors(*tier, TierError::kConnection), 2);
  clock.t += std::chrono::milliseconds(60);
  EXPECT_EQ(tier->GetRun(std::vector<BlockKey>{Key(1)}, &values), 0);
  EXPECT_EQ(Errors(*tier, TierError::kConnection), 3);
}

TEST(RedisTier, AServerThatNeverAnswersTimesOutInsteadOfHanging) {
  // A listening socket that accepts (the kernel completes the handshake) but never replies.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  FakeClock clock;
  const auto t0 = Clock::now();
  auto tier = OpenTier(ntohs(a.sin_port), &clock, 0, /*timeout_ms=*/100);
  std::vector<std::vector<uint8_t>> values;
  EXPECT_EQ(tier->GetRun(std::vector<BlockKey>{Key(1)}, &values), 0);
  EXPECT_GE(Errors(*tier, TierError::kTimeout), 1);
  EXPECT_TRUE(tier->in_backoff());
  // Each call costs at most about one timeout; a generous bound, not a timing assertion.
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(20));
  ::close(fd);
}

TEST(RedisTier, ConcurrentReadersAndWritersShareTheConnectionPool) {
  RedisTestServer redis;
  ASSERT_TRUE(redis.Start());
  auto tier = OpenTier(redis.port());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::vector<uint8_t>> values;
      for (int j = 0; j < 50; ++j) {
        const int i = t * 100 + j;
        ASSERT_TRUE(tier->Put(Key(i), Value(i, 2000)).ok());
        ASSERT_EQ(tier->GetRun(std::vector<BlockKey>{Key(i)}, &values), 1);
        EXPECT_EQ(values[0], Value(i, 2000));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(tier->stats().blocks_written, 200);
  EXPECT_EQ(Errors(*tier, TierError::kConnection), 0);
}

}  // namespace redis_tier_test
}  // namespace
}  // namespace kvserve
