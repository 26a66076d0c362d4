// EngineCore: the step loop's body, single-threaded and deterministic: requests in, one step at
// a time, output events out. Engine (engine.h) runs it on its own thread; tests and benchmarks
// may drive it directly.
//
// Owns: the Model, KvStorage (the bytes), the KvCacheManager (blocks, prefix cache), the
// Scheduler, a ThreadPool for the kernels, and per-sequence Samplers and detokenizers.
//
// NOTE (one step): Schedule() -> one ForwardBatch of every scheduled chunk (decodes of running
// sequences and prefill chunks, each with its block table) -> Model::Forward -> OnStepDone
// (num_computed advances, full blocks are committed to the prefix cache, so a request that
// arrives next step already hits them) -> for each sequence whose chunk reached its last token:
// sample, append, stop checks; a finished sequence is removed and releases its blocks. For
// n > 1 the first sampling forks n - 1 children that share the prompt's full blocks; the shared
// partial block is copied (copy-on-write) right away, before the next Forward.
//
// NOTE (lower tiers): with a disk or Redis tier, a new request first holds its RAM hit (a
// holder sequence locks that path) while the TieredStore's reader thread fetches the blocks
// that follow it; the request joins the scheduler only when that load finishes. The verified
// blocks are copied into RAM blocks (only as many as can be had without preempting anyone: with
// no room the request computes instead), committed to the tree like computed blocks, and the
// holder released, so the scheduler's admission finds them as an ordinary RAM hit in the same
// step. A request whose next block is being loaded for another request waits for that load and
// then looks again, so one block is fetched once.
//
// Files: engine_core.cc (Create, admission, Step), engine_batch.cc (the forward batch, eviction
// inside a sequence, prompt scoring), engine_output.cc (sampling, text, finishing samples),
// engine_spec.cc (drafts, verification, jump-forward), engine_tiers.cc (lower-tier loads).
//
// Thread safety: none; one thread calls everything.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/draft_runner.h"
#include "engine/engine_config.h"
#include "engine/request.h"
#include "events/kv_event_publisher.h"
#include "kv/kv_storage.h"
#include "kvserve/status.h"
#include "model/model.h"
#include "prefix/kv_cache_manager.h"
#include "prefix/tiered_store.h"
#include "sample/sampler.h"
#include "sched/scheduler.h"
#include "spec/draft_policy.h"
#include "spec/verify.h"
#include "spec/verify_cost.h"
#include "structured/constraint.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"

namespace kvserve {

class EngineCore {
 public:
  using Clock = std::chrono::steady_clock;

  // `tokenizer` (may be null; must outlive the core) gives end-of-generation ids and text.
  // REQUIRES: model->max_batch_tokens() >= config.max_num_batched_tokens.
  static Result<std::unique_ptr<EngineCore>> Create(std::unique_ptr<Model> model,
                                                    const EngineConfig& config,
                                                    const Tokenizer* tokenizer = nullptr);
  ~EngineCore();

  // Checks that depend only on fixed settings (prompt ids, lengths, sampling params); safe to
  // call from any thread while another thread runs steps.
  Status Validate(const EngineRequest& request) const;
  // Queues a request (Validate first, then whether it could ever fit in the cache).
  Status Add(RequestId id, EngineRequest request, Clock::time_point arrival = Clock::now());
  // Ends every sample of the request now, releasing its blocks; no-op for unknown ids.
  void Cancel(RequestId id, std::vector<RequestOutput>* out);
  // Work for Step() now: scheduled requests, or finished tier loads to take in.
  bool HasWork() const {
    return scheduler_->HasWork() || (tiers_ && tiers_->has_completed());
  }
  // Tier loads still running (a caller that drives Step() itself waits with WaitForTierLoad).
  bool HasPendingTierLoads() const { return tiers_ && tiers_->num_loads_in_flight() > 0; }
  void WaitForTierLoad(std::chrono::milliseconds timeout) {
    if (tiers_) tiers_->WaitForLoad(timeout);
  }
  // Called from an I/O thread whenever a tier load finishes (Engine wakes its step thread).
  void SetTierLoadCallback(std::function<void()> fn) {
    if (tiers_) tiers_->set_on_load_done(std::move(fn));
  }
  // Waits until every queued tier write is stored (tests; graceful shutdown does it too).
  void FlushTierWrites() {
    if (tiers_) tiers_->Flush();
  }
  // One line per configured lower tier saying what it holds (or why it is off).
  std::vector<std::string> TierDescriptions() const;
  // Runs one step; appends its events to *out. Ends the step's batch of KV events.
  Status Step(std::vector<RequestOutput>* out);
  // Hands the KV events recorded since the last step to the publisher (Engine calls it after
  // work done outside Step: tasks, cancels). No-op without an event stream.
  void FlushKvEvents() {
    if (kv_events_) kv_events_->EndStep();
  }
  // The KV event publisher (null without --kv-events-config): its endpoints and counters.
  KvEventPublisher* kv_event_publisher() const { return kv_events_.get(); }

