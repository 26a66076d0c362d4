// Scheduler: continuous batching over a KvCacheManager. Each Schedule() picks the work of one
// step so that every sequence's num_computed catches up with its number of tokens: a running
// sequence that just sampled computes 1 token (decode), one still in its prompt computes a chunk
// (chunked prefill), waiting sequences are admitted while budget and blocks allow.
//
// Owns: each sequence's scheduling record (tokens, num_computed, state, priority) and the
// waiting/running queues. Sees the KV side only through KvCacheManager (not owned).
//
// States: waiting -> running -> (preempted -> running)* -> removed (finished or cancelled).
// A preempted sequence has no KV state (its private blocks are freed, its committed prefix stays
// in the prefix cache) and is resumed by recomputing, usually mostly from the cache.
//
// NOTE (one step, in order):
//   1. Running sequences in admission order, each taking min(pending, budget) tokens. When
//      Allocate fails, the victim is the running sequence with the lowest priority, newest
//      first; it is preempted (un-scheduled if it already got tokens this step) until the
//      allocation succeeds or the victim is the sequence itself.
//   1a. (Speculative decoding) decodes whose sequence has drafts (SetDraft) carry them after
//      their token, within half of the budget left, and only where the blocks can be had
//      without preempting anyone; other drafts are dropped.
//   1b. With an inter-token latency target and decodes in the step, the token budget left for
//      prefill becomes what the step cost model predicts fits in the target (at least
//      min_prefill_chunk, and just that before the model is ready).
//   2. Only when nobody was preempted: waiting sequences, highest priority first then oldest,
//      while budget, max_num_seqs and blocks last. A waiting sequence that shares more full
//      blocks with a running sequence's unfinished prompt than the cache holds now is deferred
//      (it will find that prefix cached in a step or two instead of computing it twice).
//   (Eviction inside a sequence, kv_eviction.h) a sequence with a plan takes at most the tokens
//   that fit in its budget; one that holds its whole budget evicts first, in the same step.
//   3. A sequence that cannot be allocated even with nothing else running, and no other
//      sequence of the KvCacheManager holding blocks (a lower-tier load holds its request's
//      prefix for a moment), is failed.
//
// Thread safety: none; the engine thread owns it.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvserve/status.h"
#include "prefix/kv_cache_manager.h"
#include "sched/kv_eviction.h"
#include "sched/schedule_output.h"
#include "sched/step_cost_model.h"

namespace kvserve {

struct SchedulerConfig {
  int max_num_seqs = 64;             // running sequences at once
  int max_num_batched_tokens = 512;  // tokens in one step's batch
  int max_model_len = 2048;          // prompt + generated tokens of one sequence
  bool defer_shared_prefixes = true;  // step 2's deferral (only with prefix caching)
  // Waiting requests with at most this many tokens left to compute (after their cache hit) are
  // admitted before running prefills take the step's budget, within half of it; 0 = off.
  int short_prefill_tokens = 128;
  // Inter-token latency target (--max-itl-ms): while sequences decode, a step carries only as
  // many prefill tokens as the step cost model predicts fit in this time, but at least
  // min_prefill_chunk so prompts keep moving (and only that until the model is ready). 0 = off
  // (prefill takes the whole token budget).
  double max_itl_seconds = 0;
  int min_prefill_chunk = 32;
};

enum class SeqState { kWaiting, kRunning, kPreempted };

struct SeqSpec {
  SeqId id;
  CacheNamespace ns;
  std::vector<TokenId> prompt;
  int max_tokens = 0;
  int32_t priority = 0;  // higher = more important (admitted first, preempted last)
  // Eviction inside the sequence (kv_eviction.h); budget_blocks 0 = none. With a plan the
  // sequence holds at most its budget and may run past max_model_len.
  KvEvictionPlan eviction;
};

class Scheduler {
 public:
  // REQUIRES: kv outlives the scheduler.
  Scheduler(const SchedulerConfig& config, KvCacheManager* kv);

