// The engine's boundary types: what a caller submits (EngineRequest), what streams back
// (RequestOutput, one event per generated token and one at the end), and how requests end.
// Plain values; safe to move between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvserve/status.h"
#include "prefix/kv_cache_manager.h"
#include "prefix/kv_tier.h"
#include "quant/kv_dtype.h"
#include "sample/sampler.h"
#include "sample/sampling_params.h"
#include "sched/kv_eviction.h"
#include "sched/step_cost_model.h"
#include "structured/token_masker.h"
#include "util/strong_id.h"

namespace kvserve {

struct RequestIdTag {};
using RequestId = StrongId<RequestIdTag, int64_t>;

enum class FinishReason { kStop, kLength, kCancelled, kError };
const char* FinishReasonName(FinishReason r);  // "stop", "length", "cancelled", "error"

// Retention (prompt caching): when the request ends, the cached full blocks of its prompt's first
// `tokens` tokens are held (KvCacheManager::HoldPrefix / HoldExplicit).
struct KvHold {
  int tokens = 0;
  int64_t ttl_ms = 0;        // a renewable hold: each hit starts the TTL again
  bool tiers_only = false;   // kept by the lower tiers rather than RAM (where there are tiers)
  uint64_t explicit_id = 0;  // nonzero: explicit cache `explicit_id`, held until until_ms
  int64_t until_ms = 0;
};

struct EngineRequest {
  std::vector<TokenId> prompt;
  SamplingParams sampling;
  int max_tokens = 128;           // >= 1
  int n = 1;                      // parallel samples sharing the prompt's KV blocks
  std::vector<TokenId> stop_ids;  // generation ends after emitting one of these
  // Generation ends when the text contains one of these (non-empty) strings; the text streamed
  // out stops before it (or after it with include_stop_str_in_output). Text that could be the
  // start of a stop string is held back until it is known not to be.
  std::vector<std::string> stop_strings;
  bool include_stop_str_in_output = false;
  bool ignore_eos = false;        // if false, the tokenizer's end-of-generation ids stop too
  int32_t priority = 0;           // higher = admitted first, preempted and evicted last
  std::string cache_salt;         // requests share cached KV only with the same salt
  bool speculative = true;        // false: no speculative decoding for this request
  // Structured output: every sample's tokens stay inside this constraint (compiled by
  // structured::ConstraintCompiler for the engine's vocabulary); null = unconstrained.
  std::shared_ptr<structured::TokenMasker> constraint;
  // Eviction inside the sequence (sched/kv_eviction.h); nullopt = the engine's default
  // (EngineConfig::kv_eviction). With a policy, prompt + max_tokens may exceed max_model_len.
  std::optional<KvEvictionConfig> kv_eviction;
  // Scores the prompt: events carry prompt_logprobs, log p(prompt[i] | prompt[0, i)) for every
  // i >= 1, in order, as the prompt's chunks are computed (streaming perplexity).
  bool score_prompt = false;
  // With score_prompt: for prompt[i] with i >= this, events also carry the whole next-token
  // distribution it was scored with (prompt_distributions; -1: none). For measuring eviction
  // against the full cache (KL divergence, top-1 agreement).
  int prompt_distributions_from = -1;
  std::vector<KvHold> holds;
};

// Cached prompt tokens that one cache tier supplied ("ram", "disk", "redis").
struct TierTokens {
  std::string tier;
  int tokens = 0;
};

// Per-sample accounting, final when `finished`.
struct RequestMetrics {
  int prompt_tokens = 0;
  int cached_tokens = 0;        // prompt tokens found in the prefix cache at admission
                                // (set on the final event and on the sample's first token)
  // cached_tokens split by the tier each block came from; empty without lower tiers, else one
  // entry per configured tier, "ram" first.
  std::vector<TierTokens> cached_tokens_by_tier;
  int64_t computed_tokens = 0;  // tokens this sample ran through the model (recompute included)
  int generated_tokens = 0;
  // Arrival to the start of the first step that computed the request: time waiting for a slot,
  // for KV blocks, and for blocks loading from a lower tier. -1 when it never ran.
  double queue_seconds = -1;
  double ttft_seconds = 0;      // arrival to the request's first token
  double e2e_seconds = 0;       // arrival to this sample's end
  int draft_tokens = 0;         // speculative drafts verified for this sample
  int accepted_tokens = 0;      // of them, accepted
  int64_t evicted_tokens = 0;   // tokens evicted inside this sample (kv_eviction)
  // The request's holds, on its last event: tokens each one holds (-1: refused, with
  // hold_error saying why: an explicit hold past the retained share).
  std::vector<int> held_tokens;
  Status hold_error;
};

struct RequestOutput {
  RequestId id;
  int index = 0;                    // which parallel sample, 0..n-1
  std::vector<TokenId> new_tokens;  // usually one; empty on a final event without a token
  std::string text;                 // complete UTF-8 text that became available
  // One entry per token of new_tokens when the request's sampling params ask for logprobs.
  std::vector<SampleOutput> logprobs;
  // score_prompt: the log-probabilities of the next prompt tokens, continuing where the last
  // event's left off (the first is that of prompt[1]).
  std::vector<float> prompt_logprobs;
  // prompt_distributions_from: log-softmax rows (vocab floats each) of the same positions, for
  // those at or past it, in order.
  std::vector<float> prompt_distributions;
  bool finished = false;            // this sample ended
  bool request_finished = false;    // every sample ended: the last event of the request
  FinishReason finish_reason = FinishReason::kLength;
  int stop_string = -1;  // finished by stop_strings[stop_string]; -1: not by a stop string
  Status error;                     // set when finish_reason == kError
  RequestMetrics metrics;
};

// Speculative decoding's counters since start (names follow vLLM's spec_decode metrics).
struct SpecStats {
  bool enabled = false;
  int64_t num_drafts = 0;         // verifications of at least one draft
  int64_t num_draft_tokens = 0;
  int64_t num_accepted_tokens = 0;
  std::vector<int64_t> accepted_per_pos;  // [num_speculative_tokens]: drafts accepted at j
  // The adaptive policy's cost table now: seconds of a step of 1, 2, ..., num_speculative_tokens
  // + 1 rows (a decode, then one sequence verifying 1..k drafts). Empty without adaptive drafts.
  std::vector<double> step_seconds_by_rows;
  double calibration_seconds = 0;  // measuring the table at start-up took this long
};

// Jump-forward (structured output): the bytes a constraint forces after a sampled token, put
// into the next step as tokens (appended in force mode, verified as drafts in verify mode).
struct JumpForwardStats {
  int64_t num_jumps = 0;            // jumps: forced tokens appended, or verified
  int64_t num_forced_tokens = 0;    // tokens appended or proposed
  int64_t num_accepted_tokens = 0;  // kept: all appended ones; drafts the model's sample matched
};

// Eviction inside sequences (sched/kv_eviction.h) since start.
struct KvEvictionStats {
  int64_t evicted_tokens[kNumKvEvictionPolicies] = {};  // by KvEvictionPolicy (none stays 0)
  int64_t num_shifts = 0;          // evictions that re-rotated the keys after them
  int64_t num_compactions = 0;     // of those, h2o/snapkv evictions that compacted tokens
  int64_t compacted_slots = 0;     // (layer, head, slot) key/value vectors those moved
  int64_t shifted_blocks = 0;      // blocks whose keys were re-rotated
  int64_t copied_blocks = 0;       // shared blocks copied before being re-rotated
  double shift_seconds = 0;        // time spent copying and re-rotating
};

struct EngineStats {
  KvCacheStats kv;
  std::vector<TierStats> tiers;           // the lower tiers that are up, in lookup order
  std::vector<std::string> failed_tiers;  // configured but unusable (logged at start)
  KvDtype kv_k_dtype = KvDtype::kF16;
  KvDtype kv_v_dtype = KvDtype::kF16;
  bool kv_latent = false;  // MLA: one latent vector per token and layer, values read from it
  size_t kv_bytes_per_token = 0;   // all layers (the main blocks'), K and V, scales included
  int64_t kv_capacity_tokens = 0;  // tokens the whole cache holds (blocks * block_size)
  int kv_window_layers = 0;        // layers in the window group (kv_storage.h); 0 = none
  uint64_t kv_window_bytes = 0;    // the window group's blocks, all of them
  int64_t num_preemptions = 0;
  int num_running = 0;
  int num_waiting = 0;
  int64_t num_steps = 0;
  StepCostFit step_cost;  // the step cost model as fitted so far
  int prefill_cap = -1;   // prefill tokens the last step was held to (--max-itl-ms); -1 = none
  SpecStats spec;
  JumpForwardStats jump_forward;
  KvEvictionStats kv_eviction;
};

}  // namespace kvserve
