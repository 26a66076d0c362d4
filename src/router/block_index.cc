#include "router/block_index.h"

#include <mutex>
#include <type_traits>
#include <variant>

#include "util/check.h"

namespace kvserve::router {

BlockIndex::BlockIndex(BlockIndexConfig config)
    : config_(std::move(config)),
      block_size_(config_.block_size),
      replicas_(static_cast<size_t>(config_.num_replicas)) {
  KV_CHECK(config_.num_replicas >= 0, "num_replicas {}", config_.num_replicas);
  if (!config_.clock) config_.clock = [] { return std::chrono::steady_clock::now(); };
}

uint32_t BlockIndex::MediumBit(const std::string& medium) {
  auto it = media_.find(medium);
  if (it != media_.end()) return it->second;
  // More than 32 media share the last bit: a block then stays until all of them dropped it.
  const uint32_t bit = media_.size() < 32 ? uint32_t{1} << media_.size() : uint32_t{1} << 31;
  media_.emplace(medium, bit);
  return bit;
}

void BlockIndex::Apply(int replica, const KvEventBatch& batch) {
  std::unique_lock lock(mu_);
  Replica& r = replicas_.at(static_cast<size_t>(replica));
  for (const KvEvent& event : batch.events) {
    std::visit(
        [&](const auto& e) {
          using T = std::decay_t<decltype(e)>;
          if constexpr (std::is_same_v<T, BlockStoredEvent>) {
            int expected = 0;
            if (!block_size_.compare_exchange_strong(expected, e.block_size) &&
                expected != e.block_size) {
              mismatches_.fetch_add(1);
            }
            const uint32_t bit = MediumBit(e.medium);
            for (uint64_t h : e.block_hashes) {
              r.stored[h] |= bit;
              r.pending.erase(h);
            }
          } else if constexpr (std::is_same_v<T, BlockRemovedEvent>) {
            const uint32_t bit = MediumBit(e.medium);
            for (uint64_t h : e.block_hashes) {
              r.pending.erase(h);
              auto it = r.stored.find(h);
              if (it == r.stored.end()) continue;
              it->second &= ~bit;
              if (it->second == 0) r.stored.erase(it);
            }
          } else {
            r.stored.clear();
            r.pending.clear();
            r.lapse_order.clear();
          }
        },
        event);
  }
}

void BlockIndex::Clear(int replica) {
  std::unique_lock lock(mu_);
  Replica& r = replicas_.at(static_cast<size_t>(replica));
  r.stored.clear();
  r.pending.clear();
  r.lapse_order.clear();
}

void BlockIndex::PrunePending(Replica& r, TimePoint now) {
  while (!r.lapse_order.empty() && r.lapse_order.front().first <= now) {
    const auto [until, hash] = r.lapse_order.front();
    r.lapse_order.pop_front();
    auto it = r.pending.find(hash);
    if (it != r.pending.end() && it->second == until) r.pending.erase(it);
  }
}

void BlockIndex::AddPending(int replica, std::span<const uint64_t> hashes) {
  const TimePoint now = config_.clock();
  const TimePoint until = now + config_.pending_ttl;
  std::unique_lock lock(mu_);
  Replica& r = replicas_.at(static_cast<size_t>(replica));
  PrunePending(r, now);
  for (uint64_t h : hashes) {
    if (r.stored.contains(h)) continue;
    r.pending[h] = until;
    r.lapse_order.emplace_back(until, h);
  }
}

size_t BlockIndex::MatchPrefix(int replica, std::span<const uint64_t> hashes) const {
  const TimePoint now = config_.clock();
  std::shared_lock lock(mu_);
  const Replica& r = replicas_.at(static_cast<size_t>(replica));
  size_t n = 0;
  for (uint64_t h : hashes) {
    if (!r.stored.contains(h)) {
      auto it = r.pending.find(h);
      if (it == r.pending.end() || it->second <= now) break;
    }
    ++n;
  }
  return n;
}

size_t BlockIndex::NumBlocks(int replica) const {
  std::shared_lock lock(mu_);
  const Replica& r = replicas_.at(static_cast<size_t>(replica));
  return r.stored.size() + r.pending.size();
}

size_t BlockIndex::NumStoredBlocks(int replica) const {
  std::shared_lock lock(mu_);
  return replicas_.at(static_cast<size_t>(replica)).stored.size();
}

}  // namespace kvserve::router
