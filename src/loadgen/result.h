// The benchmark's result: per-request records summarised into latency statistics,
// throughput, goodput and cached-token counts; written as JSON (the schema is in docs/bench.md)
// and printed as a compact table.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvserve/status.h"
#include "loadgen/client.h"
#include "loadgen/server_metrics.h"
#include "loadgen/stats.h"

namespace kvserve::loadgen {

// Service-level objectives for goodput: a request counts when each set bound holds (0 = unset).
struct Slo {
  double ttft_ms = 0;
  double tpot_ms = 0;
  double e2e_ms = 0;
  bool any() const { return ttft_ms > 0 || tpot_ms > 0 || e2e_ms > 0; }
};

// "ttft:500,tpot:50" (milliseconds; keys ttft, tpot, e2e).
Result<Slo> ParseSlo(std::string_view text);

struct BenchSummary {
  int num_requests = 0;
  int completed = 0;
  int failed = 0;
  double duration_s = 0;
  long total_input_tokens = 0;   // reported prompt tokens of completed requests
  long total_output_tokens = 0;
  double request_throughput = 0;       // completed / duration
  double output_throughput = 0;        // output tokens / duration
  double total_token_throughput = 0;   // (input + output) / duration
  Summary ttft_ms, tpot_ms, itl_ms, e2e_ms;
  bool has_slo = false;
  int good_requests = 0;
  double goodput = 0;  // good requests / duration
  // Cached prompt tokens.
  long reported_cached_tokens = 0;   // sum over completed requests that reported a count
  int requests_reporting_cached = 0;
  long ideal_cached_tokens = 0;      // token granularity, see ideal_cache.h
  long ideal_cached_tokens_block = 0;  // at block_size granularity
  int block_size = 16;
  // Throughput over time: bucket i covers [i, i+1) * bucket_s from the first send.
  double bucket_s = 1;
  std::vector<double> output_tokens_per_s;
  std::vector<double> completed_per_s;
  std::vector<int> running;  // requests in flight at each bucket's end
  std::vector<std::string> errors;  // distinct error messages, at most 10
  // Request phases as the server measured them (from its /metrics), when it exports them.
  std::optional<ServerLatency> server;
};

// TPOT of one request: (e2e - ttft) / (output tokens - 1); < 0 when it has one token or fewer.
double TimePerOutputTokenMs(const RequestRecord& r);

// REQUIRES: records' ideal_cached_tokens filled in.
BenchSummary SummarizeRun(const std::vector<RequestRecord>& records, double duration_s,
                       const Slo& slo, int block_size);

// The full result: {"config": config, summary fields, "requests": [...]}.
nlohmann::json ResultToJson(const nlohmann::json& config, const BenchSummary& summary,
                            const std::vector<RequestRecord>& records);

// The compact table printed at the end of a run.
std::string FormatSummaryTable(const BenchSummary& summary);

}  // namespace kvserve::loadgen
