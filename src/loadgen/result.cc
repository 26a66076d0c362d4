#include "loadgen/result.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "loadgen/ideal_cache.h"

namespace kvserve::loadgen {

using nlohmann::json;

Result<Slo> ParseSlo(std::string_view text) {
  Slo slo;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(pos, end - pos);
    const size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      return InvalidArgument(fmt::format("--slo item '{}' is not key:ms (e.g. ttft:500,tpot:50)", item));
    }
    const std::string key(item.substr(0, colon));
    const std::string value(item.substr(colon + 1));
    char* rest = nullptr;
    const double ms = std::strtod(value.c_str(), &rest);
    if (value.empty() || *rest != '\0' || !(ms > 0) || std::isinf(ms)) {
      return InvalidArgument(fmt::format("--slo {}: '{}' is not a positive number of ms", key, value));
    }
    if (key == "ttft") {
      slo.ttft_ms = ms;
    } else if (key == "tpot") {
      slo.tpot_ms = ms;
    } else if (key == "e2e") {
      slo.e2e_ms = ms;
    } else {
      return InvalidArgument(fmt::format("--slo: unknown key '{}' (use ttft, tpot, e2e)", key));
    }
    pos = end + 1;
  }
  return slo;
}

double TimePerOutputTokenMs(const RequestRecord& r) {
  if (r.completion_tokens <= 1 || r.first_token_s < 0) return -1;
  return (r.done_s - r.first_token_s) * 1000.0 / (r.completion_tokens - 1);
}

namespace {

void FillTimeline(const std::vector<RequestRecord>& records, double start, double duration_s,
                  BenchSummary& s) {
  // About 60 buckets, at least 100 ms each.
  s.bucket_s = std::max(0.1, duration_s / 60.0);
  const size_t n = static_cast<size_t>(std::ceil(duration_s / s.bucket_s)) + 1;
  s.output_tokens_per_s.assign(n, 0);
  s.completed_per_s.assign(n, 0);
  s.running.assign(n, 0);
  auto bucket = [&](double t) {
    return std::min(n - 1, static_cast<size_t>(std::max(0.0, (t - start) / s.bucket_s)));
  };
  for (const RequestRecord& r : records) {
    if (!r.sent) continue;
    if (r.ok) {
      // Tokens per chunk: the reported count spread over the chunks that carried text.
      const double per_chunk = r.chunk_s.empty()
                                   ? 0
                                   : static_cast<double>(std::max(0, r.completion_tokens)) /
                                         static_cast<double>(r.chunk_s.size());
      for (double t : r.chunk_s) s.output_tokens_per_s[bucket(t)] += per_chunk / s.bucket_s;
      s.completed_per_s[bucket(r.done_s)] += 1.0 / s.bucket_s;
    }
    for (size_t b = 0; b < n; ++b) {
      const double end = start + static_cast<double>(b + 1) * s.bucket_s;
      if (r.sent_s < end && r.done_s >= end) ++s.running[b];
    }
  }
}

}  // namespace

BenchSummary SummarizeRun(const std::vector<RequestRecord>& records, double duration_s,
                       const Slo& slo, int block_size) {
  BenchSummary s;
  s.num_requests = static_cast<int>(records.size());
  s.duration_s = duration_s;
  s.block_size = block_size;
  s.has_slo = slo.any();
  std::vector<double> ttft, tpot, itl, e2e;
  std::set<std::string> errors;
  double start = -1;
  for (const RequestRecord& r : records) {
    if (r.sent && (start < 0 || r.sent_s < start)) start = r.sent_s;
    if (!r.ok) {
      ++s.failed;
      if (errors.size() < 10) errors.insert(r.error);
      continue;
    }
    ++s.completed;
    s.total_input_tokens += std::max(0, r.prompt_tokens);
    s.total_output_tokens += std::max(0, r.completion_tokens);
    const double ttft_ms = (r.first_token_s - r.sent_s) * 1000.0;
    const double e2e_ms = (r.done_s - r.sent_s) * 1000.0;
    const double tpot_ms = TimePerOutputTokenMs(r);
    ttft.push_back(ttft_ms);
    e2e.push_back(e2e_ms);
    if (tpot_ms >= 0) tpot.push_back(tpot_ms);
    for (size_t i = 1; i < r.chunk_s.size(); ++i) {
      itl.push_back((r.chunk_s[i] - r.chunk_s[i - 1]) * 1000.0);
    }
    if (r.cached_tokens >= 0) {
      s.reported_cached_tokens += r.cached_tokens;
      ++s.requests_reporting_cached;
    }
    s.ideal_cached_tokens += r.ideal_cached_tokens;
    s.ideal_cached_tokens_block += RoundDownToBlock(r.ideal_cached_tokens, std::max(1, block_size));
    if (s.has_slo) {
      const bool good = (slo.ttft_ms <= 0 || ttft_ms <= slo.ttft_ms) &&
                        (slo.tpot_ms <= 0 || tpot_ms < 0 || tpot_ms <= slo.tpot_ms) &&
                        (slo.e2e_ms <= 0 || e2e_ms <= slo.e2e_ms);
      if (good) ++s.good_requests;
    }
  }
  s.errors.assign(errors.begin(), errors.end());
  s.ttft_ms = Summarize(ttft);
  s.tpot_ms = Summarize(tpot);
  s.itl_ms = Summarize(itl);
  s.e2e_ms = Summarize(e2e);
  if (duration_s > 0) {
    s.request_throughput = s.completed / duration_s;
    s.output_throughput = static_cast<double>(s.total_output_tokens) / duration_s;
    s.total_token_throughput =
        static_cast<double>(s.total_input_tokens + s.total_output_tokens) / duration_s;
    s.goodput = s.good_requests / duration_s;
  }
  FillTimeline(records, std::max(0.0, start), duration_s, s);
  return s;
}

