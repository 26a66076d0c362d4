// EngineCore: from a ScheduleOutput to the ForwardBatch the model runs (engine_core.h), and the
// KV edits that come with it: eviction inside a sequence (position shifts, h2o/snapkv
// compaction by attention score) and prompt scoring's logits rows. Engine thread only.
#include "engine/engine_core.h"

#include <algorithm>

#include "util/check.h"

namespace kvserve {

const KvEvictionConfig& EngineCore::EvictionConfigFor(const EngineRequest& r) const {
  return r.kv_eviction ? *r.kv_eviction : config_.kv_eviction;
}

Result<KvEvictionPlan> EngineCore::EvictionPlanFor(const EngineRequest& r) const {
  KV_ASSIGN_OR_RETURN(KvEvictionPlan plan,
                      PlanKvEviction(EvictionConfigFor(r), config_.block_size,
                                     std::min<int>(config_.max_model_len,
                                                   kv_manager_->num_blocks() * config_.block_size)));
  // The scores come from the attention kernel over the cache; the decompressed MLA form
  // attends over per-head copies instead.
  if (plan.by_score && model_->config().is_mla() &&
      model_->options().mla_form == MlaForm::kDecompressed) {
    return InvalidArgument("kv_eviction h2o and snapkv need --mla-attention absorbed");
  }
  // Windows count slots back from each query; eviction moves slots, so the two do not mix.
  if (plan.budget_blocks > 0 && model_->config().has_windows()) {
    return InvalidArgument(
        "kv_eviction is not available for models with sliding-window layers (their windows "
        "already bound what those layers attend to)");
  }
  return plan;
}

ForwardBatch EngineCore::BuildBatch(const ScheduleOutput& so) {
  ForwardBatch batch;
  batch.tokens.reserve(static_cast<size_t>(so.num_batched_tokens));
  batch.positions.reserve(static_cast<size_t>(so.num_batched_tokens));
  std::vector<TokenId> with_drafts;
  for (const ScheduledSeq& s : so.seqs) {
    const std::span<const TokenId> tokens = scheduler_->tokens(s.seq);
    const std::span<const BlockId> table = kv_manager_->block_table(s.seq);
    const std::span<const BlockId> wtable = kv_manager_->window_table(s.seq);
    // Token i is at slot i - num_evicted (its RoPE position too, kv_eviction.h).
    const int slots = s.num_computed - s.num_evicted;
    if (s.num_draft == 0) {
      batch.AddSequence(table, wtable, slots,
                        tokens.subspan(static_cast<size_t>(s.num_computed), s.num_new_tokens),
                        ScoredRows(s) + (s.wants_logits ? 1 : 0));
      SeqCtx& c = seqs_.at(s.seq);
      const KvEvictionPlan& plan = requests_.at(c.request).eviction;
      if (plan.by_score) {
        const ModelConfig& mc = model_->config();
        const int budget = plan.budget_slots(config_.block_size);
        c.scores.resize(static_cast<size_t>(mc.num_layers) * mc.num_kv_heads * budget);
        ForwardSeq& f = batch.seqs.back();
        f.scores = c.scores.data();
        f.score_stride = budget;
        // snapkv: the window's queries; h2o: every query.
        f.score_from_slot = plan.window_slots > 0 ? budget - plan.window_slots : 0;
      }
      continue;
    }
    // The last token, then its drafts; logits after each of them.
    const std::span<const TokenId> draft = scheduler_->draft(s.seq);
    with_drafts.assign(tokens.begin() + s.num_computed, tokens.end());
    with_drafts.insert(with_drafts.end(), draft.begin(), draft.end());
    batch.AddSequence(table, wtable, slots, with_drafts, s.num_draft + 1);
  }
  return batch;
}

// Prompt scoring: the rows of a chunk whose next token is a prompt token (all of the chunk's
// rows but one at the prompt's end, whose row is for sampling).
int EngineCore::ScoredRows(const ScheduledSeq& s) const {
  const SeqCtx& c = seqs_.at(s.seq);
  if (s.num_draft > 0 || !requests_.at(c.request).request.score_prompt) return 0;
  const int prompt = scheduler_->num_prompt_tokens(s.seq);
  const int end = std::min(s.num_computed + s.num_new_tokens, prompt - 1);
  return std::max(0, end - s.num_computed);
}

void EngineCore::ScorePrompt(const ScheduledSeq& s, const float* rows, int num_rows,
                             std::vector<RequestOutput>* out) {
  SeqCtx& c = seqs_.at(s.seq);
  const std::span<const TokenId> tokens = scheduler_->tokens(s.seq);
  const size_t vocab = static_cast<size_t>(model_->config().vocab);
  RequestOutput e;
  e.id = c.request;
  e.index = c.index;
  for (int j = 0; j < num_rows; ++j) {
    const int next = s.num_computed + j + 1;  // the prompt token row j predicts
    if (next <= c.prompt_scored) continue;   // recomputed after a preemption: sent already
    const std::span<const float> row(rows + static_cast<size_t>(j) * vocab, vocab);
    const double lse = LogSumExp(row);
    e.prompt_logprobs.push_back(static_cast<float>(
        static_cast<double>(row[static_cast<size_t>(tokens[static_cast<size_t>(next)])]) - lse));
    if (const int from = requests_.at(c.request).request.prompt_distributions_from;
        from >= 0 && next >= from) {
      for (float x : row) e.prompt_distributions.push_back(static_cast<float>(x - lse));
    }
    c.prompt_scored = next;
  }
  if (!e.prompt_logprobs.empty()) out->push_back(std::move(e));
}

void EngineCore::ApplyEvictions(const ScheduleOutput& so) {
  if (so.evictions.empty()) return;
  const Clock::time_point start = Clock::now();
  KvEvictionStats& st = eviction_stats_;
  for (const KvEvictionEdit& e : so.evictions) {
    for (const BlockCopy& c : e.blocks.copies) kv_.CopyBlock(c.src, c.dst);
    SeqCtx& c = seqs_.at(e.seq);
    const RequestCtx& r = requests_.at(c.request);
    if (r.eviction.by_score) {
      CompactByScore(c, r.eviction, e.seq);
    } else {
      model_->ShiftKeys(kv_, e.blocks.moved, -e.blocks.evicted_tokens, *pool_);
    }
    st.evicted_tokens[static_cast<int>(EvictionConfigFor(r.request).policy)] +=
        e.blocks.evicted_tokens;
    ++st.num_shifts;
    st.shifted_blocks += static_cast<int64_t>(e.blocks.moved.size());
    st.copied_blocks += static_cast<int64_t>(e.blocks.copies.size());
    // After a preemption the sequence evicts again at the same points: count the furthest.
    c.evicted_tokens = std::max<int64_t>(c.evicted_tokens, kv_manager_->evicted_tokens(e.seq));
  }
  st.shift_seconds += Seconds(start, Clock::now());
}

// NOTE (exactness): the scores are integer sums of each query row's probabilities, and a row's
// probabilities depend only on its own slots (ops/attention.h), so the choice below does not
// depend on how the tokens were batched, chunked or threaded, and a preempted sequence, which
// recomputes from its first token with zeroed scores, evicts the same tokens again.
void EngineCore::CompactByScore(SeqCtx& c, const KvEvictionPlan& plan, SeqId seq) {
  const ModelConfig& mc = model_->config();
  const int bs = config_.block_size;
  const size_t budget = static_cast<size_t>(plan.budget_slots(bs));
  const size_t heads = static_cast<size_t>(mc.num_layers) * mc.num_kv_heads;
  // Sized by BuildBatch: it never evicts before its first step (no prefix hits, Scheduler::Admit).
  KV_CHECK_EQ(c.scores.size(), heads * budget);
  std::vector<std::vector<int32_t>> kept(heads);
  int64_t moved = 0;
  for (size_t i = 0; i < heads; ++i) {
    const std::span<int64_t> sc(c.scores.data() + i * budget, budget);
    SelectKeptSlots(plan, bs, sc, &kept[i]);
    // h2o: a kept token keeps its accumulated score; snapkv: the next window starts afresh.
    for (size_t j = 0; j < kept[i].size(); ++j) {
      const size_t from = static_cast<size_t>(kept[i][j]);
      moved += from != j ? 1 : 0;
      sc[j] = plan.window_slots > 0 ? 0 : sc[from];
    }
    std::fill(sc.begin() + static_cast<std::ptrdiff_t>(kept[i].size()), sc.end(), 0);
  }
  model_->CompactKv(kv_, kv_manager_->block_table(seq), kept, *pool_);
  ++eviction_stats_.num_compactions;
  eviction_stats_.compacted_slots += moved;
}

}  // namespace kvserve
