// Eviction inside one sequence (docs/kv_eviction.md): a sequence whose KV would grow past its
// budget drops tokens from itself instead, so a stream can run past the model's context in
// constant memory.
//
//   none     the KV grows with the sequence (max_model_len caps prompt + generated tokens)
//   window   a sliding window: the oldest blocks go
//   sinks    StreamingLLM: the first sink_tokens (rounded up to whole blocks) stay for good as
//            attention sinks, and the oldest blocks after them go
//   h2o      heavy hitters (H2O): the newest h2o_recent_fraction of the budget stays, and of the
//            older tokens those with the least attention accumulated since they entered go
//   snapkv   SnapKV: the newest snapkv_window tokens are the observation window and stay; of the
//            older ones, those the window's queries attended to least (max-pooled over
//            snapkv_kernel neighbours) go
//
// All drop evict_batch_tokens (rounded up to whole blocks) at a time, when the sequence holds
// budget_tokens slots and has a token to add. window and sinks drop whole blocks. h2o and
// snapkv choose tokens per layer and KV head (scores summed over the head's query group): every
// (layer, head) drops the same number, its survivors are compacted to the front in order, so
// slot j of head h holds that head's j-th kept token and one block table still serves all heads;
// the freed slots at the end are reused by the next tokens. Positions are in-cache positions
// (StreamingLLM): a token's RoPE position is its slot, so every key that moves is re-rotated
// down by how far it moved, and no position ever reaches the budget.
//
// NOTE (exactness): when a sequence evicts depends only on how many slots it holds, never on how
// its tokens were batched: a chunk of prefill stops at the budget, and the next chunk starts
// with the eviction, as a decode step would. So prefill, decode, speculative verification and
// recomputation after a preemption all leave the same K/V, and greedy output does not depend on
// batching.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/status.h"

namespace kvserve {

enum class KvEvictionPolicy { kNone, kWindow, kSinks, kH2O, kSnapKV };
constexpr int kNumKvEvictionPolicies = 5;

// "none", "window", "sinks", "h2o", "snapkv".
std::string_view KvEvictionPolicyName(KvEvictionPolicy policy);
// The names above (any case). `what` names the setting in the error.
Result<KvEvictionPolicy> ParseKvEvictionPolicy(std::string_view name, std::string_view what);

struct KvEvictionConfig {
  KvEvictionPolicy policy = KvEvictionPolicy::kNone;
  int budget_tokens = 0;       // --kv-budget: slots a sequence holds at most (required)
  int sink_tokens = 4;         // --kv-sink-tokens (sinks)
  int evict_batch_tokens = 0;  // --kv-evict-batch: tokens dropped at once; 0 = budget / 8
                               // (snapkv: at least its window)
  double h2o_recent_fraction = 0.5;  // --h2o-recent-fraction: share of the budget kept newest
  int snapkv_window = 32;            // --snapkv-window: observation window (queries, tokens)
  int snapkv_kernel = 5;             // --snapkv-kernel: max-pooling width over slots

  bool enabled() const { return policy != KvEvictionPolicy::kNone; }
};

// The plan of a valid config in blocks.
struct KvEvictionPlan {
  int budget_blocks = 0;  // the sequence holds at most this many blocks
  int keep_blocks = 0;    // leading blocks never dropped (the sinks)
  int drop_blocks = 0;    // blocks dropped at once, right after the kept ones (by_score: that
                          // many blocks' worth of tokens, chosen per layer and head)
  // h2o and snapkv: tokens chosen by attention scores and compacted.
  bool by_score = false;
  int protect_slots = 0;   // the newest slots, never dropped (h2o's recent part, snapkv's window)
  int window_slots = 0;    // snapkv: only queries at slots >= budget - window_slots score, and
                           // the scores start afresh after each eviction; 0 (h2o): every query
                           // scores and a kept token keeps its accumulated score
  int pool_kernel = 1;     // snapkv: max-pooling width of the scores
  int budget_slots(int block_size) const { return budget_blocks * block_size; }
};

// The slots one (layer, KV head) keeps when it evicts: `scores` are its accumulated scores of
// slots [0, budget slots) (fixed-point sums, ops/attention.h: exact, so their order cannot
// change which tokens go); the newest protect_slots stay; of the others, the
// drop_blocks * block_size with the lowest (pooled) scores go, the older first among equals.
// Writes the kept slots in ascending order.
void SelectKeptSlots(const KvEvictionPlan& plan, int block_size, std::span<const int64_t> scores,
                     std::vector<int32_t>* kept);

// Checks a config against the block size and the most slots one sequence may hold (the model's
// context, or the cache): errors name the flag to change. For kNone, an empty plan.
Result<KvEvictionPlan> PlanKvEviction(const KvEvictionConfig& config, int block_size,
                                      int max_slots);

}  // namespace kvserve
