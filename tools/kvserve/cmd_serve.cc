// kvserve serve: the OpenAI-compatible HTTP server (see docs/server.md).
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

#include "commands.h"
#include "events/kv_events_config.h"
#include "engine_options.h"
#include "prefix/eviction_policy.h"
#include "quant/kv_dtype.h"
#include "spec/spec_config.h"
#include "server/server.h"
#include "util/byte_size.h"
#include "util/log.h"

namespace kvserve::cli {
namespace {

struct ServeOptions {
  ServeConfig config;
  std::string kv_cache_memory;
  std::string kv_cache_dtype;  // shorthand for both types
  std::string cache_type_k;
  std::string cache_type_v;
  std::string eviction_policy = "lru";
  std::string max_body = "8MiB";
  std::string max_response = "64MiB";
  bool enable_prefix_caching = false;
  bool no_prefix_caching = false;
  bool no_partial_block_hits = false;
  bool no_kv_windows = false;
  JumpForwardOptions jump_forward;
  KvEvictionOptions kv_eviction;
  std::string log_level = "info";
  std::string log_format = "text";
  std::string kv_disk_size;
  std::string kv_disk_write_policy = "write-through";
  std::string kv_tier_queue = "256MiB";
  std::string speculative_config;
  std::string kv_events_config;
  std::string kv_events_hash_seed;
  std::string kv_events_block_hashes = "int";
  std::string max_header = "16KiB";
};

void RunServe(ServeOptions& o) {
  ServeConfig& c = o.config;
  if (c.http.api_keys.empty()) {
    if (const char* key = std::getenv("KVSERVE_API_KEY")) c.http.api_keys.push_back(key);
  }
  if (!o.kv_cache_memory.empty()) {
    auto bytes = ParseByteSize(o.kv_cache_memory);
    if (!bytes.ok()) Fail("--kv-cache-memory: " + bytes.status().message());
    c.engine.kv_cache_memory_bytes = *bytes;
  }
  auto body = ParseByteSize(o.max_body);
  if (!body.ok()) Fail("--max-body-bytes: " + body.status().message());
  c.http.server.limits.max_body_bytes = *body;
  auto header = ParseByteSize(o.max_header);
  if (!header.ok()) Fail("--max-header-bytes: " + header.status().message());
  if (*header < 256 || *header > (uint64_t{1} << 30)) {
    Fail("--max-header-bytes must be between 256 bytes and 1GiB");
  }
  c.http.server.limits.max_header_bytes = static_cast<size_t>(*header);
  const http::ServerConfig& hc = c.http.server;
  for (const auto& [flag, value] :
       {std::pair<const char*, double>{"--header-timeout", hc.header_timeout_s},
        {"--read-timeout", hc.read_timeout_s},
        {"--write-timeout", hc.write_timeout_s},
        {"--idle-timeout", hc.idle_timeout_s},
        {"--worker-idle-timeout", hc.worker_idle_timeout_s}}) {
    if (!(value > 0) || value > 86400) Fail(fmt::format("{} must be in (0, 86400] seconds", flag));
  }
  if (!(hc.shutdown_timeout_s >= 0) || hc.shutdown_timeout_s > 3600) {
    Fail("--shutdown-timeout must be in [0, 3600] seconds");
  }
  if (hc.backlog < 1) Fail("--backlog must be >= 1");
  if (hc.max_connections < 1) Fail("--max-connections must be >= 1");
  if (hc.limits.max_header_fields < 1) Fail("--max-header-fields must be >= 1");
  auto response = ParseByteSize(o.max_response);
  if (!response.ok()) Fail("--max-response-bytes: " + response.status().message());
  if (*response == 0) Fail("--max-response-bytes must be more than 0");
  c.max_response_bytes = *response;
  // --kv-cache-dtype sets both types; --cache-type-k / --cache-type-v override one.
  const auto dtype = [](const std::string& name, std::string_view flag, KvDtype fallback) {
    if (name.empty()) return fallback;
    auto d = ParseKvDtypeOrError(name, flag);
    if (!d.ok()) Fail(d.status().message());
    return *d;
  };
  const KvDtype both = dtype(o.kv_cache_dtype, "--kv-cache-dtype", KvDtype::kF16);
  c.engine.k_dtype = dtype(o.cache_type_k, "--cache-type-k", both);
  c.engine.v_dtype = dtype(o.cache_type_v, "--cache-type-v", both);
  auto policy = ParseEvictionPolicy(o.eviction_policy);
  if (!policy.ok()) Fail("--eviction-policy: " + policy.status().message());
  c.engine.eviction_policy = *policy;
  if (o.enable_prefix_caching && o.no_prefix_caching) {
    Fail("--enable-prefix-caching and --no-prefix-caching exclude each other");
  }
  c.engine.enable_prefix_caching = !o.no_prefix_caching;
  c.engine.partial_block_hits = !o.no_partial_block_hits;
  c.engine.kv_windows = !o.no_kv_windows;
  ApplyJumpForwardOptions(o.jump_forward, &c.engine);
  c.engine.kv_eviction = KvEvictionFromOptions(o.kv_eviction);
  const std::optional<LogLevel> level = ParseLogLevel(o.log_level);
  if (!level) Fail("--log-level must be debug, info, warning, error or off");
  SetLogLevel(*level);
  const std::optional<LogFormat> format = ParseLogFormat(o.log_format);
  if (!format) Fail("--log-format must be text or json");
  SetLogFormat(*format);
  if (!o.kv_disk_size.empty()) {
    auto bytes = ParseByteSize(o.kv_disk_size);
    if (!bytes.ok()) Fail("--kv-disk-size: " + bytes.status().message());
    c.engine.tiers.disk_size_bytes = *bytes;
  }
  auto write_policy = ParseTierWritePolicy(o.kv_disk_write_policy);
  if (!write_policy.ok()) Fail("--kv-disk-write-policy: " + write_policy.status().message());
  c.engine.tiers.write_policy = *write_policy;
  auto queue = ParseByteSize(o.kv_tier_queue);
  if (!queue.ok()) Fail("--kv-tier-queue-bytes: " + queue.status().message());
  c.engine.tiers.max_queued_write_bytes = *queue;
  if (c.engine.tiers.redis_ttl_seconds < 0) Fail("--kv-redis-ttl must be >= 0");
  if (c.engine.tiers.redis_timeout_ms < 1) Fail("--kv-redis-timeout-ms must be >= 1");
  if (!o.speculative_config.empty()) {
    auto spec = ParseSpecConfig(o.speculative_config);
    if (!spec.ok()) Fail("--speculative-config: " + spec.status().message());
    c.engine.spec = *spec;
  }
  if (!o.kv_events_config.empty()) {
    auto events = ParseKvEventsConfig(o.kv_events_config);
    if (!events.ok()) Fail("--kv-events-config: " + events.status().message());
    c.engine.kv_events = *events;
  }
  c.engine.kv_events.hash_seed = o.kv_events_hash_seed;
  auto hash_form = ParseBlockHashForm(o.kv_events_block_hashes);
  if (!hash_form.ok()) Fail("--kv-events-block-hashes: " + hash_form.status().message());
  c.engine.kv_events.hash_form = *hash_form;
  if (c.http.server.port < 0 || c.http.server.port > 65535) Fail("--port must be in [0, 65535]");
  if (c.max_queued_requests < 0) Fail("--max-queued-requests must be >= 0");
  if (!(c.engine.max_retained_fraction >= 0 && c.engine.max_retained_fraction <= 1)) {
    Fail("--max-retained-fraction must be in [0, 1]");
  }
  const Status s = Serve(c);
  if (!s.ok()) Fail(s.ToString());
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  ServeConfig& c = o->config;
  CLI::App* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible HTTP API");
  cmd->add_option("-m,--model", c.model_path, "GGUF model file (default: the embedded model)");
  cmd->add_option("--host", c.http.server.host, "Address to bind (default 127.0.0.1)");
  cmd->add_option("--port", c.http.server.port, "TCP port; 0 = any free port (default 8080)");
  cmd->add_option("--api-key", c.http.api_keys,
                  "Require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize "
                  "(default: env KVSERVE_API_KEY); repeat for several tenants, whose cached KV "
                  "and explicit caches are kept apart");
  cmd->add_option("--max-retained-fraction", c.engine.max_retained_fraction,
                  "Share of the KV cache that prompt-caching holds (cache_control, "
                  "prompt_cache_retention, /v1/caches) may keep (default 0.5)");
  cmd->add_flag("--debug-clock", c.debug_clock,
                "For tests: POST /debug/clock {\"advance_seconds\": N} moves the clock of "
                "cache TTLs forward");
  cmd->add_option("--served-model-name", c.served_model_name,
                  "Model id in the API (default: the GGUF's general.name)");
  cmd->add_option("--chat-template", c.chat_template,
                  "Chat template name (default: the model's, else chatml)");
  cmd->add_option("-t,--threads", c.engine.num_threads, "Compute threads (default: all)");
  AddPollOption(cmd, c.engine.poll_us);
  AddMlaOption(cmd, c.mla_form);
  cmd->add_option("--log-level", o->log_level,
                  "debug, info (default: also one access line per request), warning (4xx and "
                  "worse), error or off");
  cmd->add_option("--log-format", o->log_format, "text (default) or json (one object per line)");
  cmd->add_option("--kv-cache-memory", o->kv_cache_memory, "KV cache budget, e.g. 2GiB");
  cmd->add_option("--num-blocks", c.engine.num_blocks, "KV blocks (overrides --kv-cache-memory)");
  cmd->add_option("--block-size", c.engine.block_size, "Tokens per KV block (default 16)");
  cmd->add_option("--kv-cache-dtype", o->kv_cache_dtype,
                  "KV cache type of keys and values (shorthand for both flags below)");
  cmd->add_option("--cache-type-k", o->cache_type_k, KvCacheTypeHelp("keys"));
  cmd->add_option("--cache-type-v", o->cache_type_v, KvCacheTypeHelp("values"));
  cmd->add_option("--max-model-len", c.engine.max_model_len,
                  "Prompt + completion tokens per request (default: the model's context)");
  cmd->add_flag("--enable-prefix-caching", o->enable_prefix_caching,
                "Share cached KV across requests (default)");
  cmd->add_flag("--no-prefix-caching", o->no_prefix_caching, "Turn automatic prefix caching off");
  cmd->add_flag("--no-kv-windows", o->no_kv_windows,
                "Keep sliding-window layers' K/V in the main blocks (no window group)");
  cmd->add_option("--kv-window-blocks", c.engine.num_window_blocks,
                  "Blocks of the sliding-window layers' own pool (default: sized for the "
                  "running sequences' windows, at most half the KV memory)");
  cmd->add_flag("--no-partial-block-hits", o->no_partial_block_hits,
                "Reuse whole cached blocks only (default: a prompt that goes on into a cached "
                "block reuses the tokens it shares with it)");
  cmd->add_option("--max-num-seqs", c.engine.max_num_seqs, "Sequences running per step (default 64)");
  c.engine.max_num_batched_tokens = 512;
  cmd->add_option("--max-num-batched-tokens", c.engine.max_num_batched_tokens,
                  "Tokens per engine step (default 512)");
  cmd->add_option("--max-itl-ms", c.engine.max_itl_ms,
                  "Inter-token latency target: while requests decode, each step carries only the "
                  "prefill its fitted cost model says fits (default 0 = off)")
      ->check(CLI::Range(0.0, 600000.0));
  cmd->add_option("--min-prefill-chunk", c.engine.min_prefill_chunk,
                  "With --max-itl-ms: the least prefill a decoding step carries, so prompts keep "
                  "moving whatever the target (default 32)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--eviction-policy", o->eviction_policy, "lru, lfu or priority");
  cmd->add_option("--speculative-config", o->speculative_config,
                  "Speculative decoding as JSON, e.g. '{\"method\": \"ngram\", "
                  "\"num_speculative_tokens\": 5}' or '{\"method\": \"draft_model\", \"model\": "
                  "\"draft.gguf\"}' (docs/speculative.md; default: off)");
  cmd->add_option("--kv-disk-path", c.engine.tiers.disk_path,
                  "Directory of the disk KV tier: blocks survive restarts (default: none)");
  cmd->add_option("--kv-disk-size", o->kv_disk_size,
                  "Disk tier capacity, e.g. 20GiB (default: 10% of the free space, at most 64GiB)");
  cmd->add_option("--kv-disk-write-policy", o->kv_disk_write_policy,
                  "write-through (blocks are written as they are cached) or write-back (as RAM "
                  "evicts them)");
  cmd->add_option("--kv-redis-url", c.engine.tiers.redis_url,
                  "Redis KV tier shared by replicas: redis://HOST:PORT[/DB] (default: none)");
  cmd->add_option("--kv-redis-ttl", c.engine.tiers.redis_ttl_seconds,
                  "Seconds a block stays in Redis; 0 = no expiry (default 0)");
  cmd->add_option("--kv-redis-timeout-ms", c.engine.tiers.redis_timeout_ms,
                  "Redis connect and command timeout; past it the tier is bypassed with back-off "
                  "(default 200)");
  cmd->add_option("--kv-tier-queue-bytes", o->kv_tier_queue,
                  "Block records waiting to be written to the lower tiers; more are dropped "
                  "(default 256MiB)");
  cmd->add_option("--kv-events-config", o->kv_events_config,
                  "Publish the prefix cache's block events in vLLM's format over ZeroMQ, as "
                  "JSON with vLLM's keys, e.g. '{\"enable_kv_cache_events\": true, "
                  "\"publisher\": \"zmq\", \"endpoint\": \"tcp://*:5557\", "
                  "\"replay_endpoint\": \"tcp://*:5558\", \"topic\": \"kv@pod@model\"}' "
                  "(docs/kv_events.md; default: off)");
  cmd->add_option("--kv-events-hash-seed", o->kv_events_hash_seed,
                  "Seed of the block hashes in KV events, as vLLM's PYTHONHASHSEED; routers "
                  "(llm-d's hashSeed) must use the same (default: \"\")");
  cmd->add_option("--kv-events-block-hashes", o->kv_events_block_hashes,
                  "int: block hashes in KV events as 64-bit integers, as vLLM sends them by "
                  "default; bytes: the 32-byte digests (default int)");
  cmd->add_option("--max-queued-requests", c.max_queued_requests,
                  "Requests that may wait beyond the running ones; more get 503 (default 256)");
  cmd->add_option("--max-body-bytes", o->max_body, "Largest request body (default 8MiB)");
  AddJumpForwardOptions(cmd, o->jump_forward);
  AddKvEvictionOptions(cmd, o->kv_eviction);
  cmd->add_option("--structured-compile-timeout-ms", c.structured_compile_timeout_ms,
                  "Time limit for compiling one structured-output constraint (JSON schema, "
                  "regex, grammar); over it the request gets a 400 (default 10000)")
      ->check(CLI::Range(1, 600000));
  cmd->add_option("--max-response-bytes", o->max_response,
                  "Largest response: requests that would certainly produce more are refused, "
                  "streams are ended when they reach it (default 64MiB)");
  http::ServerConfig& h = c.http.server;
  cmd->add_option("--header-timeout", h.header_timeout_s,
                  "Seconds from a request's first byte to the end of its headers; later is a "
                  "408 (default 10)");
  cmd->add_option("--read-timeout", h.read_timeout_s,
                  "Seconds from a request's first byte to the end of its body; later is a 408 "
                  "(default 30)");
  cmd->add_option("--write-timeout", h.write_timeout_s,
                  "Seconds a client may take to accept one write of a response before it is "
                  "dropped (default 30)");
  cmd->add_option("--idle-timeout", h.idle_timeout_s,
                  "Seconds a connection may wait with no request in progress (default 5)");
  cmd->add_option("--worker-idle-timeout", h.worker_idle_timeout_s,
                  "Seconds a worker thread (one per request being served) waits for the next "
                  "request before it ends; a burst's threads do not stay (default 30)");
  cmd->add_option("--shutdown-timeout", h.shutdown_timeout_s,
                  "On SIGTERM or SIGINT, seconds that running requests get to finish before "
                  "their connections are closed (default 5)");
  cmd->add_option("--backlog", h.backlog,
                  "Pending connections the kernel may queue for accept (default 1024; capped "
                  "by net.core.somaxconn)");
  cmd->add_option("--max-connections", h.max_connections,
                  "Open connections; beyond them a new one gets 503 with Retry-After and is "
                  "closed (default 4096)");
  cmd->add_option("--max-header-bytes", o->max_header,
                  "Largest request line plus headers; more is a 431 (default 16KiB)");
  cmd->add_option("--max-header-fields", h.limits.max_header_fields,
                  "Most header fields in a request; more is a 431 (default 100)");
  h.num_workers = 0;
  cmd->callback([o] { RunServe(*o); });
}

}  // namespace kvserve::cli