  // Pins / unpins the cached full-block prefix of `prompt` (see KvCacheManager::Pin).
  Result<int> Pin(std::span<const TokenId> prompt, const std::string& cache_salt = {});
  Status Unpin(std::span<const TokenId> prompt, const std::string& cache_salt = {});
  // Explicit caches (KvCacheManager::HoldExplicit / ReleaseExplicit).
  Result<int> HoldExplicit(uint64_t id, std::span<const TokenId> prompt,
                           const std::string& cache_salt, int64_t until_ms);
  void ReleaseExplicit(uint64_t id);
  int64_t NowMs() const { return kv_manager_->NowMs(); }

  EngineStats stats() const;
  // The lower tiers' counters as they are now. Safe from any thread: they are atomics, and the
  // tier I/O threads keep updating them while no step runs.
  std::vector<TierStats> TierStatsNow() const;
  // The prefix-cache namespace of requests with this salt: the model's fingerprint, the K and V
  // dtypes and the block size, then the salt; caches of different dtypes never mix.
  CacheNamespace NamespaceFor(const std::string& cache_salt) const;
  // Applies the request's holds (at its end) and reports them in *metrics.
  void ApplyHolds(const EngineRequest& request, RequestMetrics* metrics);
  const EngineConfig& config() const { return config_; }
  const Model& model() const { return *model_; }
  const KvCacheManager& kv_manager() const { return *kv_manager_; }
  const Scheduler& scheduler() const { return *scheduler_; }
  int num_live_requests() const { return static_cast<int>(requests_.size()); }
  void CheckInvariants() const {
    kv_manager_->CheckInvariants();
    if (draft_) draft_->CheckInvariants();
  }
  const DraftRunner* draft_runner() const { return draft_.get(); }

 private:
  static constexpr int kDraftProbeSteps = 16, kMaxDraftProbeSteps = 512;
  struct SeqCtx {
    RequestId request;
    int index = 0;
    Sampler sampler;
    std::unique_ptr<StreamingDetokenizer> detok;
    int num_generated = 0;
    std::string held;  // text that may be the start of a stop string, not streamed yet
    bool text_done = false;  // a stop string ended the text
    int stop_string = -1;    // which of the request's stop strings did
    // Speculative decoding.
    AcceptanceStats acceptance;
    TokenId shadow = -1;     // n-gram: the draft it would have had, for position shadow_at
    size_t shadow_at = 0;
    // A draft-model sequence the policy keeps from drafting probes with one draft: at its first
    // decode step (so that even a short request learns its acceptance), then after
    // probe_interval steps. A probe costs the draft's catch-up over the steps since the last
    // one, so while the policy keeps declining, the interval doubles (up to
    // kMaxDraftProbeSteps); it starts over when the policy drafts.
    int steps_without_drafts = kDraftProbeSteps - 1;
    int probe_interval = kDraftProbeSteps;
    int draft_tokens = 0;
    int accepted_tokens = 0;
    // Structured output: the sampler's constraint (owned by the sampler), and whether the
    // drafts of this step are the tokens it forces (jump-forward) rather than speculation.
    structured::ConstraintProcessor* constraint = nullptr;
    bool forced_draft = false;
    // Verify mode: forced drafts at most this long (0 = no cap yet), and steps to wait before
    // the next after one where none was accepted (an exponential back-off).
    int jump_len = 0;
    int jump_skip = 0;
    int jump_backoff = 0;
    int prompt_scored = 0;       // score_prompt: prompt tokens whose logprob was sent
    int64_t evicted_tokens = 0;  // evicted inside the sequence (the furthest it got)
    // h2o / snapkv: attention scores per (layer, KV head, slot) in fixed point, filled by the
    // attention kernel (ForwardSeq::scores); sized at the sequence's first step.
    std::vector<int64_t> scores;
  };
  enum class Phase { kScheduled, kTierLoad, kTierWait };
  struct RequestCtx {
    EngineRequest request;
    CacheNamespace ns;
    Clock::time_point arrival;
    std::vector<SeqId> seqs;  // live samples
    bool forked = false;
    bool got_first_token = false;
    double queue_seconds = -1;  // set by the first step that schedules it
    double ttft_seconds = 0;
    Phase phase = Phase::kScheduled;
    uint64_t load_id = 0;  // kTierLoad: its load; kTierWait: the load it waits for
    // Blocks [tier_first_block, + tier_of_block.size()) were loaded from these tiers.
    int tier_first_block = 0;
    std::vector<int> tier_of_block;
    KvEvictionPlan eviction;  // of its sequences (budget_blocks 0 = none)
  };
  struct TierLoading {
    RequestId request;  // invalid once the request left
    SeqId holder;       // holds the request's RAM hit while the load runs
    int first_block = 0;
    std::vector<BlockKey> keys;
  };

