// RedisTier: a KV cache tier in a Redis server shared by replicas. Block records
// (block_record.h) are values under "kvserve:blk:<64 hex digits of the key>"; every kvserve
// process pointed at the same Redis finds the blocks the others wrote, because keys depend only
// on the model's weights, the settings and the tokens (block_key.h). Capacity and eviction are
// the Redis server's (maxmemory with an LRU policy), plus an optional TTL per block.
//
// NOTE (never blocking for long): every connect and command has the timeout `timeout_ms`. A
// connection error or a timeout puts the tier in back-off: for 100 ms, doubling to 5 s while it
// keeps failing, no call reaches Redis (reads are misses, writes are dropped and counted), and
// the first success resets it. So a dead or hung Redis costs a request at most one timeout,
// and the server keeps serving from RAM and disk. The clock is injectable for tests.
//
// Thread safety: every method may be called from any thread; connections come from a small
// mutex-guarded pool (a hiredis context is used by one thread at a time; one that failed is
// closed, not returned).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "prefix/kv_tier.h"

struct redisContext;

namespace kvserve {

struct RedisTierConfig {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  int ttl_seconds = 0;   // 0 = no expiry; else SET ... EX ttl
  int timeout_ms = 200;  // connect and per-command timeout
  // Clock of the back-off; default std::chrono::steady_clock::now.
  std::function<std::chrono::steady_clock::time_point()> now;
};

// "redis://HOST[:PORT][/DB]" (PORT 6379 and DB 0 by default; an IPv6 HOST in brackets).
Result<RedisTierConfig> ParseRedisUrl(std::string_view url);

class RedisTier final : public KvTier {
 public:
  // Fails only for a bad config; an unreachable server puts the tier in back-off (logged once).
  static Result<std::unique_ptr<RedisTier>> Open(const RedisTierConfig& config);
  ~RedisTier() override;

  std::string_view name() const override { return "redis"; }
  bool MayContain(const BlockKey& key) override;  // true unless in back-off
  int GetRun(std::span<const BlockKey> keys, std::vector<std::vector<uint8_t>>* values) override;
  Status Put(const BlockKey& key, std::span<const uint8_t> value) override;
  void Remove(const BlockKey& key) override;
  std::string Describe() override;

  // The Redis key of a block.
  static std::string KeyOf(const BlockKey& key);
  bool in_backoff();

 private:
  using Clock = std::chrono::steady_clock;
  explicit RedisTier(const RedisTierConfig& config);
  // A connected context, or null (counted, back-off started) when none can be had now.
  redisContext* Take();
  void Give(redisContext* c);  // a healthy context back to the pool
  // Counts the failure of `c` (closed here), starts or extends the back-off.
  void Failed(redisContext* c);
  void Succeeded();
  void RefreshSizes(redisContext* c);  // DBSIZE and used_memory, at most every 2 s

  const RedisTierConfig config_;
  std::mutex mu_;  // guards everything below
  std::vector<redisContext*> pool_;
  Clock::time_point down_until_{};
  std::chrono::milliseconds backoff_{0};
  std::string last_error_;
  bool down_logged_ = false;
  Clock::time_point sizes_at_{};
};

}  // namespace kvserve