namespace {

double Round3(double v) { return std::round(v * 1000.0) / 1000.0; }

json SummaryJson(const Summary& s) {
  return {{"count", s.count}, {"mean", Round3(s.mean)}, {"std", Round3(s.std)},
          {"min", Round3(s.min)}, {"max", Round3(s.max)}, {"p50", Round3(s.p50)},
          {"p90", Round3(s.p90)}, {"p99", Round3(s.p99)}};
}

json OrNull(int v) { return v < 0 ? json(nullptr) : json(v); }

json RequestJson(const RequestRecord& r) {
  json j = {{"id", r.id}, {"seq", r.seq}, {"ok", r.ok}};
  if (!r.error.empty()) j["error"] = r.error;
  if (!r.sent) return j;
  j["sent_s"] = Round3(r.sent_s);
  j["ttft_ms"] = r.first_token_s < 0 ? json(nullptr) : json(Round3((r.first_token_s - r.sent_s) * 1e3));
  j["e2e_ms"] = Round3((r.done_s - r.sent_s) * 1e3);
  const double tpot = TimePerOutputTokenMs(r);
  j["tpot_ms"] = tpot < 0 ? json(nullptr) : json(Round3(tpot));
  json itl = json::array();
  for (size_t i = 1; i < r.chunk_s.size(); ++i) itl.push_back(Round3((r.chunk_s[i] - r.chunk_s[i - 1]) * 1e3));
  j["itl_ms"] = std::move(itl);
  j["prompt_tokens"] = OrNull(r.prompt_tokens);
  j["output_tokens"] = OrNull(r.completion_tokens);
  j["cached_tokens"] = OrNull(r.cached_tokens);
  j["ideal_cached_tokens"] = r.ideal_cached_tokens;
  return j;
}

}  // namespace

json ResultToJson(const json& config, const BenchSummary& s,
                  const std::vector<RequestRecord>& records) {
  json j;
  j["schema"] = "kvserve-bench/1";
  j["config"] = config;
  j["num_requests"] = s.num_requests;
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["duration_s"] = Round3(s.duration_s);
  j["total_input_tokens"] = s.total_input_tokens;
  j["total_output_tokens"] = s.total_output_tokens;
  j["request_throughput"] = Round3(s.request_throughput);
  j["output_throughput"] = Round3(s.output_throughput);
  j["total_token_throughput"] = Round3(s.total_token_throughput);
  j["ttft_ms"] = SummaryJson(s.ttft_ms);
  j["tpot_ms"] = SummaryJson(s.tpot_ms);
  j["itl_ms"] = SummaryJson(s.itl_ms);
  j["e2e_ms"] = SummaryJson(s.e2e_ms);
  if (s.has_slo) {
    j["goodput"] = {{"good_requests", s.good_requests}, {"requests_per_s", Round3(s.goodput)},
                    {"fraction", s.completed + s.failed == 0 ? 0.0
                                     : Round3(static_cast<double>(s.good_requests) /
                                              (s.completed + s.failed))}};
  } else {
    j["goodput"] = nullptr;
  }
  const double input = static_cast<double>(std::max<long>(1, s.total_input_tokens));
  j["cached_tokens"] = {
      {"reported", s.requests_reporting_cached > 0 ? json(s.reported_cached_tokens) : json(nullptr)},
      {"requests_reporting", s.requests_reporting_cached},
      {"ideal", s.ideal_cached_tokens},
      {"ideal_block", s.ideal_cached_tokens_block},
      {"block_size", s.block_size},
      {"reported_hit_rate", s.requests_reporting_cached > 0
                                ? json(Round3(static_cast<double>(s.reported_cached_tokens) / input))
                                : json(nullptr)},
      {"ideal_hit_rate", Round3(static_cast<double>(s.ideal_cached_tokens) / input)}};
  j["timeline"] = {{"bucket_s", Round3(s.bucket_s)}, {"output_tokens_per_s", json::array()},
                   {"completed_per_s", json::array()}, {"running", s.running}};
  for (double v : s.output_tokens_per_s) j["timeline"]["output_tokens_per_s"].push_back(Round3(v));
  for (double v : s.completed_per_s) j["timeline"]["completed_per_s"].push_back(Round3(v));
  if (s.server) {
    json phases = json::object();
    for (const ServerPhase& p : s.server->phases) {
      phases[p.name] = {{"count", Round3(p.count)},
                        {"mean", Round3(p.mean_ms)},
                        {"p50", Round3(p.p50_ms)},
                        {"p90", Round3(p.p90_ms)}};
    }
    j["server_ms"] = {{"source", s.server->prefix + ":request_*_time_seconds"},
                      {"phases", std::move(phases)}};
  } else {
    j["server_ms"] = nullptr;
  }
  j["errors"] = s.errors;
  json reqs = json::array();
  for (const RequestRecord& r : records) reqs.push_back(RequestJson(r));
  j["requests"] = std::move(reqs);
  return j;
}

