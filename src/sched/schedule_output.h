// ScheduleOutput: the plain value one Scheduler::Schedule() call produces and the engine
// executes: which sequences run this step and how many new tokens each computes, plus what
// changed state (preempted, failed).
#pragma once

#include <cstdint>
#include <vector>

#include "prefix/kv_cache_manager.h"
#include "util/strong_id.h"

namespace kvserve {

struct ScheduledSeq {
  SeqId seq;
  int num_computed = 0;    // slots holding K/V before this step (the chunk starts here)
  int num_new_tokens = 0;  // tokens computed this step: [num_computed, num_computed + new)
  bool wants_logits = false;  // the chunk reaches the sequence's last token: sample after it
  // Speculative drafts among num_new_tokens (its last ones, after the sequence's last token):
  // their K/V are written, but they count as computed only once verified. A sequence with
  // drafts wants num_draft + 1 logits rows.
  int num_draft = 0;
  // Tokens the sequence evicted inside itself (sched/kv_eviction.h) before this step: token i is
  // at slot i - num_evicted, and that slot is also its RoPE position.
  int num_evicted = 0;
};

// An eviction inside a sequence this step: the engine performs the copies, then re-rotates the
// moved blocks' keys by -evicted_tokens positions, before the forward pass.
struct KvEvictionEdit {
  SeqId seq;
  BlockEviction blocks;
};

struct ScheduleOutput {
  std::vector<ScheduledSeq> seqs;   // in batch order
  std::vector<SeqId> preempted;     // sent back to waiting this step (KV freed, recompute later)
  std::vector<SeqId> failed;        // can never fit (the engine finishes them with an error)
  std::vector<KvEvictionEdit> evictions;  // in order; before the forward pass
  int num_batched_tokens = 0;
  int prefill_cap = -1;  // tokens prefill was held to for the latency target; -1 = not held

  bool empty() const { return seqs.empty(); }
};

}  // namespace kvserve
