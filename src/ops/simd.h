// Portable fixed-width float vectors through the GCC/Clang vector extension: the compiler maps
// them onto AVX-512, AVX2 or SSE as the build's target allows. Internal to ops/.
#pragma once

#include <cstdint>
#include <cstring>

#include "ops/exp_poly.h"

namespace kvserve::simd {

constexpr int kLanes = 8;
typedef float VecF __attribute__((vector_size(kLanes * sizeof(float))));

inline VecF Load(const float* p) {
  VecF v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void Store(float* p, VecF v) { std::memcpy(p, &v, sizeof(v)); }
inline VecF Splat(float x) { return VecF{x, x, x, x, x, x, x, x}; }
inline float Sum(VecF v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

// Dot product of two float arrays of length n (any n).
inline float Dot(const float* a, const float* b, int64_t n) {
  VecF acc0 = Splat(0.f), acc1 = Splat(0.f);
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    acc0 += Load(a + i) * Load(b + i);
    acc1 += Load(a + i + kLanes) * Load(b + i + kLanes);
  }
  for (; i + kLanes <= n; i += kLanes) acc0 += Load(a + i) * Load(b + i);
  float s = Sum(acc0 + acc1);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y[i] += a * x[i]
inline void Axpy(float a, const float* x, float* y, int64_t n) {
  const VecF va = Splat(a);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Store(y + i, Load(y + i) + va * Load(x + i));
  for (; i < n; ++i) y[i] += a * x[i];
}

typedef int32_t VecI __attribute__((vector_size(kLanes * sizeof(int32_t))));

// exp(x) lane by lane, x clamped to [-87, 88] (below: about 1e-38; above: about 1.7e38, short of
// the float range), by ExpPoly.
inline VecF Exp(VecF x) {
  x = x < Splat(-87.f) ? Splat(-87.f) : x;
  x = x > Splat(88.f) ? Splat(88.f) : x;
  return ExpPoly<VecF, VecI>(
      x, [](VecF a, VecF b, VecF c) { return a * b + c; }, [](float c) { return Splat(c); });
}

// f(x) over n floats in vectors, the last partial vector through a zero-padded copy, so that
// every element's result is the same wherever it lies.
template <typename F>
inline void MapInPlace(float* x, const float* y, int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Store(x + i, f(Load(x + i), Load(y + i)));
  if (i < n) {
    float a[kLanes] = {}, b[kLanes] = {};
    std::memcpy(a, x + i, sizeof(float) * static_cast<size_t>(n - i));
    std::memcpy(b, y + i, sizeof(float) * static_cast<size_t>(n - i));
    Store(a, f(Load(a), Load(b)));
    std::memcpy(x + i, a, sizeof(float) * static_cast<size_t>(n - i));
  }
}

}  // namespace kvserve::simd
