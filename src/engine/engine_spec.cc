// EngineCore: speculative decoding and jump-forward (engine_core.h). Drafts are proposed before
// Schedule (n-gram, draft model, or the tokens a grammar forces), verified against the logits
// rows that follow them, and priced by the verify cost table calibrated at start-up. Greedy
// output is the same as without drafts. Engine thread only.
#include "engine/engine_core.h"

#include <algorithm>

#include "spec/ngram.h"
#include "structured/constraint.h"
#include "tokenizer/unicode.h"
#include "util/check.h"
#include "util/log.h"

namespace kvserve {

CacheNamespace EngineCore::DraftNamespaceFor(const std::string& cache_salt) const {
  return MakeCacheNamespace({"draft", config_.spec.draft_model, cache_salt});
}

void EngineCore::VerifyRows(const ScheduledSeq& s, float* rows, std::vector<RequestOutput>* out) {
  const size_t vocab = static_cast<size_t>(model_->config().vocab);
  const bool forced = seqs_.at(s.seq).forced_draft;
  seqs_.at(s.seq).forced_draft = false;
  // A copy: a sample that ends during verification leaves the scheduler, and its drafts with it.
  const std::vector<TokenId> drafts(scheduler_->draft(s.seq).begin(),
                                    scheduler_->draft(s.seq).end());
  const SeqId seq = s.seq;
  bool ended = false;
  const int accepted = VerifyDrafts(drafts, [&](int j) {
    const Emitted e =
        SampleOne(seq, std::span<float>(rows + static_cast<size_t>(j) * vocab, vocab), out);
    ended = e.ended;
    return e;
  });
  if (forced) {  // jump-forward: its own counters; speculation's acceptance is not touched
    ++jump_stats_.num_jumps;
    jump_stats_.num_accepted_tokens += accepted;
    if (ended) return;
    SeqCtx& c = seqs_.at(seq);
    const int proposed = static_cast<int>(drafts.size());
    if (accepted == proposed) {
      c.jump_len = std::min(2 * proposed, config_.max_jump_forward_tokens);
      c.jump_backoff = 0;
    } else {
      c.jump_len = std::max(1, accepted);
      if (accepted == 0) {
        c.jump_backoff = std::min(2 * c.jump_backoff + 1, 32);
        c.jump_skip = c.jump_backoff;
      } else {
        c.jump_backoff = 0;
      }
    }
    scheduler_->FinishVerify(seq, accepted);
    return;
  }
  ++spec_stats_.num_drafts;
  spec_stats_.num_draft_tokens += static_cast<int64_t>(drafts.size());
  spec_stats_.num_accepted_tokens += accepted;
  for (int j = 0; j < accepted; ++j) ++spec_stats_.accepted_per_pos[static_cast<size_t>(j)];
  if (ended) {  // its final event (the last one out) was filled before this verification counted
    RequestMetrics& m = out->back().metrics;
    m.draft_tokens += static_cast<int>(drafts.size());
    m.accepted_tokens += accepted;
    return;
  }
  SeqCtx& c = seqs_.at(seq);
  c.acceptance.Observe(static_cast<int>(drafts.size()), accepted);
  c.draft_tokens += static_cast<int>(drafts.size());
  c.accepted_tokens += accepted;
  scheduler_->FinishVerify(seq, accepted);
}

// NOTE (proposing): only running sequences with exactly one token to compute (decodes) draft,
// at most until the request's max_tokens (the step's own token comes after the drafts). Their
// lengths come from draft_policy.h: the step cost model (once fitted) prices a verified row and
// the step; before it is fitted a row is taken to cost 5% of a step. The draft model's depth is
// priced by its own measured time.
// NOTE (jump-forward): where a constraint allows only one continuation for the next bytes,
// those bytes go into the next step at once instead of one token per step.
//   kForce (SGLang's jump-forward): the sampled token's piece plus the forced bytes are
//   re-tokenized as the tokenizer writes them; if that keeps the sampled token, the rest
//   (without its last token, which could merge with the free text after it) is appended as
//   generated tokens and computed in the next step as a prefill chunk. They are emitted like
//   sampled ones, with logprob 0 and no alternatives (certain under the constraint). The text is
//   the same as without jump-forward; the tokens are the same wherever the model would have
//   chosen the tokenizer's own tokenization.
//   kVerify: the forced tokens are drafts verified like speculative ones (each row sampled
//   under the mask, a draft kept only where the sample equals it): token for token what
//   decoding gives, with the same random draws, and each token its own logprobs.
// A sequence with forced tokens does not draft speculatively in the same step.
std::vector<TokenId> EngineCore::ForcedTokens(SeqCtx& c, TokenId last, int max_tokens) const {
  std::string forced = c.constraint->ForcedBytes(c.sampler.history(), 256);
  // Whole UTF-8 characters only: a split one would tokenize as byte pieces.
  forced.resize(CompleteUtf8Prefix(forced));
  if (forced.empty()) return {};
  const auto spells = [&](const std::vector<TokenId>& ids, const std::string& text) {
    std::string pieces;
    for (TokenId t : ids) pieces += tokenizer_->TokenToPiece(t);
    return pieces == text;
  };
  std::vector<TokenId> ids;
  if (config_.jump_forward_mode == EngineConfig::JumpForwardMode::kForce) {
    // Across the boundary: the sampled token and the forced text as the tokenizer writes them.
    const std::string joined = tokenizer_->TokenToPiece(last) + forced;
    ids = tokenizer_->Encode(joined, /*add_special=*/false, /*parse_special=*/false);
    if (ids.size() >= 2 && ids.front() == last && spells(ids, joined)) {
      ids.erase(ids.begin());
    } else {
      ids = tokenizer_->Encode(forced, false, false);
      // Where the encoding does not spell the bytes back (SentencePiece's leading space, a
      // normalising tokenizer), the longest vocabulary pieces instead.
      if (!spells(ids, forced)) ids = c.constraint->vocab().LongestMatch(forced, max_tokens + 1);
    }
    // The last token could merge with the text after it: the model writes that part.
    if (!ids.empty()) ids.pop_back();
  } else {
    ids = tokenizer_->Encode(forced, false, false);
    if (!spells(ids, forced)) ids = c.constraint->vocab().LongestMatch(forced, max_tokens);
  }
  if (static_cast<int>(ids.size()) > max_tokens) ids.resize(static_cast<size_t>(max_tokens));
  return ids;
}

void EngineCore::JumpForward(std::vector<RequestOutput>* out) {
  const std::vector<SeqId> running = scheduler_->running();  // emitting may finish sequences
  for (SeqId id : running) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) continue;
    SeqCtx& c = it->second;
    c.forced_draft = false;
    if (c.constraint == nullptr) continue;
    const std::span<const TokenId> tokens = scheduler_->tokens(id);
    if (scheduler_->num_computed(id) + 1 != static_cast<int>(tokens.size())) continue;
    const RequestCtx& r = requests_.at(c.request);
    const int k = std::min(config_.max_jump_forward_tokens,
                           r.request.max_tokens - c.num_generated - 1);
    if (k <= 0) continue;
    std::vector<TokenId> ids = ForcedTokens(c, tokens.back(), k);
    if (ids.empty()) continue;
    if (config_.jump_forward_mode == EngineConfig::JumpForwardMode::kVerify) {
      // Drafts' queries would score (h2o, snapkv) before they are accepted or rejected.
      if (r.eviction.by_score) continue;
      // A model that does not follow the tokenizer rejects forced drafts, and each costs a row:
      // draft lengths double while all are accepted, shrink to what was, and pause after a
      // verification that kept none.
      if (c.jump_skip > 0) {
        --c.jump_skip;
        continue;
      }
      if (c.jump_len > 0 && static_cast<int>(ids.size()) > c.jump_len) {
        ids.resize(static_cast<size_t>(c.jump_len));
      }
      jump_stats_.num_forced_tokens += static_cast<int64_t>(ids.size());
      scheduler_->SetDraft(id, std::move(ids));
      c.forced_draft = true;
      continue;
    }
    ++jump_stats_.num_jumps;
    for (TokenId t : ids) {  // up to a stop string or max_tokens
      SampleOutput forced;
      forced.token = t;
      ++jump_stats_.num_forced_tokens;
      ++jump_stats_.num_accepted_tokens;
      if (EmitToken(id, std::move(forced), out).ended) break;
    }
  }
}