std::string FormatSummaryTable(const BenchSummary& s) {
  std::string out;
  auto line = [&](std::string_view label, const std::string& value) {
    out += fmt::format("{:<34}{:>14}\n", label, value);
  };
  out += fmt::format("{:=^48}\n", " kvserve bench ");
  line("Requests ok / failed", fmt::format("{} / {}", s.completed, s.failed));
  line("Duration (s)", fmt::format("{:.2f}", s.duration_s));
  line("Input tokens", fmt::format("{}", s.total_input_tokens));
  line("Output tokens", fmt::format("{}", s.total_output_tokens));
  line("Request throughput (req/s)", fmt::format("{:.2f}", s.request_throughput));
  line("Output throughput (tok/s)", fmt::format("{:.2f}", s.output_throughput));
  line("Total throughput (tok/s)", fmt::format("{:.2f}", s.total_token_throughput));
  if (s.has_slo) {
    line("Goodput (req/s)", fmt::format("{:.2f}", s.goodput));
    line("Requests within SLO", fmt::format("{} / {}", s.good_requests, s.num_requests));
  }
  out += fmt::format("{:-^48}\n", "");
  out += fmt::format("{:<8}{:>10}{:>10}{:>10}{:>10}\n", "ms", "mean", "p50", "p90", "p99");
  auto row = [&](std::string_view name, const Summary& m) {
    out += fmt::format("{:<8}{:>10.2f}{:>10.2f}{:>10.2f}{:>10.2f}\n", name, m.mean, m.p50, m.p90, m.p99);
  };
  row("TTFT", s.ttft_ms);
  row("TPOT", s.tpot_ms);
  row("ITL", s.itl_ms);
  row("E2E", s.e2e_ms);
  if (s.server) {
    // What the server measured: the p99 column stays empty (its buckets are too coarse).
    for (const ServerPhase& p : s.server->phases) {
      out +=
          fmt::format("{:<8}{:>10.2f}{:>10.2f}{:>10.2f}{:>10}\n",
                      fmt::format("S:{}", p.name.substr(0, 6)), p.mean_ms, p.p50_ms, p.p90_ms, "");
    }
  }
  out += fmt::format("{:-^48}\n", "");
  const double input = static_cast<double>(std::max<long>(1, s.total_input_tokens));
  if (s.requests_reporting_cached > 0) {
    line("Cached prompt tokens (reported)",
         fmt::format("{} ({:.1f}%)", s.reported_cached_tokens, 100.0 * s.reported_cached_tokens / input));
  } else {
    line("Cached prompt tokens (reported)", "n/a");
  }
  line("Cached prompt tokens (ideal)",
       fmt::format("{} ({:.1f}%)", s.ideal_cached_tokens, 100.0 * s.ideal_cached_tokens / input));
  line(fmt::format("  at {}-token blocks", s.block_size), fmt::format("{}", s.ideal_cached_tokens_block));
  out += fmt::format("{:=^48}\n", "");
  for (const std::string& e : s.errors) out += "error: " + e + "\n";
  return out;
}

}  // namespace kvserve::loadgen
