// BlockIndex: the router's picture of which KV blocks each replica holds, keyed by vLLM's block
// hash (64-bit form, router/kv_events.h). Two sources feed it:
//   - stored blocks, from each replica's KV events (BlockStored / BlockRemoved /
//     AllBlocksCleared), per storage medium: a block is held while any medium holds it;
//   - pending blocks, the prompt blocks of requests the router has just sent to a replica, held
//     for `pending_ttl` or until an event about that block arrives. They stand for KV the replica
//     is computing and has not announced yet, so that a burst of requests sharing a prefix
//     follows the first one (SGLang's router inserts a request into its tree when it routes it,
//     for the same reason).
//
// NOTE: matching is by prefix. vLLM's hash of block i covers every token up to the end of block
// i (each hash chains its parent), so a prompt's first k hashes all being held means the replica
// holds the KV of its first k blocks; MatchPrefix counts them and stops at the first miss.
//
// The block size is the fleet's (the first one a BlockStored event names, or the configured one);
// a replica that names another is counted in `num_block_size_mismatches` and its blocks never
// match a prompt hashed at the fleet's size.
//
// Thread safety: every method may be called from any thread (one reader-writer lock).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <shared_mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "router/kv_events.h"

namespace kvserve::router {

struct BlockIndexConfig {
  int num_replicas = 0;
  int block_size = 0;  // 0 = learn it from the first BlockStored event
  std::chrono::milliseconds pending_ttl{10000};
  // Injected for tests; steady_clock::now by default.
  std::function<std::chrono::steady_clock::time_point()> clock;
};

class BlockIndex {
 public:
  explicit BlockIndex(BlockIndexConfig config);

  // Applies one decoded event batch of `replica`'s stream, in order.
  void Apply(int replica, const KvEventBatch& batch);
  // Forgets everything about `replica` (a resync: its stream can no longer be trusted).
  void Clear(int replica);
  // Records that `replica` is about to compute these blocks (see the header comment).
  void AddPending(int replica, std::span<const uint64_t> hashes);

  // How many leading `hashes` `replica` holds (stored on any medium, or pending).
  size_t MatchPrefix(int replica, std::span<const uint64_t> hashes) const;
  // Blocks `replica` holds: stored ones plus pending ones (those that expired since the last
  // AddPending included).
  size_t NumBlocks(int replica) const;
  // Stored blocks only.
  size_t NumStoredBlocks(int replica) const;
  // The fleet's block size, 0 while unknown.
  int block_size() const { return block_size_.load(std::memory_order_relaxed); }
  uint64_t num_block_size_mismatches() const { return mismatches_.load(); }
  int num_replicas() const { return static_cast<int>(replicas_.size()); }

 private:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Replica {
    std::unordered_map<uint64_t, uint32_t> stored;    // hash → bit set of media holding it
    std::unordered_map<uint64_t, TimePoint> pending;  // hash → when the prediction lapses
    // The same entries in the order they lapse (the TTL is one for all): expired ones leave
    // from the front. An entry whose map value moved on (re-added) or left is skipped.
    std::deque<std::pair<TimePoint, uint64_t>> lapse_order;
  };
  uint32_t MediumBit(const std::string& medium);  // REQUIRES: mu_ held exclusively
  void PrunePending(Replica& r, TimePoint now);

  BlockIndexConfig config_;
  std::atomic<int> block_size_;
  std::atomic<uint64_t> mismatches_{0};
  mutable std::shared_mutex mu_;
  std::vector<Replica> replicas_;
  std::unordered_map<std::string, uint32_t> media_;  // medium name → its bit (at most 32)
};

}  // namespace kvserve::router