Status EngineCore::ProposeDrafts() {
  const SpecConfig& sc = config_.spec;
  std::vector<SeqId> cands;
  std::vector<std::vector<TokenId>> proposals;
  std::vector<DraftCandidate> dc;
  int decode_rows = 0;
  for (SeqId id : scheduler_->running()) {
    const std::span<const TokenId> tokens = scheduler_->tokens(id);
    if (scheduler_->num_computed(id) + 1 != static_cast<int>(tokens.size())) continue;
    ++decode_rows;
    SeqCtx& c = seqs_.at(id);
    const RequestCtx& r = requests_.at(c.request);
    if (c.forced_draft) continue;  // carries the tokens its constraint forces
    if (c.shadow >= 0 && tokens.size() > c.shadow_at) {  // what the n-gram draft would have got
      c.acceptance.Observe(1, tokens[c.shadow_at] == c.shadow ? 1 : 0);
      c.shadow = -1;
    }
    const int k = std::min(sc.num_speculative_tokens, r.request.max_tokens - c.num_generated - 1);
    if (!r.request.speculative || k <= 0) continue;
    // A draft model keeps its own KV of the whole sequence: not for sequences that evict. And
    // no drafts at all where queries score (h2o, snapkv): a rejected draft's query would count.
    if ((draft_ && r.eviction.budget_blocks > 0) || r.eviction.by_score) continue;
    std::vector<TokenId> p;
    if (sc.method == SpecMethod::kNgram) {
      ProposeNgram(tokens, sc.prompt_lookup_min, sc.prompt_lookup_max, k, &p);
      if (p.empty()) continue;
    }
    cands.push_back(id);
    dc.push_back(DraftCandidate{c.acceptance.rate(), p.empty() ? k : static_cast<int>(p.size())});
    proposals.push_back(std::move(p));
  }
  if (cands.empty()) return Status::Ok();
  std::vector<int> lens(dc.size());
  if (sc.adaptive) {
    DraftCosts costs;
    costs.num_decode_rows = decode_rows;
    const VerifyCostTable& table = verify_cost_;
    const double step = table.Seconds(decode_rows).value_or(last_step_seconds_);
    costs.step_seconds = [&table, decode_rows, step](int n) {
      return table.Seconds(decode_rows + n).value_or(step);
    };
    if (draft_) {
      costs.draft_step_seconds =
          draft_->depth_seconds() > 0
              ? draft_->depth_seconds()
              : step * static_cast<double>(draft_->model().weight_bytes()) /
                    static_cast<double>(model_->weight_bytes());
    }
    lens = ChooseDraftLengths(dc, costs, sc.num_speculative_tokens);
  } else {
    for (size_t i = 0; i < dc.size(); ++i) lens[i] = dc[i].max_len;
  }
  std::vector<DraftJob> jobs;
  for (size_t i = 0; i < cands.size(); ++i) {
    SeqCtx& c = seqs_.at(cands[i]);
    if (lens[i] == 0) {
      // Off for now. An n-gram sequence keeps measuring what its draft would have got; a
      // draft-model sequence probes with one draft now and then (SeqCtx::probe_interval).
      if (sc.method == SpecMethod::kNgram) {
        c.shadow = proposals[i][0];
        c.shadow_at = scheduler_->tokens(cands[i]).size();
        continue;
      }
      if (++c.steps_without_drafts < c.probe_interval) continue;
      lens[i] = 1;
      c.probe_interval = std::min(2 * c.probe_interval, kMaxDraftProbeSteps);
    } else {
      c.probe_interval = kDraftProbeSteps;
    }
    c.steps_without_drafts = 0;
    if (sc.method == SpecMethod::kNgram) {
      proposals[i].resize(static_cast<size_t>(lens[i]));
      scheduler_->SetDraft(cands[i], std::move(proposals[i]));
    } else {
      const RequestCtx& r = requests_.at(c.request);
      jobs.push_back(DraftJob{cands[i], DraftNamespaceFor(r.request.cache_salt),
                              scheduler_->tokens(cands[i]), lens[i], {}});
    }
  }
  if (!jobs.empty()) {
    KV_RETURN_IF_ERROR(draft_->Propose(jobs, *pool_));
    for (DraftJob& j : jobs) {
      if (!j.drafts.empty()) scheduler_->SetDraft(j.seq, std::move(j.drafts));
    }
  }
  return Status::Ok();
}

