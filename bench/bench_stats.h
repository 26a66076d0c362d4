// Small statistics shared by the C++ benchmarks.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace kvserve::bench {

// The median of the runs (the upper one of the middle two for an even count); 0 when empty.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The p-th percentile (nearest rank) of sorted values; 0 when empty.
inline double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

}  // namespace kvserve::bench
