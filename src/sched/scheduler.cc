#include "sched/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "util/check.h"

namespace kvserve {

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager* kv)
    : config_(config), kv_(kv) {
  KV_CHECK_GT(config.max_num_seqs, 0);
  KV_CHECK_GT(config.max_num_batched_tokens, 0);
}

Scheduler::Record& Scheduler::Get(SeqId seq) {
  auto it = seqs_.find(seq);
  KV_CHECK(it != seqs_.end(), "unknown sequence {}", seq.value());
  return it->second;
}

const Scheduler::Record& Scheduler::Get(SeqId seq) const {
  auto it = seqs_.find(seq);
  KV_CHECK(it != seqs_.end(), "unknown sequence {}", seq.value());
  return it->second;
}

Status Scheduler::CheckAdmission(int num_prompt_tokens, int max_tokens,
                                 const KvEvictionPlan& eviction) const {
  if (num_prompt_tokens <= 0) return InvalidArgument("the prompt is empty");
  if (max_tokens < 1) return InvalidArgument("max_tokens must be at least 1");
  if (eviction.budget_blocks > 0) {
    if (eviction.budget_blocks > kv_->max_blocks_for_one_sequence()) {
      return ResourceExhausted(fmt::format(
          "a KV budget of {} blocks is more than the cache can give one request ({}); lower "
          "--kv-budget or raise --kv-cache-memory",
          eviction.budget_blocks, kv_->max_blocks_for_one_sequence()));
    }
    return Status::Ok();
  }
  const int64_t total = static_cast<int64_t>(num_prompt_tokens) + max_tokens;
  if (total > config_.max_model_len) {
    return OutOfRange(fmt::format(
        "prompt of {} tokens plus {} to generate exceeds the maximum model length of {}; "
        "shorten the prompt or lower max_tokens",
        num_prompt_tokens, max_tokens, config_.max_model_len));
  }
  const int64_t bs = kv_->block_size();
  const int64_t blocks = (total + bs - 1) / bs;
  if (blocks > kv_->max_blocks_for_one_sequence()) {
    return ResourceExhausted(fmt::format(
        "prompt of {} tokens plus {} to generate needs {} KV blocks but the cache can give one "
        "request at most {}; raise --kv-cache-memory or --num-blocks, or lower max_tokens",
        num_prompt_tokens, max_tokens, blocks, kv_->max_blocks_for_one_sequence()));
  }
  return Status::Ok();
}

Status Scheduler::Add(SeqSpec spec) {
  KV_RETURN_IF_ERROR(
      CheckAdmission(static_cast<int>(spec.prompt.size()), spec.max_tokens, spec.eviction));
  KV_CHECK(!seqs_.count(spec.id), "sequence {} added twice", spec.id.value());
  Record r;
  r.tokens = spec.prompt;
  r.spec = std::move(spec);
  r.arrival = next_arrival_++;
  const SeqId id = r.spec.id;
  waiting_.insert(KeyOf(r));
  seqs_.emplace(id, std::move(r));
  return Status::Ok();
}

// NOTE (order within a step): decodes first; then waiting requests that are cheap because the
// cache holds almost all of their prompt (a burst sharing a system prompt, the next turn of a
// chat), within half the budget; then running prefills; then any other waiting request. Without
// the second pass a cache hit would wait behind another request's long prompt, and the median
// time to first token of a shared-prefix burst would pay for every group's prompt in turn.
ScheduleOutput Scheduler::Schedule() {
  ScheduleOutput out;
  ++step_;
  int budget = config_.max_num_batched_tokens;
  ScheduleRunning(out, budget, /*prefills=*/false);
  if (config_.max_itl_seconds > 0 && cost_model_ && !out.seqs.empty()) {
    // Only decodes are scheduled so far.
    const StepShape decodes = ShapeOf(out.seqs);
    const std::optional<int> fits = cost_model_->PrefillBudget(
        decodes.decode_rows, decodes.decode_context, config_.max_itl_seconds);
    // Until the model has seen enough steps, hold prefill to the minimum chunk: a latency
    // target is a promise from the first request on.
    const int cap = std::max(fits.value_or(0), config_.min_prefill_chunk);
    if (cap < budget) {
      out.prefill_cap = cap;
      budget = cap;
    }
  }
  ScheduleDrafts(out, budget);
  if (out.preempted.empty() && config_.short_prefill_tokens > 0) {
    int half = budget / 2;
    const int before = half;
    ScheduleWaiting(out, half, config_.short_prefill_tokens);
    budget -= before - half;
  }
  ScheduleRunning(out, budget, /*prefills=*/true);
  if (out.preempted.empty()) ScheduleWaiting(out, budget, std::numeric_limits<int>::max());
  for (SeqId id : running_) {  // drafts not carried this step are stale by the next
    Record& r = Get(id);
    if (r.draft_step != step_) r.draft.clear();
  }
  return out;
}