  EngineCore(std::unique_ptr<Model> model, KvStorage kv, const EngineConfig& config,
             const Tokenizer* tokenizer);
  static double Seconds(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
  }
  SeqId NewSeqId() { return SeqId(next_seq_++); }

  // engine_core.cc: admission and the step.
  void Schedule(RequestId id);  // hands the request's first sequence to the scheduler

  // engine_batch.cc: the forward batch of a step, and the KV edits inside sequences.
  ForwardBatch BuildBatch(const ScheduleOutput& so);
  // The request's eviction config: its own, else the engine's; and that config checked and
  // planned.
  const KvEvictionConfig& EvictionConfigFor(const EngineRequest& r) const;
  Result<KvEvictionPlan> EvictionPlanFor(const EngineRequest& r) const;
  // Copies shared blocks and re-rotates the moved keys of this step's evictions.
  void ApplyEvictions(const ScheduleOutput& so);
  // h2o / snapkv: drops the tokens each (layer, KV head) scored lowest and compacts the rest.
  void CompactByScore(SeqCtx& c, const KvEvictionPlan& plan, SeqId seq);
  // score_prompt: logits rows of the chunk that score prompt tokens (they come first), and the
  // event with their log-probabilities.
  int ScoredRows(const ScheduledSeq& s) const;
  void ScorePrompt(const ScheduledSeq& s, const float* rows, int num_rows,
                   std::vector<RequestOutput>* out);

  // engine_output.cc: sampling, streaming text, finishing samples.
  Result<SeqCtx> MakeSeq(RequestId id, const EngineRequest& request, int index) const;
  void SampleFromRow(SeqId seq, float* row, std::vector<RequestOutput>* out);
  void ForkSamples(SeqId parent, const float* row, std::vector<RequestOutput>* out);
  // Samples, appends and emits one token; says which, and whether the sample finished with it.
  Emitted SampleOne(SeqId seq, std::span<float> logits, std::vector<RequestOutput>* out);
  // Appends and emits a token chosen already (sampled, or forced by a constraint).
  Emitted EmitToken(SeqId seq, SampleOutput sample, std::vector<RequestOutput>* out);
  // Appends `text` to the sample's held-back text and moves to *emit what can be streamed.
  // True when a stop string was found (*emit then ends before or after it).
  bool TakeText(SeqCtx& s, const EngineRequest& r, std::string text, bool final,
                std::string* emit) const;
  // Ends the sample: its last text, metrics and finish reason into *event (or a new event in
  // *out when null); releases its blocks, and the request once its last sample ends.
  void FinishSeq(SeqId seq, FinishReason reason, Status error, std::vector<RequestOutput>* out,
                 RequestOutput* event);

  // engine_spec.cc: speculative decoding and jump-forward.
  // Speculative decoding: sets this step's drafts on the decoding sequences (before Schedule).
  Status ProposeDrafts();
  // Measures verify_cost_ for 1..max_rows rows of one scratch sequence (start-up, adaptive
  // speculation only). The scratch blocks are never committed, so nothing of it is cached.
  Status CalibrateVerifyCost(int max_rows);
  static constexpr int kMaxCalibratedRows = 64, kMaxVerifyCostRows = 1024;
  // Jump-forward: the tokens each decoding constrained sequence's grammar forces, appended
  // (kForce) or set as drafts (kVerify).
  void JumpForward(std::vector<RequestOutput>* out);
  std::vector<TokenId> ForcedTokens(SeqCtx& c, TokenId last, int max_tokens) const;
  // Verifies a sequence's drafts against its logits rows (rows[0] follows its last token).
  void VerifyRows(const ScheduledSeq& s, float* rows, std::vector<RequestOutput>* out);
  CacheNamespace DraftNamespaceFor(const std::string& cache_salt) const;

