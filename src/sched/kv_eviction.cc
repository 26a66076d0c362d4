#include "sched/kv_eviction.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <utility>

namespace kvserve {

std::string_view KvEvictionPolicyName(KvEvictionPolicy policy) {
  switch (policy) {
    case KvEvictionPolicy::kNone: return "none";
    case KvEvictionPolicy::kWindow: return "window";
    case KvEvictionPolicy::kSinks: return "sinks";
    case KvEvictionPolicy::kH2O: return "h2o";
    case KvEvictionPolicy::kSnapKV: return "snapkv";
  }
  return "none";
}

Result<KvEvictionPolicy> ParseKvEvictionPolicy(std::string_view name, std::string_view what) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (int i = 0; i < kNumKvEvictionPolicies; ++i) {
    const auto p = static_cast<KvEvictionPolicy>(i);
    if (lower == KvEvictionPolicyName(p)) return p;
  }
  return InvalidArgument(fmt::format(
      "{}: unknown policy '{}'; use none, window, sinks, h2o or snapkv", what, name));
}

Result<KvEvictionPlan> PlanKvEviction(const KvEvictionConfig& c, int block_size, int max_slots) {
  KvEvictionPlan plan;
  if (!c.enabled()) return plan;
  const std::string_view name = KvEvictionPolicyName(c.policy);
  if (c.budget_tokens <= 0) {
    return InvalidArgument(fmt::format(
        "kv eviction '{}' needs a budget (--kv-budget TOKENS, or kv_eviction.budget)", name));
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
  const int budget = plan.budget_slots(block_size);
  const bool snapkv = c.policy == KvEvictionPolicy::kSnapKV;
  if (snapkv && (c.snapkv_window < 1 || c.snapkv_kernel < 1)) {
    return InvalidArgument("the snapkv window and kernel must be at least 1");
  }
  int batch = c.evict_batch_tokens;
  if (batch == 0) batch = std::max(budget / 8, snapkv ? c.snapkv_window : 0);
  plan.drop_blocks = std::clamp((batch + block_size - 1) / block_size, 1,
                                plan.budget_blocks - plan.keep_blocks);
  if (c.policy != KvEvictionPolicy::kH2O && !snapkv) return plan;
  plan.by_score = true;
  const int drop = plan.drop_blocks * block_size;
  if (snapkv) {
    // The window's queries all come after the previous eviction, so its scores are its own.
    if (c.snapkv_window > drop) {
      return InvalidArgument(fmt::format(
          "the snapkv window ({}) must not be longer than the kv evict batch ({} tokens)",
          c.snapkv_window, drop));
    }
    plan.protect_slots = plan.window_slots = c.snapkv_window;
    plan.pool_kernel = c.snapkv_kernel;
  } else {
    if (!(c.h2o_recent_fraction >= 0 && c.h2o_recent_fraction < 1)) {
      return InvalidArgument("the h2o recent fraction must be in [0, 1)");
    }
    plan.protect_slots = static_cast<int>(std::ceil(c.h2o_recent_fraction * budget));
  }
  if (plan.protect_slots + drop > budget) {
    return InvalidArgument(fmt::format(
        "a kv budget of {} cannot keep the newest {} tokens and still drop {} at once",
        c.budget_tokens, plan.protect_slots, drop));
  }
  return plan;
}

void SelectKeptSlots(const KvEvictionPlan& plan, int block_size, std::span<const int64_t> scores,
                     std::vector<int32_t>* kept) {
  const int budget = plan.budget_slots(block_size);
  const int candidates = budget - plan.protect_slots;
  const int drop = plan.drop_blocks * block_size;
  // Max-pooled over [i - k/2, i + k/2] within the candidates (SnapKV clusters its picks).
  const int half = plan.pool_kernel / 2;
  std::vector<std::pair<int64_t, int32_t>> order(static_cast<size_t>(candidates));
  for (int i = 0; i < candidates; ++i) {
    int64_t best = scores[static_cast<size_t>(i)];
    for (int j = std::max(0, i - half); j <= std::min(candidates - 1, i + half); ++j) {
      best = std::max(best, scores[static_cast<size_t>(j)]);
    }
    order[static_cast<size_t>(i)] = {best, i};
  }
  std::partial_sort(order.begin(), order.begin() + drop, order.end());
  std::vector<char> gone(static_cast<size_t>(budget), 0);
  for (int i = 0; i < drop; ++i) {
    gone[static_cast<size_t>(order[static_cast<size_t>(i)].second)] = 1;
  }
  kept->clear();
  for (int s = 0; s < budget; ++s) {
    if (!gone[static_cast<size_t>(s)]) kept->push_back(s);
  }
}

}  // namespace kvserve
