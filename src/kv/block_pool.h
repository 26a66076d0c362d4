// BlockPool: bookkeeping for the fixed set of KV blocks (ids, reference counts, free list).
// It owns no tensor memory (KvStorage does); it only decides which block id holds what.
//
// Invariants (CheckInvariants verifies them):
//   - every block is either free (ref 0, on the free list) or in use (ref > 0, not on it);
//   - num_free + num_in_use == num_blocks.
// NOTE: the free list is an intrusive doubly linked list so that the prefix cache can later take
// a cached block out of the middle in O(1) when a request reuses it; its order is the eviction
// order (head = next to hand out).
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
  int num_in_use() const { return num_blocks() - num_free_; }

  // Takes the block at the head of the free list with ref count 1; nullopt when none is free.
  std::optional<BlockId> Allocate();
  // Allocates n blocks or none (all-or-nothing).
  bool AllocateN(int n, std::vector<BlockId>* out);
  // REQUIRES: block in use. Adds a reference (sharing).
  void AddRef(BlockId block);
  // REQUIRES: block in use. Drops a reference; at zero the block goes to the tail of the free list.
  void Release(BlockId block);
  int ref_count(BlockId block) const;

  // Free block ids in free-list order (head first). For tests and debugging; O(num_free).
  std::vector<BlockId> FreeListOrder() const;
  // Aborts with a message if an invariant is broken.
  void CheckInvariants() const;

 private:
  void PushBack(int32_t b);
  void Unlink(int32_t b);

  std::vector<int32_t> ref_counts_;
  std::vector<int32_t> prev_, next_;  // intrusive free list; -1 terminates
  int32_t head_ = -1, tail_ = -1;
  int num_free_ = 0;
};

}  // namespace kvserve