  // engine_tiers.cc: the lower KV tiers.
  // Opens the configured tiers (a tier that cannot be used is logged and left out).
  Status OpenTiers();
  // Starts loading what follows the request's RAM hit from the lower tiers; false when there is
  // nothing to load (the caller schedules it).
  bool StartTierLoad(RequestId id);
  // Takes in the finished loads: copies, commits, schedules (engine thread, start of a step).
  void FinishTierLoads();
  void FillTierMetrics(const RequestCtx& r, int cached_tokens, RequestMetrics* m) const;
  // Starts the KV event publisher as an observer of the tree (Create).
  Status OpenKvEvents();

  EngineConfig config_;
  std::unique_ptr<Model> model_;
  KvStorage kv_;
  const Tokenizer* tokenizer_;
  std::unique_ptr<KvCacheManager> kv_manager_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ThreadPool> pool_;
  StepCostModel step_cost_;  // fitted from every step; sizes prefill for --max-itl-ms
  int last_prefill_cap_ = -1;
  std::string model_fingerprint_;
  double weights_digest_seconds_ = 0;
  // The publisher observes the tiers: declared first, it outlives the store, whose writer thread
  // reports its last writes while the store is destroyed.
  std::unique_ptr<KvEventPublisher> kv_events_;  // null without an event stream
  std::unique_ptr<TieredStore> tiers_;           // null without lower tiers
  std::vector<std::string> tier_names_;  // configured lower tiers, in lookup order
  std::vector<std::string> failed_tiers_;
  std::vector<std::string> tier_descriptions_;
  std::unordered_map<uint64_t, TierLoading> tier_loads_;       // by load id
  std::unordered_map<BlockKey, uint64_t> loading_keys_;        // block -> its load
  std::unordered_map<uint64_t, std::vector<RequestId>> tier_waiters_;  // load -> waiting
  std::unordered_map<RequestId, RequestCtx> requests_;
  std::unordered_map<SeqId, SeqCtx> seqs_;
  int64_t next_seq_ = 0;
  int64_t num_steps_ = 0;
  std::unique_ptr<DraftRunner> draft_;  // method draft_model
  SpecStats spec_stats_;
  JumpForwardStats jump_stats_;
  KvEvictionStats eviction_stats_;
  bool draft_failed_ = false;  // the draft model's Forward failed once: no more drafts
  double last_step_seconds_ = 0;
  VerifyCostTable verify_cost_;  // adaptive speculation's step costs by rows (no prefill)
  std::vector<float> logits_;   // [logits rows of the step, vocab]
  std::vector<float> scratch_;  // [vocab] a row copy for each parallel sample
};

// The KV cache's blocks: the main pool's and, for a model with sliding windows, the window
// group's (kv_storage.h; docs/kv_cache.md, "Window layers"): layout.window_layers set, the pool
// sized for every running sequence's window and a step's tokens, twice (the second half keeps
// cached prefixes' windows) within a quarter of the memory (the budget, else what the full
// layout would take), the running windows once within half of it
// (EngineConfig::num_window_blocks overrides), reach = the widest window + kAttentionMaxLanes. With
// a memory budget the main pool gets what the group leaves. No group (the layout unchanged, every
// layer in the main blocks) with --no-kv-windows, lower tiers, or where the group would not fit
// more tokens than without it.
struct KvBlockPlan {
  KvLayout layout;
  int num_blocks = 0;
  int num_window_blocks = 0;
  int window_reach = 0;
};
Result<KvBlockPlan> PlanKvBlocks(const EngineConfig& config, const ModelConfig& model,
                                 const KvLayout& layout);

// Resolves the KV block count from the config and the model (num_blocks, else the memory
// budget, else room for min(max_num_seqs, 4) sequences of max_model_len). Errors name the fix.
Result<int> ResolveNumBlocks(const EngineConfig& config, const KvLayout& layout,
                             int max_model_len);

}  // namespace kvserve
