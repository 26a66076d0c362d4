// Small statistics shared by the C++ benchmarks.
#pragma once

#include <algorithm>
#include <vector>

namespace kvserve::bench {

// The median of the runs (the upper one of the middle two for an even count); 0 when empty.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace kvserve::bench
