// BlockTable: the ordered KV blocks of one sequence; token slot i lives in block i / block_size
// at offset i % block_size. NOTE: tables are append-only while a sequence runs (a slot never
// moves), so the K/V already written stay valid and shared prefix blocks can be referenced by
// many tables at once. Two exceptions: trailing blocks that held only rejected speculative
// drafts are popped (PopBack), and a sequence that evicts tokens inside itself (a sliding
// window, attention sinks) erases blocks from the middle (Erase), so every later slot moves down;
// the KvCacheManager makes those later blocks private first.
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "util/strong_id.h"

namespace kvserve {

class BlockTable {
 public:
  explicit BlockTable(int block_size) : block_size_(block_size) {}

  int block_size() const { return block_size_; }
  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int capacity_tokens() const { return num_blocks() * block_size_; }
  // Blocks needed so that `num_tokens` slots exist, beyond those already held.
  int BlocksNeededFor(int num_tokens) const {
    const int need = (num_tokens + block_size_ - 1) / block_size_;
    return need > num_blocks() ? need - num_blocks() : 0;
  }
  void Append(BlockId block) { blocks_.push_back(block); }
  // Swaps block i for another holding bytes identical to it (the prefix cache's copy of the same
  // tokens). The caller moves the references. Slots never move, so the NOTE above still holds.
  void ReplaceBlock(int i, BlockId block) { blocks_[static_cast<size_t>(i)] = block; }
  std::span<const BlockId> blocks() const { return blocks_; }
  // Removes and returns the last block (rejected speculative slots; never a shared block).
  BlockId PopBack() {
    const BlockId b = blocks_.back();
    blocks_.pop_back();
    return b;
  }
  // Removes blocks [first, first + count) and returns them (the caller releases them).
  std::vector<BlockId> Erase(int first, int count) {
    const auto b = blocks_.begin() + first;
    std::vector<BlockId> out(b, b + count);
    blocks_.erase(b, b + count);
    return out;
  }
  // Empties the table and returns the blocks (the caller releases them to the pool).
  std::vector<BlockId> TakeAll() { return std::exchange(blocks_, {}); }

 private:
  int block_size_;
  std::vector<BlockId> blocks_;
};

}  // namespace kvserve
