// BlockPool: bookkeeping for the fixed set of KV blocks (ids, reference counts, free list).
// It owns no tensor memory (KvStorage does); it only decides which block id holds what.
//
// Every block is in exactly one of three states (CheckInvariants verifies them):
//   - free: never filled or evicted; ref 0, not cached, on the free list;
//   - cached-evictable: ref 0 but marked cached (its K/V are registered in the prefix cache,
//     which decides when to evict it); not on the free list;
//   - in use: ref > 0 (held by one or more block tables), cached or not.
//   num_free + num_cached + num_in_use == num_blocks.
// NOTE: the free list is an intrusive doubly linked list; its order is the reuse order (head =
// next to hand out). Cached blocks are kept off it: the prefix cache orders them for eviction by
// its own policy (leaves only, LRU/LFU/priority) and hands them back with Evict().
//
// Thread safety: none; the engine thread owns the pool.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "util/strong_id.h"

namespace kvserve {

class BlockPool {
 public:
  explicit BlockPool(int num_blocks);

  int num_blocks() const { return static_cast<int>(ref_counts_.size()); }
  int num_free() const { return num_free_; }
  int num_cached() const { return num_cached_; }  // cached-evictable: ref 0, in the prefix cache
  int num_in_use() const { return num_blocks() - num_free_ - num_cached_; }

  // Takes the block at the head of the free list with ref count 1; nullopt when none is free.
  std::optional<BlockId> Allocate();
  // Allocates n blocks or none (all-or-nothing).
  bool AllocateN(int n, std::vector<BlockId>* out);
  // REQUIRES: block in use, or cached (a cached-evictable block becomes in use again: reuse).
  void AddRef(BlockId block);
  // REQUIRES: block in use. Drops a reference; at zero a cached block becomes cached-evictable,
  // any other goes to the tail of the free list.
  void Release(BlockId block);
  int ref_count(BlockId block) const;

  // REQUIRES: block in use and not cached. Registers the block's contents in the prefix cache.
  void MarkCached(BlockId block);
  // REQUIRES: block cached-evictable (cached, ref 0). Forgets its contents: it becomes free
  // (tail of the free list).
  void Evict(BlockId block);
  bool is_cached(BlockId block) const;

  // Free block ids in free-list order (head first). For tests and debugging; O(num_free).
  std::vector<BlockId> FreeListOrder() const;
  // Aborts with a message if an invariant is broken.
  void CheckInvariants() const;

 private:
  void PushBack(int32_t b);
  void Unlink(int32_t b);

  std::vector<int32_t> ref_counts_;
  std::vector<uint8_t> cached_;       // 1 = contents registered in the prefix cache
  std::vector<int32_t> prev_, next_;  // intrusive free list; -1 terminates
  int32_t head_ = -1, tail_ = -1;
  int num_free_ = 0;
  int num_cached_ = 0;  // cached and ref 0
};

}  // namespace kvserve
