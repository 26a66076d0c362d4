// TierObserver: how the KV event stream (events/kv_event_publisher.h) learns what the lower tiers
// (disk, Redis; kv_tier.h) hold, so that it can announce their contents with their own medium.
//
// Who calls what, from which thread:
//   - OnTierWriteQueued: the engine thread, from TieredStore when it queues a block for the
//     writer thread (one call per queued write, whatever tiers it goes to). It comes before
//     anything a tier says of that write, so the observer can learn the block's tokens and
//     parent there, in the engine's order, without hashing on the engine thread.
//   - OnTierWriteDone: the writer thread, once that write is over (stored in every tier it was
//     for, or failed): exactly one per OnTierWriteQueued made while the observer was attached.
//   - OnTierStored / OnTierRemoved: any thread, made by the tier while it holds its own lock
//     around the change (DiskTier), so that for one key they come in the order the tier
//     changed. RedisTier calls them after the command's reply (Redis's own order between two
//     replies of different connections is not observable).
//   - OnTierSnapshot: the thread attaching the observer (KvTier::SetObserver), before any other
//     call of that tier: the records the tier held then that it knows the tokens of.
// An implementation only queues what it is told (no I/O, no call back into a tier or the
// store), so the tiers' locks are held for a moment only.
#pragma once

#include <string_view>
#include <vector>

#include "prefix/block_key.h"
#include "prefix/block_listener.h"
#include "util/strong_id.h"

namespace kvserve {

// What a tier knows of one record it holds: enough to name the block the way the tree does.
struct TierRecordInfo {
  BlockKey key, parent_key, root_key;  // parent_key == root_key: a namespace's first block
  std::vector<TokenId> tokens;         // [block_size]
};

class TierObserver {
 public:
  virtual ~TierObserver() = default;
  virtual void OnTierWriteQueued(const TreeBlock& b) = 0;
  virtual void OnTierWriteDone(const BlockKey& key) = 0;
  // `tier` is KvTier::name() ("disk", "redis"). What a tier drops by itself without telling
  // (Redis's TTL expiry and maxmemory eviction) is not observed.
  virtual void OnTierStored(std::string_view tier, const BlockKey& key) = 0;
  virtual void OnTierRemoved(std::string_view tier, const BlockKey& key) = 0;
  virtual void OnTierSnapshot(std::string_view tier, std::vector<TierRecordInfo> records) = 0;
};

}  // namespace kvserve
