#include "kv/block_pool.h"

#include "util/check.h"

namespace kvserve {

BlockPool::BlockPool(int num_blocks)
    : ref_counts_(num_blocks, 0),
      cached_(num_blocks, 0),
      prev_(num_blocks, -1),
      next_(num_blocks, -1) {
  KV_CHECK_GE(num_blocks, 0);
  for (int32_t b = 0; b < num_blocks; ++b) PushBack(b);
}

void BlockPool::PushBack(int32_t b) {
  prev_[b] = tail_;
  next_[b] = -1;
  if (tail_ >= 0) next_[tail_] = b; else head_ = b;
  tail_ = b;
  ++num_free_;
}

void BlockPool::Unlink(int32_t b) {
  if (prev_[b] >= 0) next_[prev_[b]] = next_[b]; else head_ = next_[b];
  if (next_[b] >= 0) prev_[next_[b]] = prev_[b]; else tail_ = prev_[b];
  prev_[b] = next_[b] = -1;
  --num_free_;
}

std::optional<BlockId> BlockPool::Allocate() {
  if (head_ < 0) return std::nullopt;
  const int32_t b = head_;
  Unlink(b);
  ref_counts_[b] = 1;
  return BlockId(b);
}

bool BlockPool::AllocateN(int n, std::vector<BlockId>* out) {
  if (n > num_free_) return false;
  for (int i = 0; i < n; ++i) out->push_back(*Allocate());
  return true;
}

void BlockPool::AddRef(BlockId block) {
  const int32_t b = block.value();
  KV_CHECK(b >= 0 && b < num_blocks(), "block {} out of range", b);
  KV_CHECK(ref_counts_[b] > 0 || cached_[b], "AddRef of free block {}", b);
  if (ref_counts_[b] == 0) --num_cached_;
  ++ref_counts_[b];
}

void BlockPool::Release(BlockId block) {
  const int32_t b = block.value();
  KV_CHECK(b >= 0 && b < num_blocks(), "block {} out of range", b);
  KV_CHECK(ref_counts_[b] > 0, "release of free block {}", b);
  if (--ref_counts_[b] > 0) return;
  if (cached_[b]) {
    ++num_cached_;
  } else {
    PushBack(b);
  }
}

void BlockPool::MarkCached(BlockId block) {
  const int32_t b = block.value();
  KV_CHECK(b >= 0 && b < num_blocks(), "block {} out of range", b);
  KV_CHECK(ref_counts_[b] > 0 && !cached_[b], "MarkCached of block {} (ref {}, cached {})", b,
           ref_counts_[b], cached_[b]);
  cached_[b] = 1;
}

void BlockPool::Evict(BlockId block) {
  const int32_t b = block.value();
  KV_CHECK(b >= 0 && b < num_blocks(), "block {} out of range", b);
  KV_CHECK(ref_counts_[b] == 0 && cached_[b], "evict of block {} (ref {}, cached {})", b,
           ref_counts_[b], cached_[b]);
  cached_[b] = 0;
  --num_cached_;
  PushBack(b);
}

bool BlockPool::is_cached(BlockId block) const {
  KV_CHECK(block.value() >= 0 && block.value() < num_blocks());
  return cached_[block.value()] != 0;
}

int BlockPool::ref_count(BlockId block) const {
  KV_CHECK(block.value() >= 0 && block.value() < num_blocks());
  return ref_counts_[block.value()];
}

std::vector<BlockId> BlockPool::FreeListOrder() const {
  std::vector<BlockId> order;
  for (int32_t b = head_; b >= 0; b = next_[b]) order.emplace_back(b);
  return order;
}

void BlockPool::CheckInvariants() const {
  int on_list = 0;
  int32_t prev = -1;
  for (int32_t b = head_; b >= 0; b = next_[b]) {
    KV_CHECK_EQ(prev_[b], prev);
    KV_CHECK(ref_counts_[b] == 0, "block {} on the free list has ref {}", b, ref_counts_[b]);
    KV_CHECK(!cached_[b], "block {} on the free list is cached", b);
    ++on_list;
    KV_CHECK_LE(on_list, num_blocks());
    prev = b;
  }
  KV_CHECK_EQ(tail_, prev);
  KV_CHECK_EQ(on_list, num_free_);
  int free_refs = 0, cached_refs = 0;
  for (int32_t b = 0; b < num_blocks(); ++b) {
    KV_CHECK_GE(ref_counts_[b], 0);
    if (ref_counts_[b] == 0) ++(cached_[b] ? cached_refs : free_refs);
  }
  KV_CHECK_EQ(free_refs, num_free_);
  KV_CHECK_EQ(cached_refs, num_cached_);
  KV_CHECK_EQ(num_free_ + num_cached_ + num_in_use(), num_blocks());
}

}  // namespace kvserve
