#include "prefix/eviction_policy.h"

#include <fmt/format.h>

namespace kvserve {
namespace {

class LruPolicy final : public EvictionPolicy {
 public:
  EvictionKey Key(const NodeUsage& u) const override { return {u.last_access, 0}; }
  const char* name() const override { return "lru"; }
};

class LfuPolicy final : public EvictionPolicy {
 public:
  EvictionKey Key(const NodeUsage& u) const override { return {u.hit_count, u.last_access}; }
  const char* name() const override { return "lfu"; }
};

class PriorityPolicy final : public EvictionPolicy {
 public:
  EvictionKey Key(const NodeUsage& u) const override { return {u.priority, u.last_access}; }
  const char* name() const override { return "priority"; }
};

}  // namespace

std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionPolicyKind kind) {
  switch (kind) {
    case EvictionPolicyKind::kLru: return std::make_unique<LruPolicy>();
    case EvictionPolicyKind::kLfu: return std::make_unique<LfuPolicy>();
    case EvictionPolicyKind::kPriority: return std::make_unique<PriorityPolicy>();
  }
  return std::make_unique<LruPolicy>();
}

Result<EvictionPolicyKind> ParseEvictionPolicy(std::string_view name) {
  if (name == "lru") return EvictionPolicyKind::kLru;
  if (name == "lfu") return EvictionPolicyKind::kLfu;
  if (name == "priority") return EvictionPolicyKind::kPriority;
  return InvalidArgument(
      fmt::format("unknown eviction policy '{}': use lru, lfu or priority", name));
}

}  // namespace kvserve
