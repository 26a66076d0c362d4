#include "loadgen/compare.h"

#include <cmath>

#include <fmt/format.h>

namespace kvserve::loadgen {

using nlohmann::json;

namespace {

struct MetricDef {
  const char* path;  // JSON pointer
  bool higher_is_better;
};

constexpr MetricDef kMetrics[] = {
    {"/request_throughput", true},     {"/output_throughput", true},
    {"/total_token_throughput", true}, {"/goodput/requests_per_s", true},
    {"/ttft_ms/mean", false},          {"/ttft_ms/p50", false},
    {"/ttft_ms/p90", false},           {"/ttft_ms/p99", false},
    {"/tpot_ms/mean", false},          {"/tpot_ms/p50", false},
    {"/tpot_ms/p99", false},           {"/itl_ms/mean", false},
    {"/itl_ms/p50", false},            {"/itl_ms/p99", false},
    {"/e2e_ms/mean", false},           {"/e2e_ms/p50", false},
    {"/e2e_ms/p99", false},            {"/cached_tokens/reported_hit_rate", true},
    {"/cached_tokens/ideal_hit_rate", true}, {"/duration_s", false},
};

std::optional<double> NumberAt(const json& j, const char* path) {
  const json::json_pointer ptr(path);
  if (!j.contains(ptr)) return std::nullopt;
  const json& v = j.at(ptr);
  if (!v.is_number()) return std::nullopt;
  return v.get<double>();
}

std::string MetricName(const char* path) {
  std::string name(path + 1);
  for (char& c : name) {
    if (c == '/') c = '.';
  }
  return name;
}

std::string Cell(const std::optional<double>& v) {
  return v ? fmt::format("{:.3f}", *v) : std::string("-");
}

}  // namespace

Result<std::vector<CompareRow>> CompareResults(const json& a, const json& b) {
  for (const json* j : {&a, &b}) {
    if (!j->is_object() || !j->contains("ttft_ms")) {
      return InvalidArgument("not a kvserve bench result (no ttft_ms): pass files written by "
                             "kvserve bench --out");
    }
  }
  std::vector<CompareRow> rows;
  for (const MetricDef& m : kMetrics) {
    CompareRow row;
    row.metric = MetricName(m.path);
    row.a = NumberAt(a, m.path);
    row.b = NumberAt(b, m.path);
    row.higher_is_better = m.higher_is_better;
    if (!row.a && !row.b) continue;
    if (row.a && row.b && *row.a != 0) row.ratio = *row.b / *row.a;
    rows.push_back(row);
  }
  return rows;
}

std::string FormatComparison(const std::vector<CompareRow>& rows, const std::string& name_a,
                             const std::string& name_b) {
  std::string out = fmt::format("A: {}\nB: {}\n", name_a, name_b);
  out += fmt::format("{:<34}{:>13}{:>13}{:>9}  {}\n", "metric", "A", "B", "B/A", "");
  for (const CompareRow& r : rows) {
    std::string verdict;
    if (r.ratio && std::abs(*r.ratio - 1.0) > 1e-9) {
      const bool b_better = r.higher_is_better ? *r.ratio > 1 : *r.ratio < 1;
      verdict = b_better ? "B better" : "A better";
    }
    out += fmt::format("{:<34}{:>13}{:>13}{:>9}  {}\n", r.metric, Cell(r.a), Cell(r.b),
                       r.ratio ? fmt::format("{:.3f}", *r.ratio) : std::string("-"), verdict);
  }
  return out;
}

}  // namespace kvserve::loadgen