void Scheduler::ScheduleDrafts(ScheduleOutput& out, int& budget) {
  int left = budget / 2;
  for (ScheduledSeq& s : out.seqs) {
    Record& r = Get(s.seq);
    if (r.draft.empty()) continue;
    // Drafts stay within an eviction budget (the decode token already fits).
    const int nd = std::min({static_cast<int>(r.draft.size()), left, FreeSlots(r) - 1});
    if (nd <= 0 || s.num_new_tokens != 1 || !kv_->Allocate(s.seq, r.num_computed + 1 + nd)) {
      r.draft.clear();
      continue;
    }
    r.draft.resize(static_cast<size_t>(nd));
    r.draft_step = step_;
    s.num_draft = nd;
    s.num_new_tokens += nd;
    out.num_batched_tokens += nd;
    left -= nd;
    budget -= nd;
  }
}

void Scheduler::Push(ScheduleOutput& out, Record& r, int n, int& budget) {
  const bool last = r.num_computed + n == static_cast<int>(r.tokens.size());
  out.seqs.push_back(ScheduledSeq{.seq = r.spec.id,
                                  .num_computed = r.num_computed,
                                  .num_new_tokens = n,
                                  .wants_logits = last,
                                  .num_evicted = kv_->evicted_tokens(r.spec.id)});
  out.num_batched_tokens += n;
  budget -= n;
  r.scheduled_step = step_;
}

// NOTE (what an evicting sequence commits): only its blocks up to the end of the first dropped
// range. The blocks after that are the ones its first eviction moves and re-rotates; had they
// been committed, the eviction would have to copy every one of them first (the tree's copy must
// stay as computed), doubling the sequence's memory for a moment, which a cache sized for the
// budget does not have. Prompts that share a prefix with it still hit those first blocks.
// h2o and snapkv may drop tokens from any block, so they commit nothing.
int Scheduler::CommitLimit(const Record& r) const {
  const KvEvictionPlan& p = r.spec.eviction;
  if (p.budget_blocks == 0) return r.num_computed;
  if (p.by_score) return 0;
  return std::min(r.num_computed, (p.keep_blocks + p.drop_blocks) * kv_->block_size());
}

int Scheduler::FreeSlots(const Record& r) const {
  const KvEvictionPlan& p = r.spec.eviction;
  if (p.budget_blocks == 0) return std::numeric_limits<int>::max();
  const int slots = r.num_computed - kv_->evicted_tokens(r.spec.id);
  return p.budget_slots(kv_->block_size()) - slots;
}

int Scheduler::Room(Record& r, ScheduleOutput& out) {
  const int room = FreeSlots(r);
  if (room > 0) return room;
  const KvEvictionPlan& p = r.spec.eviction;
  std::optional<BlockEviction> e = p.by_score
                                       ? kv_->CompactBlocks(r.spec.id, p.drop_blocks)
                                       : kv_->EvictBlocks(r.spec.id, p.keep_blocks, p.drop_blocks);
  if (!e) return -1;
  out.evictions.push_back(KvEvictionEdit{r.spec.id, std::move(*e)});
  return FreeSlots(r);
}

size_t Scheduler::PickVictim() const {
  KV_CHECK(!running_.empty());
  size_t best = 0;
  for (size_t i = 1; i < running_.size(); ++i) {
    const Record& a = Get(running_[i]);
    const Record& b = Get(running_[best]);
    if (a.spec.priority < b.spec.priority ||
        (a.spec.priority == b.spec.priority && a.arrival > b.arrival)) {
      best = i;
    }
  }
  return best;
}

bool Scheduler::PreemptVictim(size_t& i, ScheduleOutput& out, int& budget) {
  const size_t v = PickVictim();
  Preempt(v, out, budget);
  if (v == i) return true;
  if (v < i) --i;
  return false;
}

void Scheduler::EndKv(SeqId id, ScheduleOutput& out) {
  kv_->EndSequence(id);
  // An eviction it made this step is void: its blocks went back to the pool.
  std::erase_if(out.evictions, [&](const KvEvictionEdit& e) { return e.seq == id; });
}

