// What the server itself says about a run: `kvserve bench` scrapes the server's Prometheus
// /metrics before and after the run and reports, from the difference of the request-phase
// histograms, how long requests waited in the queue, prefilled and decoded inside the server.
// kvserve exports kvserve:request_{queue,prefill,decode}_time_seconds; vLLM exports the same
// histograms under vllm:. Servers without them (llama.cpp's) get no such section.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvserve::loadgen {

// One sample of a text exposition: metric name, labels, value.
struct MetricSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses the Prometheus text format (version 0.0.4). Comment lines, blank lines and lines that
// do not parse are skipped: a scrape is best effort.
std::vector<MetricSample> ParsePrometheusText(std::string_view text);

// A histogram summed over all its label sets other than `le`.
struct Histogram {
  std::vector<std::pair<double, double>> buckets;  // (upper bound, cumulative count), ascending
  double sum = 0;
  double count = 0;
};

// The histogram `name` (without _bucket/_sum/_count) in `samples`; nullopt when absent.
std::optional<Histogram> FindHistogram(const std::vector<MetricSample>& samples,
                                       std::string_view name);

// after - before, bucket by bucket (buckets are matched by bound; before may be missing).
Histogram Subtract(const Histogram& after, const std::optional<Histogram>& before);

// The q-quantile (q in [0, 1]) estimated as Prometheus's histogram_quantile does: linear
// interpolation inside the bucket that holds the rank, the lowest bucket starting at 0, and
// the highest finite bound when the rank falls in the +Inf bucket. 0 for an empty histogram.
double HistogramQuantile(const Histogram& h, double q);

// One request phase as the server measured it over the run (milliseconds).
struct ServerPhase {
  std::string name;  // "queue", "prefill", "decode"
  double count = 0;  // requests observed in the run
  double mean_ms = 0, p50_ms = 0, p90_ms = 0;
};

struct ServerLatency {
  std::string prefix;  // "kvserve" or "vllm"
  std::vector<ServerPhase> phases;
};

// The phases between two scrapes; nullopt when the second has none of the known histograms.
std::optional<ServerLatency> ServerLatencyBetween(const std::vector<MetricSample>& before,
                                                  const std::vector<MetricSample>& after);

}  // namespace kvserve::loadgen
