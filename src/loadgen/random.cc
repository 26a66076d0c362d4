#include "loadgen/random.h"

#include <cmath>

#include "util/check.h"

namespace kvserve::loadgen {

int64_t Rng::UniformInt(int64_t lo, int64_t hi) {
  KV_CHECK_LE(lo, hi);
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  if (span == 0) return static_cast<int64_t>(engine_());  // the whole 64-bit range
  // Rejection sampling keeps every value equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % span;
  uint64_t x = engine_();
  while (x >= limit) x = engine_();
  return lo + static_cast<int64_t>(x % span);
}

double Rng::Exponential(double mean) {
  // 1 - U is in (0, 1], so the log is finite.
  return -std::log(1.0 - Uniform()) * mean;
}

double Rng::Normal() {
  const double u1 = 1.0 - Uniform();  // (0, 1]
  const double u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

double Rng::Gamma(double shape, double scale) {
  KV_CHECK(shape > 0 && scale > 0, "Gamma({}, {})", shape, scale);
  if (shape < 1.0) {
    // Gamma(k) = Gamma(k + 1) * U^(1/k).
    const double u = 1.0 - Uniform();
    return Gamma(shape + 1.0, scale) * std::pow(u, 1.0 / shape);
  }
  // NOTE: Marsaglia and Tsang (2000): accept v = (1 + c x)^3 for a normal x with a squeeze test.
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    double x, v;
    do {
      x = Normal();
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = 1.0 - Uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v * scale;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v * scale;
  }
}

uint64_t Rng::DeriveSeed(uint64_t seed, uint64_t label) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (label + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace kvserve::loadgen
