// BlockListener: how lower cache tiers (and the KV event stream) learn what the RAM radix tree
// does with full blocks. The tree calls it on the engine thread: when a block joins the tree
// (its K/V are final) and when one is evicted (its K/V are still intact in KvStorage until the
// call returns, and are reused right after). An implementation copies what it needs before returning; it must not call back
// into the tree or the KvCacheManager.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "prefix/block_key.h"
#include "util/strong_id.h"

namespace kvserve {

struct TreeBlock {
  const BlockKey& key;              // chained key of this block
  const BlockKey& parent_key;       // the previous block's key, or the namespace's root key
  const BlockKey& root_key;         // RootKey of the namespace
  std::span<const TokenId> tokens;  // the block's block_size tokens
  BlockId block;
};

class BlockListener {
 public:
  virtual ~BlockListener() = default;
  virtual void OnBlockInserted(const TreeBlock& b) = 0;
  virtual void OnBlockEvicted(const TreeBlock& b) = 0;
  // A held block (retention) that RAM does not keep: the tiers should store it and keep it
  // until until_ms (milliseconds since the Unix epoch). Called before OnBlockEvicted when a
  // held block is evicted, and for blocks held past RAM's retained share.
  virtual void OnBlockRetained(const TreeBlock& b, int64_t until_ms) {
    (void)b;
    (void)until_ms;
  }
};

// Several listeners told of every call, in the order they were added (the lower tiers, then the
// KV event publisher): the tree keeps one listener. Does not own them; each keeps the contract
// above on its own.
class BlockListenerFanout final : public BlockListener {
 public:
  void Add(BlockListener* listener) { listeners_.push_back(listener); }
  void Clear() { listeners_.clear(); }
  const std::vector<BlockListener*>& listeners() const { return listeners_; }

  void OnBlockInserted(const TreeBlock& b) override {
    for (BlockListener* l : listeners_) l->OnBlockInserted(b);
  }
  void OnBlockEvicted(const TreeBlock& b) override {
    for (BlockListener* l : listeners_) l->OnBlockEvicted(b);
  }
  void OnBlockRetained(const TreeBlock& b, int64_t until_ms) override {
    for (BlockListener* l : listeners_) l->OnBlockRetained(b, until_ms);
  }

 private:
  std::vector<BlockListener*> listeners_;
};

}  // namespace kvserve