Status EngineCore::CalibrateVerifyCost(int max_rows) {
  const Clock::time_point start = Clock::now();
  verify_cost_ = VerifyCostTable(std::min(max_rows, kMaxVerifyCostRows));
  // Measured up to kMaxCalibratedRows (past it steps are compute-bound, and the table
  // extrapolates the slope until real steps fill it in), within the free blocks.
  max_rows = std::min({max_rows, kMaxCalibratedRows, config_.max_model_len,
                       kv_manager_->num_allocatable_blocks() * config_.block_size});
  if (max_rows < 1) return Status::Ok();
  // Every row count up to twice a full verification, then doubling.
  const int dense = std::min(max_rows, 2 * (config_.spec.num_speculative_tokens + 1));
  std::vector<int> counts;
  for (int m = 1; m <= dense; ++m) counts.push_back(m);
  for (int m = 2 * dense; m < max_rows; m *= 2) counts.push_back(m);
  if (counts.back() != max_rows) counts.push_back(max_rows);
  const int vocab = model_->config().vocab;
  std::vector<TokenId> tokens(static_cast<size_t>(max_rows));
  for (int i = 0; i < max_rows; ++i) tokens[static_cast<size_t>(i)] = (1 + i * 7919) % vocab;
  const SeqId seq = NewSeqId();
  kv_manager_->BeginSequence(seq, MakeCacheNamespace({"verify-cost calibration"}), tokens, 0,
                             /*count_tokens=*/false, /*partial_block=*/false);
  if (!kv_manager_->Allocate(seq, max_rows)) {
    kv_manager_->EndSequence(seq);
    return Status::Ok();  // no room: the table fills from the steps as they run
  }
  std::vector<float> logits(static_cast<size_t>(max_rows) * static_cast<size_t>(vocab));
  const std::span<const BlockId> table = kv_manager_->block_table(seq);
  const std::span<const BlockId> wtable = kv_manager_->window_table(seq);
  Status st = Status::Ok();
  const auto time_rows = [&](int m) {
    ForwardBatch b;
    b.AddSequence(table, wtable, 0, std::span<const TokenId>(tokens).first(static_cast<size_t>(m)),
                  m);
    const Clock::time_point t0 = Clock::now();
    if (st.ok()) st = model_->Forward(b, kv_, *pool_, logits.data());
    return Seconds(t0, Clock::now());
  };
  time_rows(1);  // warm-up
  // Two rounds over the dense counts, keeping the faster (noise only adds time), so that a slow
  // moment hits one sample of each, not one count.
  std::vector<double> best(counts.size(), 0.0);
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < counts.size(); ++i) {
      if (round == 1 && counts[i] > dense) continue;
      const double t = time_rows(counts[i]);
      best[i] = round == 0 ? t : std::min(best[i], t);
    }
  }
  kv_manager_->EndSequence(seq);  // nothing was committed: the blocks go back to the free list
  KV_RETURN_IF_ERROR(st);
  for (size_t i = 0; i < counts.size(); ++i) verify_cost_.SetPrior(counts[i], best[i]);
  spec_stats_.calibration_seconds = Seconds(start, Clock::now());
  return Status::Ok();
}

}  // namespace kvserve
