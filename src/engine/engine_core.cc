#include "engine/engine_core.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "gguf/weights_digest.h"
#include "prefix/block_record.h"
#include "prefix/disk_tier.h"
#include "prefix/redis_tier.h"
#include "quant/kv_dtype.h"
#include "spec/ngram.h"
#include "structured/constraint.h"
#include "tokenizer/unicode.h"
#include "util/byte_size.h"
#include "util/check.h"
#include "util/log.h"

namespace kvserve {
namespace {

double Seconds(EngineCore::Clock::time_point a, EngineCore::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The routing and latent-attention settings read from the metadata, and the MLA form (the two
// forms round differently, so their blocks differ).
std::string MoeMlaFingerprint(const Model& model) {
  const ModelConfig& c = model.config();
  std::string out;
  if (c.moe.num_experts > 0) {
    const MoeConfig& m = c.moe;
    out += fmt::format("|moe e{} k{} ff{} sh{} ld{} g{} n{} s{} grp{}/{}", m.num_experts,
                       m.num_used, m.expert_ffn, m.num_shared, m.leading_dense,
                       static_cast<int>(m.gating), m.norm_weights, m.weights_scale,
                       m.num_groups_used, m.num_groups);
  }
  if (c.is_mla()) {
    const MlaConfig& m = c.mla;
    out += fmt::format("|mla q{} kv{} n{} r{} v{} s{} {}", m.q_lora_rank, m.kv_lora_rank,
                       m.qk_nope, m.qk_rope, m.v_head, m.kq_scale,
                       model.options().mla_form == MlaForm::kAbsorbed ? "absorbed" : "decompressed");
  }
  return out;
}

// What makes two models' K/V differ for the same tokens: the exact weights (their digest), the
// configuration read from the metadata, the KV layout.
std::string ModelFingerprint(const Model& model, const KvLayout& layout,
                             const Digest256& weights) {
  const ModelConfig& c = model.config();
  return fmt::format(
      "{}|{}|{}|l{} h{} nh{} kv{} hd{} ffn{} v{} eps{} rope{}:{}:{}:{} w{}|k{} v{} bs{}",
      weights.Hex(),
      c.arch ? c.arch->name : "?", c.name, c.num_layers, c.hidden, c.num_heads, c.num_kv_heads,
      c.head_dim, c.ffn, c.vocab, c.rms_eps, c.rope.freq_base, c.rope.rotary_dim,
      static_cast<int>(c.rope.scaling), c.rope.scaling_factor, model.weight_bytes(),
      KvDtypeName(layout.k_dtype), KvDtypeName(layout.v_dtype), layout.block_size) +
         MoeMlaFingerprint(model);
}

}  // namespace

Result<int> ResolveNumBlocks(const EngineConfig& config, const KvLayout& layout,
                             int max_model_len) {
  int64_t blocks = config.num_blocks;
  if (blocks <= 0 && config.kv_cache_memory_bytes > 0) {
    blocks = static_cast<int64_t>(config.kv_cache_memory_bytes / layout.bytes_per_block());
    if (blocks <= 0) {
      return InvalidArgument(fmt::format(
          "a KV cache of {} bytes holds no block of {} bytes; raise --kv-cache-memory",
          config.kv_cache_memory_bytes, layout.bytes_per_block()));
    }
  }
  if (blocks <= 0) {
    const int64_t per_seq = (max_model_len + layout.block_size - 1) / layout.block_size;
    blocks = per_seq * std::clamp(config.max_num_seqs, 1, 4);
  }
  if (blocks > (1 << 24)) {
    return InvalidArgument(fmt::format("a KV cache of {} blocks is too large", blocks));
  }
  return static_cast<int>(blocks);
}

EngineCore::EngineCore(std::unique_ptr<Model> model, KvStorage kv, const EngineConfig& config,
                       const Tokenizer* tokenizer)
    : config_(config), model_(std::move(model)), kv_(std::move(kv)), tokenizer_(tokenizer) {}

EngineCore::~EngineCore() = default;

Result<std::unique_ptr<EngineCore>> EngineCore::Create(std::unique_ptr<Model> model,
                                                       const EngineConfig& config_in,
                                                       const Tokenizer* tokenizer) {
  EngineConfig config = config_in;
  if (config.block_size <= 0 || config.block_size > 1024) {
    return InvalidArgument(fmt::format("block size {} must be in [1, 1024]", config.block_size));
  }
  const int ctx = model->max_context();
  if (config.max_model_len <= 0) config.max_model_len = ctx;
  if (config.max_model_len > ctx) {
    return InvalidArgument(fmt::format("max_model_len {} exceeds the model's context of {}",
                                       config.max_model_len, ctx));
  }
  if (config.max_num_batched_tokens <= 0) config.max_num_batched_tokens = model->max_batch_tokens();
  if (config.max_num_batched_tokens > model->max_batch_tokens()) {
    return InvalidArgument(fmt::format(
        "max_num_batched_tokens {} exceeds the {} tokens the model was loaded for",
        config.max_num_batched_tokens, model->max_batch_tokens()));
  }
  if (config.max_num_seqs <= 0) return InvalidArgument("max_num_seqs must be at least 1");
  config.max_num_seqs = std::min(config.max_num_seqs, config.max_num_batched_tokens);
  KV_RETURN_IF_ERROR(CheckKvDtype(config.k_dtype, model->config().head_dim));
  KV_RETURN_IF_ERROR(CheckKvDtype(config.v_dtype, model->config().head_dim));
  const KvLayout layout = model->MakeKvLayout(config.block_size, config.k_dtype, config.v_dtype);
  KV_ASSIGN_OR_RETURN(const int num_blocks, ResolveNumBlocks(config, layout, config.max_model_len));
  KvStorage kv(layout, num_blocks);
  std::unique_ptr<EngineCore> core(new EngineCore(std::move(model), std::move(kv), config,
                                                  tokenizer));
  core->kv_manager_ = std::make_unique<KvCacheManager>(
      KvCacheConfig{num_blocks, config.block_size, config.enable_prefix_caching,
                    config.eviction_policy, config.max_pinned_fraction, config.partial_block_hits});
  {
    KvStorage* storage = &core->kv_;
    core->kv_manager_->set_block_copier(
        [storage](BlockId src, BlockId dst) { storage->CopyBlock(src, dst); });
  }
  SchedulerConfig sc{config.max_num_seqs, config.max_num_batched_tokens, config.max_model_len};
  sc.max_itl_seconds = config.max_itl_ms / 1e3;
  sc.min_prefill_chunk = config.min_prefill_chunk;
  core->scheduler_ = std::make_unique<Scheduler>(sc, core->kv_manager_.get());
  core->scheduler_->set_cost_model(&core->step_cost_);
  KV_RETURN_IF_ERROR(core->EvictionPlanFor(EngineRequest{}).status());  // the default's flags
  core->pool_ = std::make_unique<ThreadPool>(
      config.num_threads > 0 ? config.num_threads : ThreadPool::DefaultThreads(),
      PoolSpin(config.poll_us));
  const Clock::time_point digest_start = Clock::now();
  const Digest256 weights = WeightsDigest(core->model_->file(), *core->pool_);
  core->weights_digest_seconds_ = Seconds(digest_start, Clock::now());
  core->model_fingerprint_ = ModelFingerprint(*core->model_, layout, weights);
  KV_RETURN_IF_ERROR(core->OpenTiers());
  if (config.spec.enabled()) {
    SpecStats& ss = core->spec_stats_;
    ss.enabled = true;
    ss.accepted_per_pos.assign(static_cast<size_t>(config.spec.num_speculative_tokens), 0);
    if (config.spec.method == SpecMethod::kDraftModel) {
      KV_ASSIGN_OR_RETURN(core->draft_,
                          DraftRunner::Create(config.spec.draft_model, *core->model_, config,
                                              num_blocks, config.spec.num_speculative_tokens));
    }
    if (config.spec.adaptive) {
      // Rows a step can verify: every sequence with all its drafts, within the token budget.
      const int64_t rows = std::min<int64_t>(
          config.max_num_batched_tokens,
          static_cast<int64_t>(config.max_num_seqs) * (config.spec.num_speculative_tokens + 1));
      KV_RETURN_IF_ERROR(core->CalibrateVerifyCost(static_cast<int>(rows)));
    }
  }
  const size_t vocab = static_cast<size_t>(core->model_->config().vocab);
  core->logits_.resize(static_cast<size_t>(config.max_num_seqs) * vocab);
  core->scratch_.resize(vocab);
  return core;
}

CacheNamespace EngineCore::NamespaceFor(const std::string& cache_salt) const {
  return MakeCacheNamespace({model_fingerprint_, cache_salt});
}

CacheNamespace EngineCore::DraftNamespaceFor(const std::string& cache_salt) const {
  return MakeCacheNamespace({"draft", config_.spec.draft_model, cache_salt});
}

Status EngineCore::Validate(const EngineRequest& r) const {
  if (r.prompt.empty()) return InvalidArgument("the prompt is empty");
  const int vocab = model_->config().vocab;
  for (TokenId t : r.prompt) {
    if (t < 0 || t >= vocab) {
      return InvalidArgument(fmt::format("token id {} is outside the vocabulary [0, {})", t, vocab));
    }
  }
  if (r.max_tokens < 1) return InvalidArgument("max_tokens must be at least 1");
  if (r.n < 1 || r.n > config_.max_num_seqs) {
    return InvalidArgument(fmt::format("n = {} must be in [1, max_num_seqs = {}]", r.n,
                                       config_.max_num_seqs));
  }
  KV_RETURN_IF_ERROR(r.sampling.Validate());
  for (const std::string& stop : r.stop_strings) {
    if (stop.empty()) return InvalidArgument("stop strings must not be empty");
  }
  KV_ASSIGN_OR_RETURN(const KvEvictionPlan plan, EvictionPlanFor(r));
  const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
  if (plan.budget_blocks == 0 && total > config_.max_model_len) {
    return OutOfRange(fmt::format(
        "prompt of {} tokens plus {} to generate exceeds the maximum model length of {}; "
        "shorten the prompt, lower max_tokens, or evict inside the sequence (kv_eviction)",
        r.prompt.size(), r.max_tokens, config_.max_model_len));
  }
  return Status::Ok();
}

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
  return plan;
}

Result<EngineCore::SeqCtx> EngineCore::MakeSeq(RequestId id, const EngineRequest& r,
                                               int index) const {
  SamplingParams params = r.sampling;
  if (params.has_seed) params.seed += static_cast<uint64_t>(index);  // distinct streams
  KV_ASSIGN_OR_RETURN(Sampler sampler, Sampler::Create(params, model_->config().vocab));
  sampler.SetPrompt(r.prompt);
  structured::ConstraintProcessor* constraint = nullptr;
  if (r.constraint) {
    auto p = std::make_unique<structured::ConstraintProcessor>(r.constraint);
    constraint = p.get();
    sampler.AddProcessorFirst(std::move(p));
  }
  SeqCtx s{id, index, std::move(sampler), nullptr, 0};
  s.constraint = constraint;
  if (tokenizer_) s.detok = std::make_unique<StreamingDetokenizer>(*tokenizer_);
  return s;
}

Status EngineCore::Add(RequestId id, EngineRequest request, Clock::time_point arrival) {
  KV_RETURN_IF_ERROR(Validate(request));
  KV_CHECK(!requests_.count(id), "request {} added twice", id.value());
  KV_ASSIGN_OR_RETURN(const KvEvictionPlan plan, EvictionPlanFor(request));
  KV_RETURN_IF_ERROR(scheduler_->CheckAdmission(static_cast<int>(request.prompt.size()),
                                                request.max_tokens, plan));
  KV_ASSIGN_OR_RETURN(SeqCtx seq, MakeSeq(id, request, 0));
  const SeqId sid = NewSeqId();
  const CacheNamespace ns = NamespaceFor(request.cache_salt);
  seqs_.emplace(sid, std::move(seq));
  RequestCtx ctx{std::move(request), ns, arrival, {sid}};
  ctx.eviction = plan;
  requests_.emplace(id, std::move(ctx));
  if (!StartTierLoad(id)) Schedule(id);
  return Status::Ok();
}

void EngineCore::Schedule(RequestId id) {
  RequestCtx& r = requests_.at(id);
  r.phase = Phase::kScheduled;
  const Status st = scheduler_->Add(SeqSpec{r.seqs.front(), r.ns, r.request.prompt,
                                            r.request.max_tokens, r.request.priority, r.eviction});
  KV_CHECK(st.ok(), "admission was checked at Add: {}", st.ToString());
}

bool EngineCore::TakeText(SeqCtx& s, const EngineRequest& r, std::string text, bool final,
                          std::string* emit) const {
  if (r.stop_strings.empty()) {
    *emit += text;
    return false;
  }
  std::string pending = std::move(s.held);
  s.held.clear();
  pending += text;
  // The earliest stop string in the pending text ends the sample (held text never contains a
  // whole stop string, so nothing streamed earlier can be part of one).
  size_t best = std::string::npos;
  size_t best_len = 0;
  for (const std::string& stop : r.stop_strings) {
    const size_t at = pending.find(stop);
    if (at < best) {
      best = at;
      best_len = stop.size();
    }
  }
  if (best != std::string::npos) {
    s.text_done = true;
    pending.resize(best + (r.include_stop_str_in_output ? best_len : 0));
    *emit += pending;
    return true;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  if (!final) {
    for (const std::string& stop : r.stop_strings) {
      for (size_t k = std::min(stop.size() - 1, pending.size()); k > hold; --k) {
        if (pending.compare(pending.size() - k, k, stop, 0, k) == 0) {
          hold = k;
          break;
        }
      }
    }
  }
  s.held = pending.substr(pending.size() - hold);
  pending.resize(pending.size() - hold);
  *emit += pending;
  return false;
}

void EngineCore::FinishSeq(SeqId seq, FinishReason reason, Status error,
                           std::vector<RequestOutput>* out, RequestOutput* event) {
  SeqCtx& s = seqs_.at(seq);
  RequestCtx& r = requests_.at(s.request);
  RequestOutput own;
  RequestOutput& e = event ? *event : own;
  e.id = s.request;
  e.index = s.index;
  if (s.detok && !s.text_done) {
    std::string emit;
    if (TakeText(s, r.request, s.detok->Flush(), /*final=*/true, &emit) &&
        reason == FinishReason::kLength) {
      reason = FinishReason::kStop;
    }
    e.text += emit;
  }
  e.finished = true;
  e.finish_reason = reason;
  e.error = std::move(error);
  const bool scheduled = scheduler_->Contains(seq);
  e.metrics.prompt_tokens = static_cast<int>(r.request.prompt.size());
  e.metrics.cached_tokens = scheduled ? scheduler_->num_cached_tokens(seq) : 0;
  e.metrics.computed_tokens = scheduled ? scheduler_->num_computed_total(seq) : 0;
  e.metrics.generated_tokens = s.num_generated;
  e.metrics.queue_seconds = r.queue_seconds;
  e.metrics.ttft_seconds = r.ttft_seconds;
  e.metrics.e2e_seconds = Seconds(r.arrival, Clock::now());
  e.metrics.draft_tokens = s.draft_tokens;
  e.metrics.accepted_tokens = s.accepted_tokens;
  e.metrics.evicted_tokens = s.evicted_tokens;
  FillTierMetrics(r, e.metrics.cached_tokens, &e.metrics);
  if (draft_) draft_->Release(seq);
  if (scheduled) {
    scheduler_->Remove(seq);
  } else if (r.phase == Phase::kTierLoad) {  // left while its blocks load: let the holder go
    TierLoading& l = tier_loads_.at(r.load_id);
    kv_manager_->EndSequence(l.holder);
    l.request = RequestId();
  }  // kTierWait: FinishTierLoads skips requests that are gone
  seqs_.erase(seq);
  r.seqs.erase(std::find(r.seqs.begin(), r.seqs.end(), seq));
  // Before the first sampling a request has one sequence even when n > 1: it ends whole.
  e.request_finished = r.seqs.empty();
  if (e.request_finished) requests_.erase(e.id);
  if (!event) out->push_back(std::move(own));
}

void EngineCore::Cancel(RequestId id, std::vector<RequestOutput>* out) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  const std::vector<SeqId> seqs = it->second.seqs;
  for (SeqId s : seqs) FinishSeq(s, FinishReason::kCancelled, Status::Ok(), out, nullptr);
}

ForwardBatch EngineCore::BuildBatch(const ScheduleOutput& so) {
  ForwardBatch batch;
  batch.tokens.reserve(static_cast<size_t>(so.num_batched_tokens));
  batch.positions.reserve(static_cast<size_t>(so.num_batched_tokens));
  std::vector<TokenId> with_drafts;
  for (const ScheduledSeq& s : so.seqs) {
    const std::span<const TokenId> tokens = scheduler_->tokens(s.seq);
    const std::span<const BlockId> table = kv_manager_->block_table(s.seq);
    // Token i is at slot i - num_evicted (its RoPE position too, kv_eviction.h).
    const int slots = s.num_computed - s.num_evicted;
    if (s.num_draft == 0) {
      batch.AddSequence(table, slots,
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
    batch.AddSequence(table, slots, with_drafts, s.num_draft + 1);
  }
  return batch;
}

Status EngineCore::Step(std::vector<RequestOutput>* out) {
  if (tiers_) FinishTierLoads();
  const Clock::time_point step_start = Clock::now();
  if (config_.jump_forward && tokenizer_) JumpForward(out);
  if (spec_stats_.enabled && !draft_failed_) {
    if (Status ps = ProposeDrafts(); !ps.ok()) {  // the draft model failed: go on without it
      KV_LOG(Error, "speculative decoding off: the draft model failed: {}", ps.message());
      draft_failed_ = true;  // the counters stay in the stats (a counter must not vanish)
    }
  }
  ScheduleOutput so = scheduler_->Schedule();
  ++num_steps_;
  if (draft_) {
    for (SeqId p : so.preempted) draft_->Release(p);
  }
  for (SeqId p : so.preempted) {  // it starts over: so do its attention scores
    if (auto it = seqs_.find(p); it != seqs_.end()) {
      std::fill(it->second.scores.begin(), it->second.scores.end(), 0);
    }
  }
  for (const ScheduledSeq& s : so.seqs) {
    RequestCtx& r = requests_.at(seqs_.at(s.seq).request);
    if (r.queue_seconds < 0) r.queue_seconds = Seconds(r.arrival, step_start);
  }
  for (SeqId s : so.failed) {
    FinishSeq(s, FinishReason::kError,
              ResourceExhausted("the request does not fit in the KV cache next to the pinned "
                                "prefixes; unpin some or raise --kv-cache-memory"),
              out, nullptr);
  }
  if (so.empty()) {
    // Nothing could run: waiting requests need blocks that a tier load holds. Wait for the load
    // (briefly) rather than spin on Step.
    if (HasPendingTierLoads() && !tiers_->has_completed()) {
      WaitForTierLoad(std::chrono::milliseconds(2));
    }
    return Status::Ok();
  }
  ApplyEvictions(so);
  const ForwardBatch batch = BuildBatch(so);
  const Clock::time_point forward_start = Clock::now();
  const size_t vocab = static_cast<size_t>(model_->config().vocab);
  if (logits_.size() < batch.logits_rows.size() * vocab) {
    logits_.resize(batch.logits_rows.size() * vocab);
  }
  Status st = model_->Forward(batch, kv_, *pool_, logits_.data());
  if (!st.ok()) {  // a broken batch: end its requests with the error rather than loop on it
    for (const ScheduledSeq& s : so.seqs) {
      if (seqs_.count(s.seq)) FinishSeq(s.seq, FinishReason::kError, st, out, nullptr);
    }
    return st;
  }
  scheduler_->OnStepDone(so);
  size_t row = 0;
  for (const ScheduledSeq& s : so.seqs) {
    if (const int scored = ScoredRows(s); scored > 0) {
      ScorePrompt(s, logits_.data() + row * vocab, scored, out);
      row += static_cast<size_t>(scored);
    }
    if (!s.wants_logits) continue;
    if (s.num_draft > 0) {
      VerifyRows(s, logits_.data() + row * vocab, out);
      row += static_cast<size_t>(s.num_draft) + 1;
      continue;
    }
    SampleFromRow(s.seq, logits_.data() + row * vocab, out);
    ++row;
  }
  // The step as the decoding requests saw it: scheduling, the forward pass and sampling.
  const Clock::time_point step_end = Clock::now();
  last_step_seconds_ = Seconds(step_start, step_end);
  // Verification's cost: the forward pass and sampling of a step of decodes and drafts only.
  if (std::all_of(so.seqs.begin(), so.seqs.end(), [](const ScheduledSeq& s) {
        return s.num_new_tokens == 1 + s.num_draft;
      })) {
    verify_cost_.Observe(batch.num_tokens(), Seconds(forward_start, step_end));
  }
  step_cost_.Observe(ShapeOf(so.seqs), last_step_seconds_);
  last_prefill_cap_ = so.prefill_cap;
  return Status::Ok();
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

void EngineCore::SampleFromRow(SeqId seq, float* row, std::vector<RequestOutput>* out) {
  const size_t vocab = static_cast<size_t>(model_->config().vocab);
  RequestCtx& r = requests_.at(seqs_.at(seq).request);
  if (r.request.n > 1 && !r.forked) {
    r.forked = true;
    ForkSamples(seq, row, out);
  }
  SampleOne(seq, std::span<float>(row, vocab), out);
}

void EngineCore::ForkSamples(SeqId parent, const float* row, std::vector<RequestOutput>* out) {
  const size_t vocab = static_cast<size_t>(model_->config().vocab);
  const RequestId id = seqs_.at(parent).request;
  for (int i = 1; i < requests_.at(id).request.n; ++i) {
    auto seq = MakeSeq(id, requests_.at(id).request, i);
    KV_CHECK(seq.ok(), "sampler for a validated request: {}", seq.status().ToString());
    const SeqId child = NewSeqId();
    const std::optional<BlockCopy> copy = scheduler_->Fork(parent, child);
    if (copy) kv_.CopyBlock(copy->src, copy->dst);
    seq->scores = seqs_.at(parent).scores;  // h2o / snapkv: what the shared prompt scored
    seqs_.emplace(child, std::move(seq).value());
    requests_.at(id).seqs.push_back(child);
    std::memcpy(scratch_.data(), row, vocab * sizeof(float));
    SampleOne(child, scratch_, out);
  }
}

Emitted EngineCore::SampleOne(SeqId seq, std::span<float> logits,
                               std::vector<RequestOutput>* out) {
  SampleOutput sample;
  seqs_.at(seq).sampler.Sample(logits, &sample);
  return EmitToken(seq, std::move(sample), out);
}

Emitted EngineCore::EmitToken(SeqId seq, SampleOutput sample, std::vector<RequestOutput>* out) {
  SeqCtx& s = seqs_.at(seq);
  RequestCtx& r = requests_.at(s.request);
  const TokenId token = sample.token;
  s.sampler.Accept(token);
  scheduler_->AppendToken(seq, token);
  ++s.num_generated;
  if (!r.got_first_token) {
    r.got_first_token = true;
    r.ttft_seconds = Seconds(r.arrival, Clock::now());
  }
  RequestOutput e;
  e.id = s.request;
  e.index = s.index;
  e.new_tokens.push_back(token);
  if (r.request.sampling.wants_logprobs()) e.logprobs.push_back(std::move(sample));
  bool stop_string = false;
  if (s.detok) stop_string = TakeText(s, r.request, s.detok->Push(token), false, &e.text);
  const auto& stops = r.request.stop_ids;
  const bool stop = stop_string || std::find(stops.begin(), stops.end(), token) != stops.end() ||
                    (!r.request.ignore_eos && tokenizer_ && tokenizer_->IsEog(token));
  const bool finished = stop || s.num_generated >= r.request.max_tokens;
  if (finished) {
    FinishSeq(seq, stop ? FinishReason::kStop : FinishReason::kLength, Status::Ok(), out, &e);
  }
  out->push_back(std::move(e));
  return Emitted{token, finished};
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
  Status st = Status::Ok();
  const auto time_rows = [&](int m) {
    ForwardBatch b;
    b.AddSequence(table, 0, std::span<const TokenId>(tokens).first(static_cast<size_t>(m)), m);
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

Result<int> EngineCore::Pin(std::span<const TokenId> prompt, const std::string& cache_salt) {
  return kv_manager_->Pin(NamespaceFor(cache_salt), prompt);
}

Status EngineCore::Unpin(std::span<const TokenId> prompt, const std::string& cache_salt) {
  return kv_manager_->Unpin(NamespaceFor(cache_salt), prompt);
}

EngineStats EngineCore::stats() const {
  EngineStats st;
  st.kv = kv_manager_->stats();
  st.num_preemptions = scheduler_->num_preemptions();
  st.num_running = scheduler_->num_running();
  st.num_waiting = scheduler_->num_waiting();
  st.num_steps = num_steps_;
  st.step_cost = step_cost_.fit();
  st.prefill_cap = last_prefill_cap_;
  st.spec = spec_stats_;
  if (config_.spec.adaptive && spec_stats_.enabled) {
    for (int m = 1; m <= config_.spec.num_speculative_tokens + 1; ++m) {
      st.spec.step_seconds_by_rows.push_back(verify_cost_.Seconds(m).value_or(0.0));
    }
  }
  st.jump_forward = jump_stats_;
  st.kv_eviction = eviction_stats_;
  const KvLayout& layout = kv_.layout();
  st.kv_k_dtype = layout.k_dtype;
  st.kv_v_dtype = layout.v_dtype;
  st.kv_latent = layout.v_from_k;
  st.kv_bytes_per_token = layout.bytes_per_token();
  st.kv_capacity_tokens = KvCapacityTokens(layout, kv_.num_blocks());
  st.tiers = TierStatsNow();
  st.failed_tiers = failed_tiers_;
  return st;
}

std::vector<TierStats> EngineCore::TierStatsNow() const {
  return tiers_ ? tiers_->stats() : std::vector<TierStats>{};
}

std::vector<std::string> EngineCore::TierDescriptions() const {
  std::vector<std::string> lines = tier_descriptions_;
  if (tiers_) {
    for (const auto& t : tiers_->tiers()) lines.push_back(t->Describe());
  }
  return lines;
}

Status EngineCore::OpenTiers() {
  const KvTierConfig& c = config_.tiers;
  if (!c.any()) return Status::Ok();
  if (!config_.enable_prefix_caching) {
    return InvalidArgument("lower KV tiers (--kv-disk-path, --kv-redis-url) need prefix caching; "
                           "drop --no-prefix-caching");
  }
  std::vector<std::unique_ptr<KvTier>> tiers;
  if (!c.disk_path.empty()) {
    tier_names_.push_back("disk");
    auto disk = DiskTier::Open(DiskTierConfig{c.disk_path, c.disk_size_bytes});
    if (disk.ok()) {
      tiers.push_back(std::move(disk).value());
    } else {  // the server goes on without it
      failed_tiers_.push_back("disk");
      tier_descriptions_.push_back(
          fmt::format("disk tier off: {}", disk.status().message()));
      KV_LOG(Error, "kv disk tier off: {}", disk.status().message());
    }
  }
  if (!c.redis_url.empty()) {
    tier_names_.push_back("redis");
    KV_ASSIGN_OR_RETURN(RedisTierConfig rc, ParseRedisUrl(c.redis_url));
    rc.ttl_seconds = c.redis_ttl_seconds;
    rc.timeout_ms = c.redis_timeout_ms;
    KV_ASSIGN_OR_RETURN(auto redis, RedisTier::Open(rc));
    tiers.push_back(std::move(redis));
  }
  if (tiers.empty()) return Status::Ok();
  tier_descriptions_.push_back(fmt::format("weights digest (SHA-256 of {}) in {:.0f} ms",
                                           FormatByteSize(model_->weight_bytes()),
                                           weights_digest_seconds_ * 1e3));
  tiers_ = std::make_unique<TieredStore>(
      std::move(tiers), TieredStoreConfig{c.write_policy, c.max_queued_write_bytes}, &kv_);
  kv_manager_->set_block_listener(tiers_.get());
  return Status::Ok();
}

// NOTE (which blocks to load): the request's RAM hit is held by a holder sequence (so it cannot
// be evicted while the load runs); the keys of the blocks after it chain from its last key, up
// to the last full block before the prompt's final token (that token is always computed). With
// token-granular hits the block holding the final token is loaded too when the prompt fills it:
// admission then copies its first tokens, and only the final token is computed. Nothing is
// loaded when RAM already gives all but the final token.
bool EngineCore::StartTierLoad(RequestId id) {
  if (!tiers_) return false;
  RequestCtx& r = requests_.at(id);
  if (r.eviction.by_score) return false;  // it takes no cached prefix (scheduler.cc)
  const std::vector<TokenId>& prompt = r.request.prompt;
  const int bs = config_.block_size;
  const int n = static_cast<int>(prompt.size());
  const int max_blocks = config_.partial_block_hits ? n / bs : (n - 1) / bs;
  if (max_blocks == 0 || kv_manager_->PeekCachedTokens(r.ns, prompt) >= n - 1) return false;
  const SeqId holder = NewSeqId();
  const int ram_blocks =
      kv_manager_->BeginSequence(holder, r.ns, prompt, r.request.priority, /*count_tokens=*/false,
                                 /*partial_block=*/false) /
      bs;
  if (ram_blocks >= max_blocks) {
    kv_manager_->EndSequence(holder);
    return false;
  }
  std::vector<BlockKey> keys;
  BlockKey prev = kv_manager_->PrefixKey(holder);
  for (int b = ram_blocks; b < max_blocks; ++b) {
    prev = ChainKey(prev, std::span<const TokenId>(prompt).subspan(static_cast<size_t>(b) * bs, bs));
    keys.push_back(prev);
  }
  if (auto it = loading_keys_.find(keys.front()); it != loading_keys_.end()) {
    kv_manager_->EndSequence(holder);  // another request loads this block: look again after it
    r.phase = Phase::kTierWait;
    r.load_id = it->second;
    tier_waiters_[it->second].push_back(id);
    return true;
  }
  if (!tiers_->MayContain(keys.front())) {
    kv_manager_->EndSequence(holder);
    return false;
  }
  std::vector<TokenId> tokens(prompt.begin() + static_cast<ptrdiff_t>(ram_blocks) * bs,
                              prompt.begin() + static_cast<ptrdiff_t>(max_blocks) * bs);
  const uint64_t load = tiers_->StartLoad(keys, std::move(tokens));
  for (const BlockKey& k : keys) loading_keys_.emplace(k, load);
  tier_loads_.emplace(load, TierLoading{id, holder, ram_blocks, std::move(keys)});
  r.phase = Phase::kTierLoad;
  r.load_id = load;
  return true;
}

void EngineCore::FinishTierLoads() {
  std::vector<TierLoad> done;
  tiers_->TakeCompleted(&done);
  const int bs = config_.block_size;
  const KvLayout& layout = kv_.layout();
  for (TierLoad& load : done) {
    auto node = tier_loads_.extract(load.id);
    KV_CHECK(!node.empty(), "unknown tier load {}", load.id);
    TierLoading& l = node.mapped();
    for (const BlockKey& k : l.keys) {
      auto it = loading_keys_.find(k);
      if (it != loading_keys_.end() && it->second == load.id) loading_keys_.erase(it);
    }
    if (l.request.valid()) {
      RequestCtx& r = requests_.at(l.request);
      // Only what fits without preempting anyone; the rest is computed.
      const int fit = std::min(load.num_blocks(), kv_manager_->num_allocatable_blocks());
      if (fit > 0) {
        const int end_tokens = (l.first_block + fit) * bs;
        KV_CHECK(kv_manager_->Allocate(l.holder, end_tokens));
        const std::span<const BlockId> table = kv_manager_->block_table(l.holder);
        for (int j = 0; j < fit; ++j) {
          kv_.WriteBlock(table[static_cast<size_t>(l.first_block + j)],
                         BlockRecordPayload(load.records[static_cast<size_t>(j)], layout).data());
        }
        kv_manager_->Commit(l.holder, r.request.prompt, end_tokens);
        r.tier_first_block = l.first_block;
        r.tier_of_block.assign(load.tier.begin(), load.tier.begin() + fit);
      }
      kv_manager_->EndSequence(l.holder);
      Schedule(l.request);
    }
    tiers_->Recycle(std::move(load.records));
    auto waiters = tier_waiters_.extract(load.id);
    if (waiters.empty()) continue;
    for (RequestId w : waiters.mapped()) {
      auto it = requests_.find(w);
      if (it == requests_.end() || it->second.phase != Phase::kTierWait ||
          it->second.load_id != load.id) {
        continue;  // cancelled meanwhile
      }
      if (!StartTierLoad(w)) Schedule(w);
    }
  }
}

void EngineCore::FillTierMetrics(const RequestCtx& r, int cached_tokens,
                                 RequestMetrics* m) const {
  if (tier_names_.empty()) return;
  m->cached_tokens_by_tier.push_back({"ram", 0});
  for (const std::string& name : tier_names_) m->cached_tokens_by_tier.push_back({name, 0});
  const int bs = config_.block_size;
  // Block b's tokens count for the tier that loaded it for this request, else for RAM; a
  // token-granular hit's tokens for whoever supplied the block they were copied from.
  const auto slot_of = [&](int b) {
    const int j = b - r.tier_first_block;
    if (j < 0 || j >= static_cast<int>(r.tier_of_block.size())) return size_t{0};
    const std::string_view name = tiers_->tiers()[static_cast<size_t>(r.tier_of_block[j])]->name();
    for (size_t t = 0; t < tier_names_.size(); ++t) {
      if (tier_names_[t] == name) return t + 1;
    }
    return size_t{0};
  };
  for (int b = 0; b < cached_tokens / bs; ++b) m->cached_tokens_by_tier[slot_of(b)].tokens += bs;
  m->cached_tokens_by_tier[slot_of(cached_tokens / bs)].tokens += cached_tokens % bs;
}

}  // namespace kvserve