void Scheduler::Preempt(size_t index, ScheduleOutput& out, int& budget) {
  const SeqId id = running_[index];
  Record& r = Get(id);
  EndKv(id, out);
  auto it = std::find_if(out.seqs.begin(), out.seqs.end(),
                         [&](const ScheduledSeq& s) { return s.seq == id; });
  if (it != out.seqs.end()) {  // it had tokens this step already: give them back
    budget += it->num_new_tokens;
    out.num_batched_tokens -= it->num_new_tokens;
    out.seqs.erase(it);
  }
  r.num_computed = 0;
  r.state = SeqState::kPreempted;
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  waiting_.insert(KeyOf(r));
  out.preempted.push_back(id);
  ++num_preemptions_;
}

void Scheduler::ScheduleRunning(ScheduleOutput& out, int& budget, bool prefills) {
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Record& r = Get(running_[i]);
    const int pending = static_cast<int>(r.tokens.size()) - r.num_computed;
    if (pending <= 0 || r.scheduled_step == step_ || (!prefills && pending > 1)) {
      ++i;
      continue;
    }
    bool preempted_self = false;
    int room = 0;
    // An eviction that needs blocks for its copies, then the allocation, may preempt others.
    while (!preempted_self && (room = Room(r, out)) < 0) {
      preempted_self = PreemptVictim(i, out, budget);
    }
    if (preempted_self) continue;  // running_[i] is now the next sequence
    const int n = std::min({pending, budget, room});
    while (!preempted_self && !kv_->Allocate(r.spec.id, r.num_computed + n)) {
      preempted_self = PreemptVictim(i, out, budget);
    }
    if (preempted_self) continue;
    Push(out, r, n, budget);
    ++i;
  }
}

bool Scheduler::Admit(Record& r, ScheduleOutput& out, int& budget) {
  const SeqId id = r.spec.id;
  // An evicting sequence takes at most its budget from the prefix cache; h2o and snapkv take
  // nothing: their scores need the queries of every token they hold, and a cached prefix's
  // were never computed by them (with a hit, which tokens go would depend on the cache).
  const KvEvictionPlan& ev = r.spec.eviction;
  int max_hit = std::numeric_limits<int>::max();
  if (ev.budget_blocks > 0) max_hit = ev.by_score ? 0 : ev.budget_slots(kv_->block_size());
  const int cached = kv_->BeginSequence(id, r.spec.ns, r.tokens, r.spec.priority,
                                        /*count_tokens=*/true, /*partial_block=*/true, max_hit);
  r.num_computed = cached;
  const int room = Room(r, out);
  const int n = std::min({static_cast<int>(r.tokens.size()) - cached, budget, room});
  if (room < 0 || !kv_->Allocate(id, cached + n)) {
    EndKv(id, out);
    r.num_computed = 0;
    return false;
  }
  if (r.num_cached_first < 0) r.num_cached_first = cached;
  r.state = SeqState::kRunning;
  running_.push_back(id);
  Push(out, r, n, budget);
  return true;
}

// NOTE (deferral): requests that arrive together with a shared system prompt would otherwise
// all compute it in the same steps, and none would hit. A waiting request waits while a running
// one is still computing blocks they share beyond what is cached now; once that prompt is
// committed (after each step) the waiting one finds it cached. No deadlock: the running
// sequence progresses every step or is preempted, which ends the wait.
bool Scheduler::ShouldDefer(const Record& r) const {
  if (!config_.defer_shared_prefixes || !kv_->prefix_caching()) return false;
  const int bs = kv_->block_size();
  const int limit = (static_cast<int>(r.tokens.size()) - 1) / bs * bs;
  if (limit == 0) return false;
  int cached = -1;
  for (SeqId id : running_) {
    const Record& s = Get(id);
    if (!(s.spec.ns == r.spec.ns) || s.num_computed >= static_cast<int>(s.tokens.size()) - 1) {
      continue;  // other namespace, or not in prefill any more
    }
    const int max_common = std::min<int>(limit, static_cast<int>(s.tokens.size()));
    int common = 0;
    while (common < max_common && r.tokens[common] == s.tokens[common]) ++common;
    const int shared = common / bs * bs;
    if (shared <= s.num_computed) continue;
    if (cached < 0) cached = kv_->PeekCachedTokens(r.spec.ns, r.tokens);
    if (shared > cached) return true;
  }
  return false;
}

