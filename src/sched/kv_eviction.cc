#include "sched/kv_eviction.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace kvserve {

std::string_view KvEvictionPolicyName(KvEvictionPolicy policy) {
  switch (policy) {
    case KvEvictionPolicy::kNone: return "none";
    case KvEvictionPolicy::kWindow: return "window";
    case KvEvictionPolicy::kSinks: return "sinks";
  }
  return "none";
}

Result<KvEvictionPolicy> ParseKvEvictionPolicy(std::string_view name, std::string_view what) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (KvEvictionPolicy p :
       {KvEvictionPolicy::kNone, KvEvictionPolicy::kWindow, KvEvictionPolicy::kSinks}) {
    if (lower == KvEvictionPolicyName(p)) return p;
  }
  if (lower == "h2o" || lower == "snapkv") {
    return InvalidArgument(fmt::format("{}: '{}' is not available yet; use none, window or sinks",
                                       what, name));
  }
  return InvalidArgument(
      fmt::format("{}: unknown policy '{}'; use none, window or sinks", what, name));
}

Result<KvEvictionPlan> PlanKvEviction(const KvEvictionConfig& c, int block_size, int max_slots) {
  KvEvictionPlan plan;
  if (!c.enabled()) return plan;
  const std::string_view name = KvEvictionPolicyName(c.policy);
  if (c.budget_tokens <= 0) {
    return InvalidArgument(fmt::format("kv eviction '{}' needs a budget (--kv-budget TOKENS, or kv_eviction.budget)", name));
  }
  if (c.sink_tokens < 0) return InvalidArgument("kv sink tokens must not be negative");
  if (c.evict_batch_tokens < 0) return InvalidArgument("the kv evict batch must not be negative");
  plan.budget_blocks = c.budget_tokens / block_size;
  plan.keep_blocks =
      c.policy == KvEvictionPolicy::kSinks ? (c.sink_tokens + block_size - 1) / block_size : 0;
  if (plan.budget_blocks <= plan.keep_blocks) {
    return InvalidArgument(fmt::format(
        "a kv budget of {} leaves no room past the sinks: with blocks of {} tokens it must be at "
        "least {}",
        c.budget_tokens, block_size, (plan.keep_blocks + 1) * block_size));
  }
  if (plan.budget_blocks * block_size > max_slots) {
    return InvalidArgument(fmt::format(
        "a kv budget of {} is more than one sequence can hold ({} tokens)", c.budget_tokens,
        max_slots));
  }
  const int batch = c.evict_batch_tokens > 0 ? c.evict_batch_tokens
                                             : plan.budget_blocks * block_size / 8;
  plan.drop_blocks = std::clamp((batch + block_size - 1) / block_size, 1,
                                plan.budget_blocks - plan.keep_blocks);
  return plan;
}

}  // namespace kvserve
