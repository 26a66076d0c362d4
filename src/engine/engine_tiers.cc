// EngineCore and the lower KV tiers (engine_core.h): opening the disk and Redis tiers, loading
// the blocks that follow a request's RAM hit before it is scheduled, taking finished loads in at
// the start of a step, and the tier fields of a request's metrics. Engine thread only; the
// TieredStore's own I/O threads do the reads and writes.
#include "engine/engine_core.h"

#include <fmt/format.h>

#include <algorithm>

#include "prefix/block_record.h"
#include "prefix/disk_tier.h"
#include "prefix/redis_tier.h"
#include "util/byte_size.h"
#include "util/check.h"
#include "util/log.h"

namespace kvserve {

std::vector<TierStats> EngineCore::TierStatsNow() const {
  return tiers_ ? tiers_->stats() : std::vector<TierStats>{};
}

std::vector<std::string> EngineCore::TierDescriptions() const {
  std::vector<std::string> lines = tier_descriptions_;
  if (tiers_) {
    for (const auto& t : tiers_->tiers()) lines.push_back(t->Describe());
  }
  return lines;
}

Status EngineCore::OpenTiers() {
  const KvTierConfig& c = config_.tiers;
  if (!c.any()) return Status::Ok();
  if (!config_.enable_prefix_caching) {
    return InvalidArgument("lower KV tiers (--kv-disk-path, --kv-redis-url) need prefix caching; "
                           "drop --no-prefix-caching");
  }
  std::vector<std::unique_ptr<KvTier>> tiers;
  if (!c.disk_path.empty()) {
    tier_names_.push_back("disk");
    // With KV events the records found at start are announced: keep what names them.
    auto disk =
        DiskTier::Open(DiskTierConfig{c.disk_path, c.disk_size_bytes, config_.kv_events.enabled});
    if (disk.ok()) {
      tiers.push_back(std::move(disk).value());
    } else {  // the server goes on without it
      failed_tiers_.push_back("disk");
      tier_descriptions_.push_back(
          fmt::format("disk tier off: {}", disk.status().message()));
      KV_LOG(Error, "kv disk tier off: {}", disk.status().message());
    }
  }
  if (!c.redis_url.empty()) {
    tier_names_.push_back("redis");
    KV_ASSIGN_OR_RETURN(RedisTierConfig rc, ParseRedisUrl(c.redis_url));
    rc.ttl_seconds = c.redis_ttl_seconds;
    rc.timeout_ms = c.redis_timeout_ms;
    KV_ASSIGN_OR_RETURN(auto redis, RedisTier::Open(rc));
    tiers.push_back(std::move(redis));
  }
  if (tiers.empty()) return Status::Ok();
  tier_descriptions_.push_back(fmt::format("weights digest (SHA-256 of {}) in {:.0f} ms",
                                           FormatByteSize(model_->weight_bytes()),
                                           weights_digest_seconds_ * 1e3));
  tiers_ = std::make_unique<TieredStore>(
      std::move(tiers), TieredStoreConfig{c.write_policy, c.max_queued_write_bytes}, &kv_);
  kv_manager_->set_block_listener(tiers_.get());
  return Status::Ok();
}

// NOTE (which blocks to load): the request's RAM hit is held by a holder sequence (so it cannot
// be evicted while the load runs); the keys of the blocks after it chain from its last key, up
// to the last full block before the prompt's final token (that token is always computed). With
// token-granular hits the block holding the final token is loaded too when the prompt fills it:
// admission then copies its first tokens, and only the final token is computed. Nothing is
// loaded when RAM already gives all but the final token.
bool EngineCore::StartTierLoad(RequestId id) {
  if (!tiers_) return false;
  RequestCtx& r = requests_.at(id);
  if (r.eviction.by_score) return false;  // it takes no cached prefix (scheduler.cc)
  const std::vector<TokenId>& prompt = r.request.prompt;
  const int bs = config_.block_size;
  const int n = static_cast<int>(prompt.size());
  const int max_blocks = config_.partial_block_hits ? n / bs : (n - 1) / bs;
  if (max_blocks == 0 || kv_manager_->PeekCachedTokens(r.ns, prompt) >= n - 1) return false;
  const SeqId holder = NewSeqId();
  const int ram_blocks =
      kv_manager_->BeginSequence(holder, r.ns, prompt, r.request.priority, /*count_tokens=*/false,
                                 /*partial_block=*/false) /
      bs;
  if (ram_blocks >= max_blocks) {
    kv_manager_->EndSequence(holder);
    return false;
  }
  std::vector<BlockKey> keys;
  BlockKey prev = kv_manager_->PrefixKey(holder);
  for (int b = ram_blocks; b < max_blocks; ++b) {
    prev = ChainKey(prev, std::span<const TokenId>(prompt).subspan(static_cast<size_t>(b) * bs, bs));
    keys.push_back(prev);
  }
  if (auto it = loading_keys_.find(keys.front()); it != loading_keys_.end()) {
    kv_manager_->EndSequence(holder);  // another request loads this block: look again after it
    r.phase = Phase::kTierWait;
    r.load_id = it->second;
    tier_waiters_[it->second].push_back(id);
    return true;
  }
  if (!tiers_->MayContain(keys.front())) {
    kv_manager_->EndSequence(holder);
    return false;
  }
  std::vector<TokenId> tokens(prompt.begin() + static_cast<ptrdiff_t>(ram_blocks) * bs,
                              prompt.begin() + static_cast<ptrdiff_t>(max_blocks) * bs);
  const uint64_t load = tiers_->StartLoad(keys, std::move(tokens));
  for (const BlockKey& k : keys) loading_keys_.emplace(k, load);
  tier_loads_.emplace(load, TierLoading{id, holder, ram_blocks, std::move(keys)});
  r.phase = Phase::kTierLoad;
  r.load_id = load;
  return true;
}

void EngineCore::FinishTierLoads() {
  std::vector<TierLoad> done;
  tiers_->TakeCompleted(&done);
  const int bs = config_.block_size;
  const KvLayout& layout = kv_.layout();
  for (TierLoad& load : done) {
    auto node = tier_loads_.extract(load.id);
    KV_CHECK(!node.empty(), "unknown tier load {}", load.id);
    TierLoading& l = node.mapped();
    for (const BlockKey& k : l.keys) {
      auto it = loading_keys_.find(k);
      if (it != loading_keys_.end() && it->second == load.id) loading_keys_.erase(it);
    }
    if (l.request.valid()) {
      RequestCtx& r = requests_.at(l.request);
      // Only what fits without preempting anyone; the rest is computed.
      const int fit = std::min(load.num_blocks(), kv_manager_->num_allocatable_blocks());
      if (fit > 0) {
        const int end_tokens = (l.first_block + fit) * bs;
        KV_CHECK(kv_manager_->Allocate(l.holder, end_tokens));
        const std::span<const BlockId> table = kv_manager_->block_table(l.holder);
        for (int j = 0; j < fit; ++j) {
          kv_.WriteBlock(table[static_cast<size_t>(l.first_block + j)],
                         BlockRecordPayload(load.records[static_cast<size_t>(j)], layout).data());
        }
        kv_manager_->Commit(l.holder, r.request.prompt, end_tokens);
        r.tier_first_block = l.first_block;
        r.tier_of_block.assign(load.tier.begin(), load.tier.begin() + fit);
      }
      kv_manager_->EndSequence(l.holder);
      Schedule(l.request);
    }
    tiers_->Recycle(std::move(load.records));
    auto waiters = tier_waiters_.extract(load.id);
    if (waiters.empty()) continue;
    for (RequestId w : waiters.mapped()) {
      auto it = requests_.find(w);
      if (it == requests_.end() || it->second.phase != Phase::kTierWait ||
          it->second.load_id != load.id) {
        continue;  // cancelled meanwhile
      }
      if (!StartTierLoad(w)) Schedule(w);
    }
  }
}

void EngineCore::FillTierMetrics(const RequestCtx& r, int cached_tokens,
                                 RequestMetrics* m) const {
  if (tier_names_.empty()) return;
  m->cached_tokens_by_tier.push_back({"ram", 0});
  for (const std::string& name : tier_names_) m->cached_tokens_by_tier.push_back({name, 0});
  const int bs = config_.block_size;
  // Block b's tokens count for the tier that loaded it for this request, else for RAM; a
  // token-granular hit's tokens for whoever supplied the block they were copied from.
  const auto slot_of = [&](int b) {
    const int j = b - r.tier_first_block;
    if (j < 0 || j >= static_cast<int>(r.tier_of_block.size())) return size_t{0};
    const std::string_view name = tiers_->tiers()[static_cast<size_t>(r.tier_of_block[j])]->name();
    for (size_t t = 0; t < tier_names_.size(); ++t) {
      if (tier_names_[t] == name) return t + 1;
    }
    return size_t{0};
  };
  for (int b = 0; b < cached_tokens / bs; ++b) m->cached_tokens_by_tier[slot_of(b)].tokens += bs;
  m->cached_tokens_by_tier[slot_of(cached_tokens / bs)].tokens += cached_tokens % bs;
}

}  // namespace kvserve
