// EvictionPolicy: which unlocked leaf of the radix tree to evict first. A policy maps a node's
// usage record to a key; the tree evicts the leaf with the smallest key (ties: older node first).
//
//   lru:      last access (oldest first)
//   lfu:      hit count, then last access
//   priority: highest request priority that used the node (lowest first), then last access
//
// Policies are tiny stateless strategy objects; thread safety: immutable after construction.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>

#include "kvserve/status.h"

namespace kvserve {

// What the tree records about a node's use. `last_access` is a logical clock (a counter the
// tree advances on every match, insert and release), so orders are exact and reproducible.
struct NodeUsage {
  int64_t last_access = 0;
  int64_t hit_count = 0;  // times a sequence matched or inserted this block
  int32_t priority = 0;   // highest priority of a request that used it (higher = keep longer)
};

using EvictionKey = std::array<int64_t, 2>;

enum class EvictionPolicyKind { kLru, kLfu, kPriority };

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual EvictionKey Key(const NodeUsage& usage) const = 0;
  virtual const char* name() const = 0;
};

std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionPolicyKind kind);
// "lru", "lfu" or "priority"; InvalidArgument naming the choices otherwise.
Result<EvictionPolicyKind> ParseEvictionPolicy(std::string_view name);

}  // namespace kvserve
