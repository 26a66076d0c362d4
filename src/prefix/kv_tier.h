// KvTier: one lower tier of the KV cache (below the RAM radix tree, tier 0): a store of whole
// block records (block_record.h) by BlockKey, with its own capacity, eviction order and counters.
// Two implementations: DiskTier (files in a directory, LRU by size, survives restarts) and
// RedisTier (a Redis server shared by replicas). TieredStore drives them from its I/O threads;
// it encodes and verifies records, so a tier only moves bytes.
//
// Thread safety: every method may be called from any thread, concurrently (TieredStore calls
// reads from its reader thread and writes from its writer thread).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/status.h"
#include "prefix/block_key.h"
#include "prefix/tier_observer.h"

namespace kvserve {

enum class TierError { kCorrupt, kIo, kTimeout, kConnection };
inline constexpr int kNumTierErrors = 4;
inline constexpr const char* kTierErrorNames[kNumTierErrors] = {"corrupt", "io", "timeout",
                                                                "connection"};

// Upper bounds (seconds) of the load latency histogram; +Inf implied.
inline constexpr std::array<double, 12> kTierLatencyBounds = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5};

// A plain copy of a tier's counters.
struct TierStats {
  std::string name;
  int64_t query_blocks = 0;  // blocks the load path looked for in this tier
  int64_t hit_blocks = 0;    // of which it found, verified and loaded
  int64_t blocks_read = 0, bytes_read = 0;
  int64_t blocks_written = 0, bytes_written = 0;
  int64_t dropped_writes = 0;  // writes not made: full queue, tier down or disabled
  std::array<int64_t, kNumTierErrors> errors{};
  int64_t entries = -1, bytes_held = -1;  // what the tier holds; -1 = unknown
  std::array<int64_t, kTierLatencyBounds.size() + 1> latency_buckets{};  // not cumulative
  double latency_sum_seconds = 0;
  int64_t latency_count = 0;
};

// The live counters, updated from any thread.
class TierCounters {
 public:
  std::atomic<int64_t> query_blocks{0}, hit_blocks{0};
  std::atomic<int64_t> blocks_read{0}, bytes_read{0}, blocks_written{0}, bytes_written{0};
  std::atomic<int64_t> dropped_writes{0};
  std::array<std::atomic<int64_t>, kNumTierErrors> errors{};
  std::atomic<int64_t> entries{-1}, bytes_held{-1};

  void Error(TierError kind) { errors[static_cast<int>(kind)].fetch_add(1); }
  void ObserveLoadSeconds(double seconds);
  TierStats Take(std::string name) const;

 private:
  std::array<std::atomic<int64_t>, kTierLatencyBounds.size() + 1> buckets_{};
  std::atomic<int64_t> latency_count_{0};
  std::atomic<int64_t> latency_sum_ns_{0};
};

class KvTier {
 public:
  virtual ~KvTier() = default;
  // "disk" or "redis": the `tier` label of the metrics and the usage field.
  virtual std::string_view name() const = 0;
  // Whether the tier may hold `key`: exact for an indexed tier, true where it cannot know
  // without a round trip. Cheap.
  virtual bool MayContain(const BlockKey& key) = 0;
  // True when MayContain is exact (an indexed tier): a block it says it holds need not be
  // written again.
  virtual bool exact_contains() const { return false; }
  // Fetches the values of the leading keys the tier holds into (*values)[0, returned count),
  // stopping at the first key it does not hold or cannot read (errors are counted). Counts
  // blocks_read / bytes_read. *values is resized to at least the returned count.
  virtual int GetRun(std::span<const BlockKey> keys, std::vector<std::vector<uint8_t>>* values) = 0;
  // Stores `value` under `key`. Errors are counted, logged once per kind, and returned.
  virtual Status Put(const BlockKey& key, std::span<const uint8_t> value) = 0;
  // Deletes `key` (a record that failed verification). Missing keys are fine.
  virtual void Remove(const BlockKey& key) = 0;
  // Keeps `key` (when held) until until_ms, milliseconds since the Unix epoch: the tier evicts
  // it only when nothing unretained is left (retention, prompt caching). A tier without its own
  // eviction order ignores it.
  virtual void Retain(const BlockKey& key, int64_t until_ms) {
    (void)key;
    (void)until_ms;
  }
  // The start-up line: where it is and what it holds.
  virtual std::string Describe() = 0;
  // Attaches the observer of this tier's contents (tier_observer.h), or detaches it (null). Once
  // it returns, no call to the previous observer is running or will run. A tier that knows its
  // records (DiskTier) first hands the new observer a snapshot of them.
  virtual void SetObserver(TierObserver* observer);

  TierCounters& counters() { return counters_; }
  TierStats stats() const { return counters_.Take(std::string(name())); }

 protected:
  // Tell the observer, if any (under observer_mu_, which the tier may hold its own lock around).
  void NotifyStored(const BlockKey& key);
  void NotifyRemoved(const BlockKey& key);

  TierCounters counters_;
  std::mutex observer_mu_;
  TierObserver* observer_ = nullptr;  // guarded by observer_mu_
};

}  // namespace kvserve
