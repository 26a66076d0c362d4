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
  Family(name, help, "histogram");
  const Histogram::Snapshot s = histogram.Take();
  const std::vector<double>& bounds = histogram.bounds();
  const std::string bucket = fmt::format("{}_bucket", name);
  for (size_t i = 0; i < s.cumulative.size(); ++i) {
    const std::string le = i < bounds.size() ? fmt::format("le=\"{}\"", bounds[i]) : "le=\"+Inf\"";
    Sample(bucket, le, static_cast<double>(s.cumulative[i]));
  }
  Sample(fmt::format("{}_sum", name), {}, s.sum);
  Sample(fmt::format("{}_count", name), {}, static_cast<double>(s.count));
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

}  // namespace

ServerMetrics::ServerMetrics() : ttft(TtftBounds()), inter_token(ItlBounds()), e2e(E2eBounds()) {}

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
          "KV-cache bytes of one token over all layers, K and V, scales included.",
          static_cast<double>(stats.kv_bytes_per_token));
  w.Gauge("kvserve:kv_cache_capacity_tokens", "Tokens the whole KV cache holds.",
          static_cast<double>(stats.kv_capacity_tokens));
  w.Gauge("kvserve:cache_config_info", "KV-cache element types (value 1).", 1,
          fmt::format("cache_type_k=\"{}\",cache_type_v=\"{}\"", KvDtypeName(stats.kv_k_dtype),
                      KvDtypeName(stats.kv_v_dtype)));
  w.Counter("kvserve:prefix_cache_queries_total",
            "Prompt tokens looked up in the prefix cache.", static_cast<double>(kv.query_tokens));
  w.Counter("kvserve:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
            static_cast<double>(kv.hit_tokens));
  w.Counter("kvserve:prefix_cache_evictions_total", "KV blocks evicted from the prefix cache.",
            static_cast<double>(kv.evicted_blocks));
  w.Gauge("kvserve:num_requests_running", "Requests in the running batch.", stats.num_running);
  w.Gauge("kvserve:num_requests_waiting", "Requests waiting to be admitted.", stats.num_waiting);
  w.Counter("kvserve:num_preemptions_total", "Requests preempted for lack of KV blocks.",
            static_cast<double>(stats.num_preemptions));
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
  return w.Take();
}

}  // namespace kvserve
