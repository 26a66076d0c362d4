#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "quant/kv_dtype.h"

namespace kvserve {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  std::lock_guard lock(mu_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

Histogram::Snapshot Histogram::Take() const {
  Snapshot s;
  std::lock_guard lock(mu_);
  s.cumulative.resize(counts_.size());
  uint64_t running = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    running += counts_[i];
    s.cumulative[i] = running;
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

PrometheusWriter::PrometheusWriter(std::string common_labels) : common_(std::move(common_labels)) {}

void PrometheusWriter::Family(std::string_view name, std::string_view help,
                              std::string_view type) {
  if (last_family_ == name) return;
  last_family_ = std::string(name);
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void PrometheusWriter::Sample(std::string_view name, std::string_view labels, double value) {
  std::string all = common_;
  if (!labels.empty()) {
    if (!all.empty()) all += ',';
    all += labels;
  }
  std::string number;
  if (std::isinf(value)) {
    number = value > 0 ? "+Inf" : "-Inf";
  } else if (value == std::floor(value) && std::fabs(value) < 1e15) {
    number = fmt::format("{}", static_cast<int64_t>(value));
  } else {
    number = fmt::format("{}", value);
  }
  if (all.empty()) {
    out_ += fmt::format("{} {}\n", name, number);
  } else {
    out_ += fmt::format("{}{{{}}} {}\n", name, all, number);
  }
}

void PrometheusWriter::Gauge(std::string_view name, std::string_view help, double value,
                             std::string_view labels) {
  Family(name, help, "gauge");
  Sample(name, labels, value);
}

void PrometheusWriter::Counter(std::string_view name, std::string_view help, double value,
                               std::string_view labels) {
  Family(name, help, "counter");
  Sample(name, labels, value);
}

void PrometheusWriter::Histo(std::string_view name, std::string_view help,
                             const Histogram& histogram) {
  const Histogram::Snapshot s = histogram.Take();
  HistoCumulative(name, help, histogram.bounds(), s.cumulative, s.sum, s.count, {});
}

void PrometheusWriter::HistoBuckets(std::string_view name, std::string_view help,
                                    std::span<const double> bounds,
                                    std::span<const int64_t> buckets, double sum, uint64_t count,
                                    std::string_view labels) {
  std::vector<uint64_t> cumulative(buckets.size());
  uint64_t running = 0;
  for (size_t i = 0; i < buckets.size(); ++i) cumulative[i] = running += static_cast<uint64_t>(buckets[i]);
  HistoCumulative(name, help, bounds, cumulative, sum, count, labels);
}

void PrometheusWriter::HistoCumulative(std::string_view name, std::string_view help,
                                       std::span<const double> bounds,
                                       std::span<const uint64_t> cumulative, double sum,
                                       uint64_t count, std::string_view labels) {
  Family(name, help, "histogram");
  const std::string bucket = fmt::format("{}_bucket", name);
  const std::string extra = labels.empty() ? std::string() : fmt::format("{},", labels);
  for (size_t i = 0; i < cumulative.size(); ++i) {
    const std::string le = i < bounds.size() ? fmt::format("le=\"{}\"", bounds[i]) : "le=\"+Inf\"";
    Sample(bucket, extra + le, static_cast<double>(cumulative[i]));
  }
  Sample(fmt::format("{}_sum", name), labels, sum);
  Sample(fmt::format("{}_count", name), labels, static_cast<double>(count));
}

namespace {

// Bucket bounds as vLLM uses them for the same histograms (seconds).
std::vector<double> TtftBounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
          5.0,   7.5,   10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> ItlBounds() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
          7.5,  10.0,  20.0, 40.0,  80.0};
}
std::vector<double> E2eBounds() {
  return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
          120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

constexpr std::array<const char*, 4> kReasonLabel = {"stop", "length", "abort", "error"};

std::string TierLabel(std::string_view tier) { return fmt::format("tier=\"{}\"", tier); }

// Per-tier families (label tier): the RAM tier from the prefix cache's own counters, the lower
// tiers from their TierStats. Each family lists every tier before the next family starts.
void RenderTiers(const EngineStats& stats, PrometheusWriter& w) {
  if (stats.tiers.empty() && stats.failed_tiers.empty()) return;
  const int64_t bs = stats.kv_capacity_tokens > 0 && stats.kv.num_blocks > 0
                         ? stats.kv_capacity_tokens / stats.kv.num_blocks
                         : 0;
  const auto each = [&](std::string_view name, std::string_view help, bool counter,
                        double ram_value, auto value_of) {
    const auto emit = [&](double v, std::string_view labels) {
      if (counter) {
        w.Counter(name, help, v, labels);
      } else {
        w.Gauge(name, help, v, labels);
      }
    };
    if (ram_value >= 0) emit(ram_value, TierLabel("ram"));
    for (const TierStats& t : stats.tiers) emit(static_cast<double>(value_of(t)), TierLabel(t.name));
  };
  const KvCacheStats& kv = stats.kv;
  w.Gauge("kvserve:kv_tier_up", "Whether a configured KV cache tier is in use (1) or off (0).", 1,
          TierLabel("ram"));
  for (const TierStats& t : stats.tiers) w.Gauge("kvserve:kv_tier_up", "", 1, TierLabel(t.name));
  for (const std::string& t : stats.failed_tiers) w.Gauge("kvserve:kv_tier_up", "", 0, TierLabel(t));
  each("kvserve:kv_tier_query_tokens_total",
       "Prompt tokens looked up in each tier (lower tiers: those the tiers above lacked).", true,
       static_cast<double>(kv.query_tokens), [&](const TierStats& t) { return t.query_blocks * bs; });
  each("kvserve:kv_tier_hit_tokens_total", "Prompt tokens each tier supplied.", true,
       static_cast<double>(kv.hit_tokens), [&](const TierStats& t) { return t.hit_blocks * bs; });
  each("kvserve:kv_tier_blocks_read_total", "Blocks read from a lower tier.", true, -1,
       [](const TierStats& t) { return t.blocks_read; });
  each("kvserve:kv_tier_bytes_read_total", "Bytes read from a lower tier.", true, -1,
       [](const TierStats& t) { return t.bytes_read; });
  each("kvserve:kv_tier_blocks_written_total", "Blocks written to a lower tier.", true, -1,
       [](const TierStats& t) { return t.blocks_written; });
  each("kvserve:kv_tier_bytes_written_total", "Bytes written to a lower tier.", true, -1,
       [](const TierStats& t) { return t.bytes_written; });
  each("kvserve:kv_tier_dropped_writes_total",
       "Blocks not written to a lower tier (full write queue, tier down).", true, -1,
       [](const TierStats& t) { return t.dropped_writes; });
  each("kvserve:kv_tier_entries", "Blocks a tier holds (-1 = unknown).", false,
       static_cast<double>(kv.num_tree_blocks), [](const TierStats& t) { return t.entries; });
  each("kvserve:kv_tier_bytes", "Bytes a tier holds (-1 = unknown).", false,
       static_cast<double>(kv.num_tree_blocks) * static_cast<double>(stats.kv_bytes_per_token) *
           static_cast<double>(bs),
       [](const TierStats& t) { return t.bytes_held; });
  for (int k = 0; k < kNumTierErrors; ++k) {
    for (const TierStats& t : stats.tiers) {
      w.Counter("kvserve:kv_tier_errors_total",
                "Lower-tier errors by kind (corrupt, io, timeout, connection).",
                static_cast<double>(t.errors[static_cast<size_t>(k)]),
                fmt::format("{},kind=\"{}\"", TierLabel(t.name), kTierErrorNames[k]));
    }
  }
  for (const TierStats& t : stats.tiers) {
    w.HistoBuckets("kvserve:kv_tier_load_seconds",
                   "Time to fetch and verify one run of blocks from a lower tier.",
                   kTierLatencyBounds, t.latency_buckets, t.latency_sum_seconds,
                   static_cast<uint64_t>(t.latency_count), TierLabel(t.name));
  }
}

}  // namespace

ServerMetrics::ServerMetrics()
    : ttft(TtftBounds()),
      inter_token(ItlBounds()),
      e2e(E2eBounds()),
      queue_time(TtftBounds()),
      prefill_time(TtftBounds()),
      decode_time(E2eBounds()) {}

void ServerMetrics::RecordFinished(FinishReason reason, int prompt, double e2e_seconds) {
  finished[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
  prompt_tokens.fetch_add(prompt, std::memory_order_relaxed);
  e2e.Observe(e2e_seconds);
}

std::string ServerMetrics::Render(const EngineStats& stats, std::string_view model_name) const {
  PrometheusWriter w(fmt::format("model_name=\"{}\"", EscapeLabelValue(model_name)));
  const KvCacheStats& kv = stats.kv;
  const double total = kv.num_blocks > 0 ? kv.num_blocks : 1;
  w.Gauge("kvserve:kv_cache_usage_perc", "KV-cache usage: blocks in use / all blocks (1 = 100%).",
          kv.num_in_use / total);
  w.Gauge("kvserve:kv_cache_blocks", "KV-cache blocks by state.", kv.num_free, "state=\"free\"");
  w.Gauge("kvserve:kv_cache_blocks", "", kv.num_cached, "state=\"cached\"");
  w.Gauge("kvserve:kv_cache_blocks", "", kv.num_in_use, "state=\"in_use\"");
  w.Gauge("kvserve:kv_cache_blocks_total", "All KV-cache blocks.", kv.num_blocks);
  w.Gauge("kvserve:kv_cache_bytes_per_token",
          "KV-cache bytes of one token over all layers (the main blocks' layers with a window "
          "group), K and V, scales included.",
          static_cast<double>(stats.kv_bytes_per_token));
  w.Gauge("kvserve:kv_cache_capacity_tokens", "Tokens the whole KV cache holds.",
          static_cast<double>(stats.kv_capacity_tokens));
  if (kv.num_window_blocks > 0) {  // sliding-window layers' own blocks (docs/kv_cache.md)
    w.Gauge("kvserve:kv_cache_window_blocks", "Window layers' KV blocks by state.", kv.window_free,
            "state=\"free\"");
    w.Gauge("kvserve:kv_cache_window_blocks", "", kv.window_cached, "state=\"cached\"");
    w.Gauge("kvserve:kv_cache_window_blocks", "", kv.window_in_use, "state=\"in_use\"");
    w.Gauge("kvserve:kv_cache_window_bytes", "Bytes of the window layers' KV blocks.",
            static_cast<double>(stats.kv_window_bytes));
  }
  w.Gauge("kvserve:cache_config_info", "KV-cache element types (value 1).", 1,
          fmt::format("cache_type_k=\"{}\",cache_type_v=\"{}\"", KvDtypeName(stats.kv_k_dtype),
                      KvDtypeName(stats.kv_v_dtype)));
  w.Counter("kvserve:prefix_cache_queries_total",
            "Prompt tokens looked up in the prefix cache.", static_cast<double>(kv.query_tokens));
  w.Counter("kvserve:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
            static_cast<double>(kv.hit_tokens));
  w.Counter("kvserve:prefix_cache_partial_block_hits_total",
            "Prompt tokens of prefix-cache hits that came from copying part of a cached block.",
            static_cast<double>(kv.partial_hit_tokens));
  w.Counter("kvserve:prefix_cache_evictions_total", "KV blocks evicted from the prefix cache.",
            static_cast<double>(kv.evicted_blocks));
  w.Gauge("kvserve:kv_cache_held_blocks",
          "KV blocks held by prompt-caching retention (cache_control, prompt_cache_retention, "
          "explicit caches).",
          kv.num_held);
  w.Gauge("kvserve:kv_cache_retained_share_blocks",
          "The most blocks retention may hold (--max-retained-fraction of the cache).",
          kv.max_held);
  w.Gauge("kvserve:explicit_caches", "Explicit caches (/v1/caches) whose hold is live.",
          kv.num_explicit_holds);
  w.Counter("kvserve:kv_tier_retained_blocks_total",
            "Held blocks handed to the lower tiers with their deadline (past the retained share, "
            "or evicted from RAM while held).",
            static_cast<double>(kv.tier_retained_blocks));
  w.Gauge("kvserve:num_requests_running", "Requests in the running batch.", stats.num_running);
  w.Gauge("kvserve:num_requests_waiting", "Requests waiting to be admitted.", stats.num_waiting);
  {
    const StepCostFit& f = stats.step_cost;
    const char* help =
        "The fitted step cost model: seconds per step, per decode row, per prefill "
        "token and per thousand tokens of decode context.";
    w.Gauge("kvserve:step_cost_model_seconds", help, f.base, "term=\"base\"");
    w.Gauge("kvserve:step_cost_model_seconds", help, f.per_decode_row, "term=\"decode_row\"");
    w.Gauge("kvserve:step_cost_model_seconds", help, f.per_prefill_token, "term=\"prefill_token\"");
    w.Gauge("kvserve:step_cost_model_seconds", help, f.per_decode_kilocontext,
            "term=\"decode_kilocontext\"");
    w.Gauge("kvserve:step_cost_model_error_ratio",
            "Mean |predicted - measured| / measured step time, each predicted before it ran.",
            f.mean_relative_error);
    w.Gauge("kvserve:step_cost_model_ready", "1 once the model has seen enough varied steps.",
            f.ready ? 1 : 0);
    w.Counter("kvserve:step_cost_model_samples_total", "Steps the model was fitted on.",
              static_cast<double>(f.samples));
    w.Gauge("kvserve:step_prefill_cap_tokens",
            "Prefill tokens the last step was held to for --max-itl-ms (-1: not held).",
            stats.prefill_cap);
  }
  w.Counter("kvserve:num_preemptions_total", "Requests preempted for lack of KV blocks.",
            static_cast<double>(stats.num_preemptions));
  for (KvEvictionPolicy policy : {KvEvictionPolicy::kWindow, KvEvictionPolicy::kSinks,
                                  KvEvictionPolicy::kH2O, KvEvictionPolicy::kSnapKV}) {
    w.Counter("kvserve:kv_evicted_tokens_total",
              "Tokens evicted inside sequences (--kv-eviction), by policy; recomputation after a "
              "preemption counts again.",
              static_cast<double>(stats.kv_eviction.evicted_tokens[static_cast<int>(policy)]),
              fmt::format("policy=\"{}\"", KvEvictionPolicyName(policy)));
  }
  w.Counter("kvserve:kv_shifts_total",
            "Evictions inside sequences, each re-rotating the keys after what it dropped.",
            static_cast<double>(stats.kv_eviction.num_shifts));
  w.Counter("kvserve:kv_compactions_total",
            "Evictions inside sequences that chose tokens per layer and head by attention "
            "(h2o, snapkv) and compacted the survivors.",
            static_cast<double>(stats.kv_eviction.num_compactions));
  w.Counter("kvserve:kv_compacted_vectors_total",
            "Key/value vectors (one layer, head and token) a compaction moved.",
            static_cast<double>(stats.kv_eviction.compacted_slots));
  w.Counter("kvserve:kv_shifted_blocks_total", "KV blocks whose keys a shift re-rotated.",
            static_cast<double>(stats.kv_eviction.shifted_blocks));
  w.Counter("kvserve:kv_shift_copied_blocks_total",
            "Shared KV blocks copied before a shift edited them (copy-on-write).",
            static_cast<double>(stats.kv_eviction.copied_blocks));
  w.Counter("kvserve:kv_shift_seconds_total", "Time spent on evictions inside sequences.",
            stats.kv_eviction.shift_seconds);
  if (stats.spec.enabled) {
    w.Counter("kvserve:spec_decode_num_drafts_total",
              "Speculative verifications: one per sequence and step that carried drafts.",
              static_cast<double>(stats.spec.num_drafts));
    w.Counter("kvserve:spec_decode_num_draft_tokens_total", "Draft tokens verified.",
              static_cast<double>(stats.spec.num_draft_tokens));
    w.Counter("kvserve:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
              static_cast<double>(stats.spec.num_accepted_tokens));
    for (size_t j = 0; j < stats.spec.accepted_per_pos.size(); ++j) {
      w.Counter("kvserve:spec_decode_num_accepted_tokens_per_pos_total",
                "Draft tokens accepted at each draft position (0 = the first draft).",
                static_cast<double>(stats.spec.accepted_per_pos[j]),
                fmt::format("position=\"{}\"", j));
    }
  }
  w.Counter("kvserve:prompt_tokens_total", "Prompt tokens of finished requests.",
            static_cast<double>(prompt_tokens.load()));
  w.Counter("kvserve:generation_tokens_total", "Generated tokens.",
            static_cast<double>(generation_tokens.load()));
  for (size_t i = 0; i < kReasonLabel.size(); ++i) {
    w.Counter("kvserve:request_success_total", "Finished requests by reason.",
              static_cast<double>(finished[i].load()),
              fmt::format("finished_reason=\"{}\"", kReasonLabel[i]));
  }
  w.Counter("kvserve:requests_rejected_total", "Requests refused with 503 for a full queue.",
            static_cast<double>(rejected.load()));
  w.Histo("kvserve:time_to_first_token_seconds", "Time from arrival to the first token.", ttft);
  w.Histo("kvserve:inter_token_latency_seconds", "Time between two tokens of one sample.",
          inter_token);
  w.Histo("kvserve:e2e_request_latency_seconds", "Time from arrival to the last token.", e2e);
  w.Histo("kvserve:request_queue_time_seconds",
          "Time from arrival to the first step that computed the request (waiting for a slot, "
          "KV blocks or a tier load).",
          queue_time);
  w.Histo("kvserve:request_prefill_time_seconds",
          "Time from the first step that computed the request to its first token.", prefill_time);
  w.Histo("kvserve:request_decode_time_seconds", "Time from the first token to the last.",
          decode_time);
  RenderTiers(stats, w);
  return w.Take();
}

}  // namespace kvserve
