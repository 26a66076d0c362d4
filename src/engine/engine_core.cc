// EngineCore's construction, admission and the step itself (engine_core.h): Create checks the
// config and builds the KV cache, scheduler and pool; Validate and Add take requests in; Step
// runs one scheduled batch through the model and hands each sequence's logits rows to the
// sampling (engine_output.cc), verification (engine_spec.cc) or prompt scoring
// (engine_batch.cc) that follows.
#include "engine/engine_core.h"

#include <fmt/format.h>

#include <algorithm>

#include "gguf/weights_digest.h"
#include "ops/attention.h"
#include "prefix/block_key.h"
#include "quant/kv_dtype.h"
#include "util/check.h"
#include "util/log.h"

namespace kvserve {
namespace {

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

// A per-layer window pattern as '0' / '1' per layer ("" for the period rule).
std::string SwaLayersString(const ModelConfig& c) {
  std::string out;
  for (bool windowed : c.swa_layers) out += windowed ? '1' : '0';
  return out;
}

// What makes two models' K/V differ for the same tokens: the exact weights (their digest), the
// configuration read from the metadata (windows, soft-caps, which LongRoPE factors the context
// chose), the KV layout.
std::string ModelFingerprint(const Model& model, const KvLayout& layout,
                             const Digest256& weights) {
  const ModelConfig& c = model.config();
  return fmt::format(
             "{}|{}|{}|l{} h{} nh{} kv{} hd{} ffn{} v{} eps{} rope{}:{}:{}:{} w{}|k{} v{} bs{}",
             weights.Hex(), c.arch ? c.arch->name : "?", c.name, c.num_layers, c.hidden,
             c.num_heads, c.num_kv_heads, c.head_dim, c.ffn, c.vocab, c.rms_eps, c.rope.freq_base,
             c.rope.rotary_dim, static_cast<int>(c.rope.scaling), c.rope.scaling_factor,
             model.weight_bytes(), KvDtypeName(layout.k_dtype), KvDtypeName(layout.v_dtype),
             layout.block_size) +
         fmt::format("|swa{}:{}:{} rl{} af{} f{} sc{}:{} qs{}", c.sliding_window, c.swa_period,
                     SwaLayersString(c), c.rope_local.freq_base, c.rope.attn_factor,
                     static_cast<int>(c.rope_factors), c.attn_softcap, c.final_softcap,
                     c.attn_scale) +
         MoeMlaFingerprint(model);
}

}  // namespace

Result<KvBlockPlan> PlanKvBlocks(const EngineConfig& config, const ModelConfig& model,
                                 const KvLayout& layout) {
  KvBlockPlan full{layout, 0, 0, 0};
  KV_ASSIGN_OR_RETURN(full.num_blocks, ResolveNumBlocks(config, layout, config.max_model_len));
  if (!config.kv_windows || !model.has_windows() || config.tiers.any()) return full;
  KvBlockPlan plan{layout, 0, 0, 0};
  plan.layout.window_layers.assign(static_cast<size_t>(model.num_layers), 0);
  int window = 0;
  for (int l = 0; l < model.num_layers; ++l) {
    plan.layout.window_layers[static_cast<size_t>(l)] = model.LayerWindow(l) > 0;
    window = std::max(window, model.LayerWindow(l));
  }
  plan.window_reach = window + kAttentionMaxLanes;
  // Every running sequence's window and a step's new tokens, twice (the second half keeps the
  // windows of cached prefixes for hits), within a quarter of the memory (the budget, or what
  // the full layout would take); but the running windows once within half of it.
  const int64_t bs = layout.block_size;
  const int64_t per_seq = (plan.window_reach - 1 + bs - 1) / bs + 2;
  const int64_t step = (config.max_num_batched_tokens + bs - 1) / bs;  // a step's new tokens
  const int64_t running = config.max_num_seqs * (per_seq + 1) + step;
  const uint64_t wblock = plan.layout.window_bytes_per_block();
  const uint64_t memory = config.num_blocks <= 0 && config.kv_cache_memory_bytes > 0
                              ? config.kv_cache_memory_bytes
                              : static_cast<uint64_t>(full.num_blocks) * layout.bytes_per_block();
  const int64_t share = static_cast<int64_t>(memory / 4 / wblock);
  plan.num_window_blocks = static_cast<int>(std::min<int64_t>(
      std::max(std::min(2 * running, share), std::min(running, 2 * share)), 1 << 24));
  // At least one sequence's window and a whole step of new tokens.
  const int64_t least = per_seq + 1 + step;
  if (config.num_window_blocks > 0) {
    if (config.num_window_blocks < least) {
      return InvalidArgument(
          fmt::format("{} window blocks cannot hold one sequence's window and step ({} blocks)",
                      config.num_window_blocks, least));
    }
    plan.num_window_blocks = config.num_window_blocks;
  }
  if (plan.num_window_blocks < least) return full;
  if (plan.layout.num_main_layers() == 0 && config.num_blocks <= 0) {
    // Every layer has a window: the main blocks hold no bytes, only the prefix cache's index,
    // and a memory budget goes to the group (more windows of cached prefixes).
    const int64_t per_ctx = (config.max_model_len + bs - 1) / bs;
    plan.num_blocks = static_cast<int>(std::min<int64_t>(
        std::max<int64_t>(per_ctx * config.max_num_seqs, full.num_blocks), 1 << 24));
    if (config.kv_cache_memory_bytes > 0 && config.num_window_blocks <= 0) {
      plan.num_window_blocks = full.num_blocks;  // the budget in blocks of every layer
    }
    return plan.num_window_blocks >= least && plan.num_window_blocks < plan.num_blocks ? plan
                                                                                       : full;
  }
  if (config.num_blocks > 0) {
    plan.num_blocks = config.num_blocks;
  } else if (config.kv_cache_memory_bytes > 0) {
    const uint64_t wbytes = static_cast<uint64_t>(plan.num_window_blocks) * wblock;
    if (wbytes >= config.kv_cache_memory_bytes) return full;
    plan.num_blocks = static_cast<int>(std::min<uint64_t>(
        (config.kv_cache_memory_bytes - wbytes) / plan.layout.bytes_per_block(), 1 << 24));
  } else {
    plan.num_blocks = full.num_blocks;  // the same tokens in less memory
  }
  // Worth it when the window layers then need fewer blocks than the main ones (for the same
  // memory, more tokens fit).
  return plan.num_window_blocks < plan.num_blocks && plan.num_blocks >= full.num_blocks ? plan
                                                                                        : full;
}

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
  KV_ASSIGN_OR_RETURN(
      const KvBlockPlan kv_plan,
      PlanKvBlocks(config, model->config(),
                   model->MakeKvLayout(config.block_size, config.k_dtype, config.v_dtype)));
  const KvLayout& layout = kv_plan.layout;
  const int num_blocks = kv_plan.num_blocks;
  KvStorage kv(layout, num_blocks, kv_plan.num_window_blocks);
  std::unique_ptr<EngineCore> core(new EngineCore(std::move(model), std::move(kv), config,
                                                  tokenizer));
  core->kv_manager_ = std::make_unique<KvCacheManager>(KvCacheConfig{
      num_blocks, config.block_size, config.enable_prefix_caching, config.eviction_policy,
      config.max_pinned_fraction, config.partial_block_hits, config.max_retained_fraction,
      config.clock_ms, kv_plan.num_window_blocks, kv_plan.window_reach});
  {
    KvStorage* storage = &core->kv_;
    core->kv_manager_->set_block_copier(
        [storage](BlockId src, BlockId dst) { storage->CopyBlock(src, dst); });
    core->kv_manager_->set_window_block_copier(
        [storage](BlockId src, BlockId dst) { storage->CopyBlock(src, dst, /*window=*/true); });
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
  core->model_->ReleasePackedFilePages();  // the digest read them back in
  core->weights_digest_seconds_ = Seconds(digest_start, Clock::now());
  core->model_fingerprint_ = ModelFingerprint(*core->model_, layout, weights);
  KV_RETURN_IF_ERROR(core->OpenTiers());
  KV_RETURN_IF_ERROR(core->OpenKvEvents());
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

Status EngineCore::OpenKvEvents() {
  if (!config_.kv_events.enabled) return Status::Ok();
  if (!config_.enable_prefix_caching) {
    return InvalidArgument(
        "KV events (--kv-events-config) report the prefix cache; drop --no-prefix-caching");
  }
  KV_ASSIGN_OR_RETURN(kv_events_, KvEventPublisher::Create(config_.kv_events, config_.block_size));
  kv_manager_->add_block_observer(kv_events_.get());
  if (tiers_) {  // the lower tiers announce their own contents (docs/kv_events.md, "Media")
    kv_events_->SetUnsaltedRoot(RootKey(NamespaceFor("")));
    tiers_->set_observer(kv_events_.get());
  }
  KV_LOG(Info, "kv events: publishing on {}{}, topic \"{}\", {} block hashes",
         kv_events_->endpoint(),
         kv_events_->replay_endpoint().empty() ? ""
                                               : ", replay on " + kv_events_->replay_endpoint(),
         config_.kv_events.topic,
         config_.kv_events.hash_form == BlockHashForm::kInt64 ? "int" : "bytes");
  return Status::Ok();
}

CacheNamespace EngineCore::NamespaceFor(const std::string& cache_salt) const {
  return MakeCacheNamespace({model_fingerprint_, cache_salt});
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

Status EngineCore::Add(RequestId id, EngineRequest request, Clock::time_point arrival) {
  KV_RETURN_IF_ERROR(Validate(request));
  KV_CHECK(!requests_.count(id), "request {} added twice", id.value());
  KV_ASSIGN_OR_RETURN(const KvEvictionPlan plan, EvictionPlanFor(request));
  KV_RETURN_IF_ERROR(scheduler_->CheckAdmission(static_cast<int>(request.prompt.size()),
                                                request.max_tokens, plan));
  KV_ASSIGN_OR_RETURN(SeqCtx seq, MakeSeq(id, request, 0));
  const SeqId sid = NewSeqId();
  const CacheNamespace ns = NamespaceFor(request.cache_salt);
  if (kv_events_ && !request.cache_salt.empty()) {  // vLLM's cache_salt: the first block's key
    kv_events_->SetNamespaceSalt(RootKey(ns), request.cache_salt);
  }
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

void EngineCore::Cancel(RequestId id, std::vector<RequestOutput>* out) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  const std::vector<SeqId> seqs = it->second.seqs;
  for (SeqId s : seqs) FinishSeq(s, FinishReason::kCancelled, Status::Ok(), out, nullptr);
}

Status EngineCore::Step(std::vector<RequestOutput>* out) {
  // Whatever way the step ends, its KV events (inserts, evictions) are one batch.
  struct EndKvEvents {
    EngineCore* core;
    ~EndKvEvents() { core->FlushKvEvents(); }
  } end_kv_events{this};
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

Result<int> EngineCore::Pin(std::span<const TokenId> prompt, const std::string& cache_salt) {
  return kv_manager_->Pin(NamespaceFor(cache_salt), prompt);
}

Result<int> EngineCore::HoldExplicit(uint64_t id, std::span<const TokenId> prompt,
                                     const std::string& cache_salt, int64_t until_ms) {
  return kv_manager_->HoldExplicit(id, NamespaceFor(cache_salt), prompt, until_ms);
}

void EngineCore::ReleaseExplicit(uint64_t id) { kv_manager_->ReleaseExplicit(id); }

void EngineCore::ApplyHolds(const EngineRequest& request, RequestMetrics* metrics) {
  const CacheNamespace ns = NamespaceFor(request.cache_salt);
  const std::span<const TokenId> prompt(request.prompt);
  for (const KvHold& h : request.holds) {
    const auto prefix = prompt.first(static_cast<size_t>(
        std::clamp<int>(h.tokens, 0, static_cast<int>(prompt.size()))));
    if (h.explicit_id != 0) {
      Result<int> held = kv_manager_->HoldExplicit(h.explicit_id, ns, prefix, h.until_ms);
      metrics->held_tokens.push_back(held.ok() ? *held : -1);
      if (!held.ok()) metrics->hold_error = held.status();
      continue;
    }
    const bool tiers = h.tiers_only && kv_manager_->has_block_listener();
    const KvCacheManager::HoldResult r = kv_manager_->HoldPrefix(ns, prefix, h.ttl_ms, !tiers);
    metrics->held_tokens.push_back(r.held_tokens + r.tier_tokens);
  }
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
  st.kv_window_layers = layout.num_window_layers();
  st.kv_window_bytes =
      layout.window_bytes_per_block() * static_cast<uint64_t>(kv_.num_window_blocks());
  st.tiers = TierStatsNow();
  st.failed_tiers = failed_tiers_;
  return st;
}

}  // namespace kvserve
