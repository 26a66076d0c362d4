// Summary statistics of latency samples.
#pragma once

#include <vector>

namespace kvserve::loadgen {

struct Summary {
  int count = 0;
  double mean = 0, std = 0, min = 0, max = 0, p50 = 0, p90 = 0, p99 = 0;
};

// The q-th percentile (q in [0, 100]) of ascending `sorted`, interpolating linearly between
// the two closest ranks (numpy's default). REQUIRES: sorted is non-empty and ascending.
double Percentile(const std::vector<double>& sorted, double q);

// All zero for no samples. `std` is the population standard deviation.
Summary Summarize(std::vector<double> values);

}  // namespace kvserve::loadgen
