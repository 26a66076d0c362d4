#include "loadgen/stats.h"

#include <algorithm>
#include <cmath>

#include "util/check.h"

namespace kvserve::loadgen {

double Percentile(const std::vector<double>& sorted, double q) {
  KV_CHECK(!sorted.empty(), "Percentile of no samples");
  const double rank = std::clamp(q, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Summary Summarize(std::vector<double> values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = static_cast<int>(values.size());
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / s.count;
  double sq = 0;
  for (double v : values) sq += (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(sq / s.count);
  s.min = values.front();
  s.max = values.back();
  s.p50 = Percentile(values, 50);
  s.p90 = Percentile(values, 90);
  s.p99 = Percentile(values, 99);
  return s;
}

}  // namespace kvserve::loadgen
