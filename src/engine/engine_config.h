// EngineConfig: the knobs of the serving engine (continuous batching over the paged, prefix-
// cached KV). The command-line flags map onto these one to one.
#pragma once

#include <cstdint>
#include <functional>

#include <string>

#include "events/kv_events_config.h"
#include "prefix/eviction_policy.h"
#include "prefix/tiered_store.h"
#include "quant/kv_dtype.h"
#include "sched/kv_eviction.h"
#include "spec/spec_config.h"

namespace kvserve {

// Lower tiers of the KV cache (docs/kv_tiers.md). Empty path and URL: RAM only.
struct KvTierConfig {
  std::string disk_path;          // --kv-disk-path: a directory that survives restarts
  uint64_t disk_size_bytes = 0;   // --kv-disk-size; 0 = 10% of the free space, capped
  std::string redis_url;          // --kv-redis-url: redis://HOST:PORT[/DB], shared by replicas
  int redis_ttl_seconds = 0;      // --kv-redis-ttl; 0 = keys do not expire
  int redis_timeout_ms = 200;     // --kv-redis-timeout-ms
  TierWritePolicy write_policy = TierWritePolicy::kWriteThrough;  // --kv-disk-write-policy
  uint64_t max_queued_write_bytes = 256ull << 20;  // writes waiting for the tier writer

  bool any() const { return !disk_path.empty() || !redis_url.empty(); }
};

struct EngineConfig {
  int num_threads = 0;                // compute threads; 0 = one per hardware thread
  int poll_us = -1;                   // --poll-us: compute threads' spin; -1 = the pool's default
  int block_size = 16;                // tokens per KV block
  KvDtype k_dtype = KvDtype::kF16;
  KvDtype v_dtype = KvDtype::kF16;
  int max_model_len = 0;              // prompt + generated per request; 0 = model context
  uint64_t kv_cache_memory_bytes = 0;  // KV budget (--kv-cache-memory); 0 = not set
  int num_blocks = 0;                 // overrides the budget when > 0
  bool enable_prefix_caching = true;
  double max_itl_ms = 0;              // --max-itl-ms: inter-token latency target; 0 = off
  int min_prefill_chunk = 32;         // --min-prefill-chunk: least prefill a held step carries
  bool partial_block_hits = true;     // token-granular hits (--no-partial-block-hits turns off)
  // Sliding-window layers keep their K/V in a pool of their own, sized for the running
  // sequences' windows (docs/kv_cache.md, "Window layers"); --no-kv-windows keeps them in the
  // main blocks like the other layers. Not with lower tiers.
  bool kv_windows = true;
  int num_window_blocks = 0;          // the window group's blocks when > 0 (else sized as above)
  int max_num_seqs = 64;              // running sequences per step
  int max_num_batched_tokens = 0;     // tokens per step; 0 = the model's max batch
  EvictionPolicyKind eviction_policy = EvictionPolicyKind::kLru;
  double max_pinned_fraction = 0.25;  // share of the cache Pin may hold
  double max_retained_fraction = 0.5;  // --max-retained-fraction: share that holds may keep
  // Milliseconds since the Unix epoch for hold deadlines (retention); null = the system clock.
  std::function<int64_t()> clock_ms;
  KvTierConfig tiers;
  // The KV event stream in vLLM's format (--kv-events-config, docs/kv_events.md); off by default.
  KvEventsConfig kv_events;
  SpecConfig spec;                    // --speculative-config (docs/speculative.md); off by default
  // Jump-forward for structured output (--no-jump-forward turns it off): what a constraint
  // forces after a sampled token, up to max_jump_forward_tokens, goes into the next step at once.
  //   kForce: appended as the tokenizer writes it (re-tokenized across the boundary with the
  //     sampled token), computed as a prefill chunk; the same text, and the same tokens wherever
  //     the model itself would have written that canonical tokenization.
  //   kVerify: carried as drafts and verified: token for token what decoding gives, faster only
  //     where the model agrees with the tokenization.
  enum class JumpForwardMode { kForce, kVerify };
  bool jump_forward = true;
  JumpForwardMode jump_forward_mode = JumpForwardMode::kForce;
  int max_jump_forward_tokens = 32;
  // Eviction inside a sequence for requests that do not choose (--kv-eviction, --kv-budget,
  // --kv-sink-tokens, --kv-evict-batch; docs/kv_eviction.md). Off by default.
  KvEvictionConfig kv_eviction;
};

}  // namespace kvserve
