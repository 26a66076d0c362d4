#include "router/policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "util/check.h"

namespace kvserve::router {

Result<PolicyKind> ParsePolicy(std::string_view name) {
  if (name == "cache-aware") return PolicyKind::kCacheAware;
  if (name == "least-load") return PolicyKind::kLeastLoad;
  if (name == "round-robin") return PolicyKind::kRoundRobin;
  return InvalidArgument(
      fmt::format("unknown policy '{}': use cache-aware, least-load or round-robin", name));
}

std::string_view PolicyName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kCacheAware:
      return "cache-aware";
    case PolicyKind::kLeastLoad:
      return "least-load";
    case PolicyKind::kRoundRobin:
      return "round-robin";
  }
  return "?";
}

std::string_view RuleName(Rule rule) {
  switch (rule) {
    case Rule::kRoundRobin:
      return "round_robin";
    case Rule::kLeastLoad:
      return "least_load";
    case Rule::kSticky:
      return "sticky";
    case Rule::kImbalanced:
      return "imbalanced";
    case Rule::kCacheMatch:
      return "cache_match";
    case Rule::kNoMatch:
      return "no_match";
  }
  return "?";
}

bool Imbalanced(int64_t min_load, int64_t max_load, const CacheAwareConfig& config) {
  return max_load - min_load > config.balance_abs_threshold &&
         static_cast<double>(max_load) >
             config.balance_rel_threshold * static_cast<double>(min_load);
}

namespace {

// Rotation shared by every policy: among equally good candidates, the first one after the
// replica chosen last, in replica order.
class Rotation {
 public:
  const Candidate* Pick(std::span<const Candidate* const> tied, int num_replicas) {
    KV_CHECK(!tied.empty(), "no candidate");
    const int n = std::max(num_replicas, 1);
    const Candidate* best = tied[0];
    int best_key = std::numeric_limits<int>::max();
    for (const Candidate* c : tied) {
      const int key = ((c->replica - last_ - 1) % n + n) % n;
      if (key < best_key) {
        best_key = key;
        best = c;
      }
    }
    last_ = best->replica;
    return best;
  }

 private:
  int last_ = -1;
};

// The candidates that minimise `key`, in input order.
template <typename Key>
std::vector<const Candidate*> Best(std::span<const Candidate* const> from, Key key) {
  std::vector<const Candidate*> out;
  for (const Candidate* c : from) {
    if (out.empty() || key(*c) < key(*out[0])) {
      out.assign(1, c);
    } else if (key(*c) == key(*out[0])) {
      out.push_back(c);
    }
  }
  return out;
}

std::vector<const Candidate*> All(std::span<const Candidate> candidates) {
  KV_CHECK(!candidates.empty(), "no candidate");
  std::vector<const Candidate*> out;
  for (const Candidate& c : candidates) out.push_back(&c);
  return out;
}

int64_t LoadOf(const Candidate& c) { return c.load; }

class RoundRobinPolicy final : public Policy {
 public:
  PolicyKind kind() const override { return PolicyKind::kRoundRobin; }
  Decision Choose(const RouteInput& in) override {
    const Candidate* c = rotation_.Pick(All(in.candidates), in.num_replicas);
    return {c->replica, Rule::kRoundRobin, c->matched_blocks};
  }

 private:
  Rotation rotation_;
};

class LeastLoadPolicy final : public Policy {
 public:
  PolicyKind kind() const override { return PolicyKind::kLeastLoad; }
  Decision Choose(const RouteInput& in) override {
    const Candidate* c = rotation_.Pick(Best(All(in.candidates), LoadOf), in.num_replicas);
    return {c->replica, Rule::kLeastLoad, c->matched_blocks};
  }

 private:
  Rotation rotation_;
};

class CacheAwarePolicy final : public Policy {
 public:
  explicit CacheAwarePolicy(CacheAwareConfig config) : config_(config) {}
  PolicyKind kind() const override { return PolicyKind::kCacheAware; }

  Decision Choose(const RouteInput& in) override {
    const std::vector<const Candidate*> all = All(in.candidates);
    int64_t min_load = all[0]->load;
    int64_t max_load = all[0]->load;
    for (const Candidate* c : all) {
      min_load = std::min(min_load, c->load);
      max_load = std::max(max_load, c->load);
    }
    // 1. The cache key's replica, unless it is the overloaded one.
    for (const Candidate* c : all) {
      if (c->replica == in.sticky_replica && !Imbalanced(min_load, c->load, config_)) {
        return {c->replica, Rule::kSticky, c->matched_blocks};
      }
    }
    // 2. An imbalanced fleet: least-load.
    if (Imbalanced(min_load, max_load, config_)) {
      return Decide(Best(all, LoadOf), Rule::kImbalanced, in);
    }
    // 3. The longest cached prefix, when it covers enough of the prompt.
    const std::vector<const Candidate*> longest =
        Best(all, [](const Candidate& c) { return -static_cast<int64_t>(c.matched_blocks); });
    const double matched_tokens =
        static_cast<double>(longest[0]->matched_blocks) * std::max(in.block_size, 0);
    if (in.prompt_tokens > 0 && longest[0]->matched_blocks > 0 &&
        matched_tokens >= config_.cache_threshold * static_cast<double>(in.prompt_tokens)) {
      return Decide(Best(longest, LoadOf), Rule::kCacheMatch, in);
    }
    // 4. The least load, then the most room.
    return Decide(Best(Best(all, LoadOf), [](const Candidate& c) { return c.num_blocks; }),
                  Rule::kNoMatch, in);
  }

 private:
  Decision Decide(const std::vector<const Candidate*>& tied, Rule rule, const RouteInput& in) {
    const Candidate* c = rotation_.Pick(tied, in.num_replicas);
    return {c->replica, rule, c->matched_blocks};
  }

  CacheAwareConfig config_;
  Rotation rotation_;
};

}  // namespace

std::unique_ptr<Policy> MakePolicy(PolicyKind kind, CacheAwareConfig config) {
  switch (kind) {
    case PolicyKind::kRoundRobin:
      return std::make_unique<RoundRobinPolicy>();
    case PolicyKind::kLeastLoad:
      return std::make_unique<LeastLoadPolicy>();
    case PolicyKind::kCacheAware:
      return std::make_unique<CacheAwarePolicy>(config);
  }
  return nullptr;
}

int StickyKeys::Find(const std::string& key) const {
  auto it = map_.find(key);
  return it == map_.end() ? -1 : it->second.first;
}

void StickyKeys::Set(const std::string& key, int replica) {
  auto it = map_.find(key);
  if (it != map_.end()) {
    order_.erase(it->second.second);
    map_.erase(it);
  }
  order_.push_front(key);
  map_.emplace(key, std::make_pair(replica, order_.begin()));
  while (map_.size() > capacity_) {
    map_.erase(order_.back());
    order_.pop_back();
  }
}

}  // namespace kvserve::router