  const SchedulerConfig& config() const { return config_; }
  // Whether a request could ever run: OutOfRange above max_model_len, ResourceExhausted when
  // it needs more blocks than the cache can give one sequence, InvalidArgument when empty.
  // With an eviction plan only the budget has to fit.
  Status CheckAdmission(int num_prompt_tokens, int max_tokens,
                        const KvEvictionPlan& eviction = {}) const;
  // Queues a sequence (after CheckAdmission). REQUIRES: id unused.
  Status Add(SeqSpec spec);
  ScheduleOutput Schedule();
  // The model that sizes prefill for max_itl_seconds (nullptr = none). REQUIRES: outlives use.
  void set_cost_model(const StepCostModel* model) { cost_model_ = model; }
  // After the step ran: advances num_computed and commits the new full blocks.
  void OnStepDone(const ScheduleOutput& out);
  // Appends a sampled token. REQUIRES: the sequence is running and caught up.
  void AppendToken(SeqId seq, TokenId token);
  // Speculative drafts for the next Schedule(): tokens that may follow the sequence's last one.
  // REQUIRES: running with exactly one token to compute. Schedule() drops what it cannot carry.
  void SetDraft(SeqId seq, std::vector<TokenId> draft);
  // The drafts the last step computed for the sequence (empty when none).
  std::span<const TokenId> draft(SeqId seq) const { return Get(seq).draft; }
  // After the step and its sampling: the first `accepted` drafts were accepted (the engine has
  // appended them and the token after them with AppendToken). Their K/V count as computed and
  // are committed; blocks that held only rejected drafts are released.
  void FinishVerify(SeqId seq, int accepted);
  // Starts `child` as a copy of running `parent` (a parallel sample). If no block can be had
  // for the copy-on-write, the child waits and will recompute. Returns the copy to perform.
  std::optional<BlockCopy> Fork(SeqId parent, SeqId child);
  // Removes a sequence in any state (finished, cancelled, failed); releases its KV.
  void Remove(SeqId seq);

  bool Contains(SeqId seq) const { return seqs_.count(seq) != 0; }
  SeqState state(SeqId seq) const;
  std::span<const TokenId> tokens(SeqId seq) const;
  int num_computed(SeqId seq) const;
  int num_prompt_tokens(SeqId seq) const;
  int num_cached_tokens(SeqId seq) const;    // found cached at first admission
  int64_t num_computed_total(SeqId seq) const;  // tokens computed, recomputation included
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }
  bool HasWork() const { return !waiting_.empty() || !running_.empty(); }
  int64_t num_preemptions() const { return num_preemptions_; }
  const std::vector<SeqId>& running() const { return running_; }

 private:
  struct Record {
    SeqSpec spec;
    std::vector<TokenId> tokens;  // prompt + generated
    int num_computed = 0;
    SeqState state = SeqState::kWaiting;
    uint64_t arrival = 0;
    int num_cached_first = -1;
    int64_t num_computed_total = 0;
    uint64_t scheduled_step = 0;  // the step that last scheduled it
    std::vector<TokenId> draft;   // speculative tokens after the last one (SetDraft)
    uint64_t draft_step = 0;      // the step that carried them
  };
  struct WaitKey {
    int32_t neg_priority;
    uint64_t arrival;
    SeqId id;
    auto operator<=>(const WaitKey&) const = default;
  };
  Record& Get(SeqId seq);
  const Record& Get(SeqId seq) const;
  WaitKey KeyOf(const Record& r) const { return {-r.spec.priority, r.arrival, r.spec.id}; }
  // prefills = false: only sequences with one token left (decodes); true: the rest.
  void ScheduleRunning(ScheduleOutput& out, int& budget, bool prefills);
  // Step 1a: adds the scheduled decodes' drafts, within `budget`.
  void ScheduleDrafts(ScheduleOutput& out, int& budget);
  // Admits waiting sequences in priority order; with max_uncached, only those with at most that
  // many tokens left to compute (others keep their place).
  void ScheduleWaiting(ScheduleOutput& out, int& budget, int max_uncached);
  // Admits one waiting sequence; false if it did not get its blocks.
  bool Admit(Record& r, ScheduleOutput& out, int& budget);
  bool ShouldDefer(const Record& r) const;
  size_t PickVictim() const;  // index into running_
  void Preempt(size_t index, ScheduleOutput& out, int& budget);
  // Preempts PickVictim() for running_[i], keeping i on the same sequence; true when that
  // victim was running_[i] itself (i is then the next sequence).
  bool PreemptVictim(size_t& i, ScheduleOutput& out, int& budget);
  // Ends a sequence's KV (EndSequence) and drops the evictions it made this step.
  void EndKv(SeqId id, ScheduleOutput& out);
  void Push(ScheduleOutput& out, Record& r, int n, int& budget);
  // A sequence with an eviction plan: the tokens that fit in its budget now (INT_MAX without a
  // plan). Room() evicts first when none fit (recorded in out.evictions); -1 when the
  // eviction's copies could not be had.
  int FreeSlots(const Record& r) const;
  // The tokens whose full blocks may be committed to the prefix tree (see the .cc).
  int CommitLimit(const Record& r) const;
  int Room(Record& r, ScheduleOutput& out);

  SchedulerConfig config_;
  KvCacheManager* kv_;
  const StepCostModel* cost_model_ = nullptr;
  std::unordered_map<SeqId, Record> seqs_;
  std::set<WaitKey> waiting_;
  std::vector<SeqId> running_;  // admission order
  uint64_t next_arrival_ = 0;
  uint64_t step_ = 0;  // Schedule() calls so far
  int64_t num_preemptions_ = 0;
};

}  // namespace kvserve