void Scheduler::ScheduleWaiting(ScheduleOutput& out, int& budget, int max_uncached) {
  constexpr int kMaxScan = 64;  // waiting requests examined by the short-prefill pass
  const bool short_only = max_uncached < std::numeric_limits<int>::max();
  std::vector<WaitKey> deferred;
  int scanned = 0;
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    const WaitKey key = *waiting_.begin();
    waiting_.erase(waiting_.begin());
    Record& r = Get(key.id);
    if (ShouldDefer(r)) {
      deferred.push_back(key);
      continue;
    }
    if (short_only) {
      const int uncached =
          static_cast<int>(r.tokens.size()) - kv_->PeekCachedTokens(r.spec.ns, r.tokens);
      if (uncached > max_uncached || uncached > budget) {
        deferred.push_back(key);
        if (++scanned >= kMaxScan) break;
        continue;
      }
    }
    if (Admit(r, out, budget)) continue;
    if (running_.empty() && out.seqs.empty() && kv_->num_live_sequences() == 0) {
      // Nothing else holds blocks (no running sequence, no tier load holding a prefix): it
      // can never fit now.
      out.failed.push_back(key.id);
      continue;
    }
    waiting_.insert(key);  // wait for running sequences to finish; keep the order
    break;
  }
  for (const WaitKey& k : deferred) waiting_.insert(k);
}

void Scheduler::OnStepDone(const ScheduleOutput& out) {
  for (const ScheduledSeq& s : out.seqs) {
    Record& r = Get(s.seq);
    KV_CHECK_EQ(r.num_computed, s.num_computed);
    r.num_computed += s.num_new_tokens - s.num_draft;
    r.num_computed_total += s.num_new_tokens;
    kv_->Commit(s.seq, r.tokens, CommitLimit(r));
  }
}

void Scheduler::AppendToken(SeqId seq, TokenId token) { Get(seq).tokens.push_back(token); }

void Scheduler::SetDraft(SeqId seq, std::vector<TokenId> draft) {
  Record& r = Get(seq);
  KV_CHECK(r.state == SeqState::kRunning &&
               r.num_computed + 1 == static_cast<int>(r.tokens.size()),
           "drafts for a sequence that is not decoding");
  r.draft = std::move(draft);
}

// NOTE (verified drafts): the step computed the last token at slot L - 1 and draft j at slot
// L + j. Accepted drafts are now tokens L .. L + accepted - 1 (appended by the engine), so their
// slots already hold their K/V. The sampled token after them is not computed yet.
void Scheduler::FinishVerify(SeqId seq, int accepted) {
  Record& r = Get(seq);
  KV_CHECK_LE(accepted, static_cast<int>(r.draft.size()));
  r.draft.clear();
  r.num_computed += accepted;
  KV_CHECK_LE(r.num_computed, static_cast<int>(r.tokens.size()));
  kv_->Commit(seq, r.tokens, CommitLimit(r));
  kv_->Shrink(seq, static_cast<int>(r.tokens.size()));
}

std::optional<BlockCopy> Scheduler::Fork(SeqId parent, SeqId child) {
  KV_CHECK(!seqs_.count(child), "sequence {} already exists", child.value());
  const Record& p = Get(parent);
  KV_CHECK(p.state == SeqState::kRunning, "fork of a sequence that is not running");
  Record c;
  c.spec = p.spec;
  c.spec.id = child;
  c.tokens = p.tokens;
  c.arrival = next_arrival_++;
  c.num_cached_first = p.num_cached_first;
  std::optional<BlockCopy> copy;
  bool forked = false;
  if (static_cast<int>(running_.size()) < config_.max_num_seqs) {
    auto r = kv_->Fork(parent, child, p.num_computed);
    if (r.ok()) {
      copy = *r;
      forked = true;
      c.num_computed = p.num_computed;
      c.state = SeqState::kRunning;
      running_.push_back(child);
    }
  }
  if (!forked) {
    c.state = SeqState::kPreempted;  // will recompute, mostly from the prefix cache
    waiting_.insert(KeyOf(c));
  }
  seqs_.emplace(child, std::move(c));
  return copy;
}

void Scheduler::Remove(SeqId seq) {
  Record& r = Get(seq);
  if (kv_->is_live(seq)) kv_->EndSequence(seq);
  if (r.state == SeqState::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), seq));
  } else {
    waiting_.erase(KeyOf(r));
  }
  seqs_.erase(seq);
}

SeqState Scheduler::state(SeqId seq) const { return Get(seq).state; }
std::span<const TokenId> Scheduler::tokens(SeqId seq) const { return Get(seq).tokens; }
int Scheduler::num_computed(SeqId seq) const { return Get(seq).num_computed; }
int Scheduler::num_prompt_tokens(SeqId seq) const {
  return static_cast<int>(Get(seq).spec.prompt.size());
}
int Scheduler::num_cached_tokens(SeqId seq) const {
  return std::max(Get(seq).num_cached_first, 0);
}
int64_t Scheduler::num_computed_total(SeqId seq) const { return Get(seq).num_computed_total; }

}  // namespace kvserve
