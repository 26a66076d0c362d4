// Server metrics in the Prometheus text exposition format, named after vLLM's so that existing
// dashboards work with the "kvserve:" prefix (see docs/server.md for the list).
//
// Contract: ServerMetrics is updated from any thread (HTTP workers); Render() reads a consistent
// enough snapshot (each counter and histogram is read atomically on its own) together with the
// engine's stats of its latest step.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"

namespace kvserve {

// A cumulative histogram with fixed upper bounds (+Inf implied).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  struct Snapshot {
    std::vector<uint64_t> cumulative;  // [bounds.size() + 1], the last is +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Take() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Writes metric families: HELP and TYPE once per family, then its samples. Every sample gets
// the common labels given at construction.
class PrometheusWriter {
 public:
  explicit PrometheusWriter(std::string common_labels);
  // `labels` are extra labels such as state="free" (already escaped), or empty.
  void Gauge(std::string_view name, std::string_view help, double value,
             std::string_view labels = {});
  void Counter(std::string_view name, std::string_view help, double value,
               std::string_view labels = {});
  void Histo(std::string_view name, std::string_view help, const Histogram& histogram);
  // A histogram from its bounds and per-bucket (not cumulative) counts, the last for +Inf.
  void HistoBuckets(std::string_view name, std::string_view help, std::span<const double> bounds,
                    std::span<const int64_t> buckets, double sum, uint64_t count,
                    std::string_view labels = {});
  std::string Take() { return std::move(out_); }

 private:
  void HistoCumulative(std::string_view name, std::string_view help,
                       std::span<const double> bounds, std::span<const uint64_t> cumulative,
                       double sum, uint64_t count, std::string_view labels);
  void Family(std::string_view name, std::string_view help, std::string_view type);
  void Sample(std::string_view name, std::string_view labels, double value);

  std::string common_;
  std::string out_;
  std::string last_family_;
};

// "a\"b" for a label value: backslash, double quote and newline escaped.
std::string EscapeLabelValue(std::string_view value);

struct ServerMetrics {
  ServerMetrics();

  // Once per finished engine request.
  void RecordFinished(FinishReason reason, int prompt_tokens, double e2e_seconds);

  std::atomic<int64_t> prompt_tokens{0};
  std::atomic<int64_t> generation_tokens{0};
  std::atomic<int64_t> rejected{0};
  std::array<std::atomic<int64_t>, 4> finished{};  // by FinishReason
  Histogram ttft;
  Histogram inter_token;
  Histogram e2e;
  // TTFT's two parts and what follows it, per finished request that ran: queue (arrival to its
  // first step) + prefill (to the first token) = TTFT; TTFT + decode (to the last token) = E2E.
  Histogram queue_time;
  Histogram prefill_time;
  Histogram decode_time;

  std::string Render(const EngineStats& stats, std::string_view model_name) const;
};

}  // namespace kvserve
