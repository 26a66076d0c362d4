#include "prefix/kv_tier.h"

#include <algorithm>
#include <cmath>

namespace kvserve {

void TierCounters::ObserveLoadSeconds(double seconds) {
  const auto it = std::lower_bound(kTierLatencyBounds.begin(), kTierLatencyBounds.end(), seconds);
  buckets_[static_cast<size_t>(it - kTierLatencyBounds.begin())].fetch_add(1);
  latency_count_.fetch_add(1);
  latency_sum_ns_.fetch_add(static_cast<int64_t>(std::llround(seconds * 1e9)));
}

void KvTier::SetObserver(TierObserver* observer) {
  std::lock_guard lock(observer_mu_);
  observer_ = observer;
}

void KvTier::NotifyStored(const BlockKey& key) {
  std::lock_guard lock(observer_mu_);
  if (observer_) observer_->OnTierStored(name(), key);
}

void KvTier::NotifyRemoved(const BlockKey& key) {
  std::lock_guard lock(observer_mu_);
  if (observer_) observer_->OnTierRemoved(name(), key);
}

TierStats TierCounters::Take(std::string name) const {
  TierStats s;
  s.name = std::move(name);
  s.query_blocks = query_blocks.load();
  s.hit_blocks = hit_blocks.load();
  s.blocks_read = blocks_read.load();
  s.bytes_read = bytes_read.load();
  s.blocks_written = blocks_written.load();
  s.bytes_written = bytes_written.load();
  s.dropped_writes = dropped_writes.load();
  for (int i = 0; i < kNumTierErrors; ++i) s.errors[i] = errors[i].load();
  s.entries = entries.load();
  s.bytes_held = bytes_held.load();
  for (size_t i = 0; i < buckets_.size(); ++i) s.latency_buckets[i] = buckets_[i].load();
  s.latency_count = latency_count_.load();
  s.latency_sum_seconds = static_cast<double>(latency_sum_ns_.load()) * 1e-9;
  return s;
}

}  // namespace kvserve
