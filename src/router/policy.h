// Routing policies: which healthy replica gets a request. Pure decisions over a snapshot of the
// candidates (load, cached prefix, cache size); the router takes the snapshot, asks, and counts
// the request against the chosen replica's load under one lock, so concurrent requests see each
// other's choices.
//
// NOTE (the rules; docs/router.md says the same for users):
//   round-robin  the next candidate after the last one chosen, in replica order.
//   least-load   the fewest requests in flight through this router; ties rotate like
//                round-robin.
//   cache-aware  SGLang's cache-aware rule with exact block sets instead of an approximate tree:
//     1. a request whose cache key (OpenAI prompt_cache_key, Anthropic metadata.user_id) last
//        went to a candidate goes there again unless that candidate is overloaded (its load
//        would make the fleet imbalanced, as in 2);
//     2. the fleet is imbalanced when max load - min load > balance_abs_threshold AND
//        max load > balance_rel_threshold * min load: then least-load;
//     3. otherwise the candidates whose cached prefix of the prompt is longest; when that prefix
//        covers at least cache_threshold of the prompt's tokens, the least loaded of them;
//     4. otherwise (no cached prefix worth following) the least loaded candidate, and among
//        equally loaded ones the one holding the fewest blocks (the most room, SGLang's smallest
//        tree). SGLang takes the smallest tree first; load goes first here because an exact
//        block set only grows until the replica's cache is full, so the emptiest replica would
//        take every new prompt of a burst and of a fleet that just gained a replica.
//   Ties left after these rotate like round-robin.
//
// Thread safety: a Policy keeps its rotation state unguarded; callers serialize Choose.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "kvserve/status.h"

namespace kvserve::router {

enum class PolicyKind { kCacheAware, kLeastLoad, kRoundRobin };

Result<PolicyKind> ParsePolicy(std::string_view name);
std::string_view PolicyName(PolicyKind kind);

// Why a replica was chosen (a metrics label).
enum class Rule { kRoundRobin, kLeastLoad, kSticky, kImbalanced, kCacheMatch, kNoMatch };
std::string_view RuleName(Rule rule);
inline constexpr int kNumRules = 6;

struct CacheAwareConfig {
  double cache_threshold = 0.3;        // SGLang's default
  int64_t balance_abs_threshold = 64;  // SGLang's default
  double balance_rel_threshold = 1.5;  // SGLang's default
};

struct Candidate {
  int replica = 0;            // index in the fleet
  int64_t load = 0;           // requests in flight through this router
  size_t matched_blocks = 0;  // leading prompt blocks it holds (cache-aware only)
  size_t num_blocks = 0;      // blocks it holds in all (cache-aware only)
};

struct RouteInput {
  std::span<const Candidate> candidates;  // REQUIRES: non-empty, distinct replicas
  int num_replicas = 0;                   // the fleet's size, for rotation
  size_t prompt_tokens = 0;               // 0: unknown, no cache match is tried
  int block_size = 0;
  int sticky_replica = -1;  // where this request's cache key went last; -1 = none
};

struct Decision {
  int replica = -1;
  Rule rule = Rule::kRoundRobin;
  size_t matched_blocks = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual PolicyKind kind() const = 0;
  virtual Decision Choose(const RouteInput& in) = 0;
};

std::unique_ptr<Policy> MakePolicy(PolicyKind kind, CacheAwareConfig config = {});

// Whether loads in [min_load, max_load] are imbalanced by SGLang's two thresholds.
bool Imbalanced(int64_t min_load, int64_t max_load, const CacheAwareConfig& config);

// The replica each cache key went to last, for the most recent `capacity` keys.
// Thread safety: callers serialize (the router's decision lock).
class StickyKeys {
 public:
  explicit StickyKeys(size_t capacity = 65536) : capacity_(capacity) {}
  // The key's replica, -1 when unknown.
  int Find(const std::string& key) const;
  void Set(const std::string& key, int replica);
  size_t size() const { return map_.size(); }

 private:
  size_t capacity_;
  std::list<std::string> order_;  // most recently set first
  std::unordered_map<std::string, std::pair<int, std::list<std::string>::iterator>> map_;
};

}  // namespace kvserve::router
