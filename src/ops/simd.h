// Portable fixed-width float vectors through the GCC/Clang vector extension: the compiler maps
// them onto AVX-512, AVX2 or SSE as the build's target allows. Internal to ops/.
#pragma once

#include <cstring>

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

}  // namespace kvserve::simd
