// Seeded random numbers for the load generator. The engine is std::mt19937_64, whose output the
// C++ standard fixes; the distributions are our own (std::*_distribution differ between standard
// libraries), so one seed gives the same workload and arrival times on every platform.
//
// Not thread-safe: one Rng per thread or per purpose.
#pragma once

#include <cstdint>
#include <random>

namespace kvserve::loadgen {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  uint64_t NextU64() { return engine_(); }
  // Uniform in [0, 1), 53 random bits.
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  // Uniform integer in [lo, hi]. REQUIRES: lo <= hi.
  int64_t UniformInt(int64_t lo, int64_t hi);
  // Exponential with the given mean.
  double Exponential(double mean);
  // Standard normal (Box-Muller; one value per call).
  double Normal();
  // Gamma(shape k, scale theta): mean k * theta (Marsaglia-Tsang). REQUIRES: k > 0, theta > 0.
  double Gamma(double shape, double scale);

  // A fresh, independent stream derived from this seed and a label (splitmix64 of both), so
  // adding a draw in one part of the workload does not shift the numbers of another.
  static uint64_t DeriveSeed(uint64_t seed, uint64_t label);

 private:
  std::mt19937_64 engine_;
};

}  // namespace kvserve::loadgen
