// Eviction inside one sequence (docs/kv_eviction.md): a sequence whose KV would grow past its
// budget drops tokens from itself instead, so a stream can run past the model's context in
// constant memory.
//
//   none     the KV grows with the sequence (max_model_len caps prompt + generated tokens)
//   window   a sliding window: the oldest blocks go
//   sinks    StreamingLLM: the first sink_tokens (rounded up to whole blocks) stay for good as
//            attention sinks, and the oldest blocks after them go
//
// Both drop whole blocks, evict_batch_tokens (rounded up to whole blocks) at a time, when the
// sequence holds budget_tokens slots and has a token to add. Positions are in-cache positions
// (StreamingLLM): a token's RoPE position is its slot, so the keys after the dropped blocks are
// re-rotated down by the dropped count, and no position ever reaches the budget.
//
// NOTE (exactness): when a sequence evicts depends only on how many slots it holds, never on how
// its tokens were batched: a chunk of prefill stops at the budget, and the next chunk starts
// with the eviction, as a decode step would. So prefill, decode, speculative verification and
// recomputation after a preemption all leave the same K/V, and greedy output does not depend on
// batching.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kvserve/status.h"

namespace kvserve {

enum class KvEvictionPolicy { kNone, kWindow, kSinks };

// "none", "window", "sinks".
std::string_view KvEvictionPolicyName(KvEvictionPolicy policy);
// The names above; "h2o" and "snapkv" are named as not available yet. `what` names the setting.
Result<KvEvictionPolicy> ParseKvEvictionPolicy(std::string_view name, std::string_view what);

struct KvEvictionConfig {
  KvEvictionPolicy policy = KvEvictionPolicy::kNone;
  int budget_tokens = 0;       // --kv-budget: slots a sequence holds at most (required)
  int sink_tokens = 4;         // --kv-sink-tokens (sinks)
  int evict_batch_tokens = 0;  // --kv-evict-batch: tokens dropped at once; 0 = budget / 8

  bool enabled() const { return policy != KvEvictionPolicy::kNone; }
};

// The plan of a valid config in blocks.
struct KvEvictionPlan {
  int budget_blocks = 0;  // the sequence holds at most this many blocks
  int keep_blocks = 0;    // leading blocks never dropped (the sinks)
  int drop_blocks = 0;    // blocks dropped at once, right after the kept ones
  int budget_slots(int block_size) const { return budget_blocks * block_size; }
};

// Checks a config against the block size and the most slots one sequence may hold (the model's
// context, or the cache): errors name the flag to change. For kNone, an empty plan.
Result<KvEvictionPlan> PlanKvEviction(const KvEvictionConfig& config, int block_size,
                                      int max_slots);

}  // namespace kvserve
