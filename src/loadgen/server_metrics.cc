#include "loadgen/server_metrics.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace kvserve::loadgen {
namespace {

bool IsNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == ':';
}

// Parses `{k="v",...}` at text[pos] (pos at '{'); advances pos past '}'. False when malformed.
bool ParseLabels(std::string_view text, size_t& pos, std::map<std::string, std::string>& labels) {
  ++pos;  // '{'
  for (;;) {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == ',')) ++pos;
    if (pos >= text.size()) return false;
    if (text[pos] == '}') {
      ++pos;
      return true;
    }
    const size_t key_start = pos;
    while (pos < text.size() && IsNameChar(text[pos])) ++pos;
    std::string key(text.substr(key_start, pos - key_start));
    if (key.empty() || pos + 1 >= text.size() || text[pos] != '=' || text[pos + 1] != '"') {
      return false;
    }
    pos += 2;
    std::string value;
    for (;;) {
      if (pos >= text.size()) return false;
      const char c = text[pos++];
      if (c == '"') break;
      if (c == '\\' && pos < text.size()) {
        const char e = text[pos++];
        value += e == 'n' ? '\n' : e;
      } else {
        value += c;
      }
    }
    labels[std::move(key)] = std::move(value);
  }
}

bool ParseValue(std::string_view token, double& out) {
  if (token == "+Inf" || token == "Inf") {
    out = std::numeric_limits<double>::infinity();
    return true;
  }
  if (token == "-Inf") {
    out = -std::numeric_limits<double>::infinity();
    return true;
  }
  const std::string s(token);
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

}  // namespace

std::vector<MetricSample> ParsePrometheusText(std::string_view text) {
  std::vector<MetricSample> out;
  size_t line_start = 0;
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = text.size();
    const std::string_view line = text.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    size_t pos = 0;
    while (pos < line.size() && line[pos] == ' ') ++pos;
    if (pos >= line.size() || line[pos] == '#') continue;
    MetricSample sample;
    const size_t name_start = pos;
    while (pos < line.size() && IsNameChar(line[pos])) ++pos;
    sample.name = std::string(line.substr(name_start, pos - name_start));
    if (sample.name.empty()) continue;
    if (pos < line.size() && line[pos] == '{' && !ParseLabels(line, pos, sample.labels)) continue;
    while (pos < line.size() && line[pos] == ' ') ++pos;
    const size_t value_end = std::min(line.find(' ', pos), line.size());
    std::string_view token = line.substr(pos, value_end - pos);
    if (!token.empty() && token.back() == '\r') token.remove_suffix(1);
    if (!ParseValue(token, sample.value)) continue;
    out.push_back(std::move(sample));
  }
  return out;
}

std::optional<Histogram> FindHistogram(const std::vector<MetricSample>& samples,
                                       std::string_view name) {
  const std::string bucket = std::string(name) + "_bucket";
  const std::string sum = std::string(name) + "_sum";
  const std::string count = std::string(name) + "_count";
  std::map<double, double> buckets;
  Histogram h;
  bool found = false;
  for (const MetricSample& s : samples) {
    if (s.name == bucket) {
      const auto le = s.labels.find("le");
      double bound = 0;
      if (le == s.labels.end() || !ParseValue(le->second, bound)) continue;
      buckets[bound] += s.value;
      found = true;
    } else if (s.name == sum) {
      h.sum += s.value;
    } else if (s.name == count) {
      h.count += s.value;
      found = true;
    }
  }
  if (!found) return std::nullopt;
  h.buckets.assign(buckets.begin(), buckets.end());
  return h;
}

Histogram Subtract(const Histogram& after, const std::optional<Histogram>& before) {
  Histogram d = after;
  if (!before) return d;
  d.sum -= before->sum;
  d.count -= before->count;
  for (auto& [bound, n] : d.buckets) {
    for (const auto& [b, m] : before->buckets) {
      if (b == bound) n -= m;
    }
  }
  return d;
}

double HistogramQuantile(const Histogram& h, double q) {
  if (h.buckets.empty()) return 0;
  const double total = h.buckets.back().second;
  if (total <= 0) return 0;
  const double rank = std::clamp(q, 0.0, 1.0) * total;
  double lower = 0, below = 0;
  for (const auto& [bound, cumulative] : h.buckets) {
    if (cumulative >= rank) {
      if (std::isinf(bound)) return lower;  // the highest finite bound
      const double in_bucket = cumulative - below;
      if (in_bucket <= 0) return bound;
      return lower + (bound - lower) * (rank - below) / in_bucket;
    }
    lower = bound;
    below = cumulative;
  }
  return lower;
}

std::optional<ServerLatency> ServerLatencyBetween(const std::vector<MetricSample>& before,
                                                  const std::vector<MetricSample>& after) {
  for (const char* prefix : {"kvserve", "vllm"}) {
    ServerLatency out;
    out.prefix = prefix;
    for (const char* phase : {"queue", "prefill", "decode"}) {
      const std::string name = std::string(prefix) + ":request_" + phase + "_time_seconds";
      const auto a = FindHistogram(after, name);
      if (!a) continue;
      const Histogram d = Subtract(*a, FindHistogram(before, name));
      ServerPhase p;
      p.name = phase;
      p.count = d.count;
      if (d.count > 0) {
        p.mean_ms = d.sum / d.count * 1e3;
        p.p50_ms = HistogramQuantile(d, 0.5) * 1e3;
        p.p90_ms = HistogramQuantile(d, 0.9) * 1e3;
      }
      out.phases.push_back(p);
    }
    if (!out.phases.empty()) return out;
  }
  return std::nullopt;
}

}  // namespace kvserve::loadgen
