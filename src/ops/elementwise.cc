#include "ops/elementwise.h"

#include <algorithm>
#include <cmath>

#include "ops/simd.h"

namespace kvserve {

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  const float ss = simd::Dot(x, x, n);
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void SwiGlu(float* gate, const float* up, int64_t n) {
  // Vectors of 8 through simd::Exp (libm's scalar expf was about 5% of a prefill).
  simd::MapInPlace(gate, up, n,
                   [](simd::VecF g, simd::VecF u) { return g / (1.0f + simd::Exp(-g)) * u; });
}

void GeGluTanh(float* gate, const float* up, int64_t n) {
  // 0.5 g (1 + tanh(a)) = g / (1 + e^(-2a)), a = sqrt(2/pi) (g + 0.044715 g^3).
  constexpr float kTwoSqrt2OverPi = 2.f * 0.7978845608028654f;
  simd::MapInPlace(gate, up, n, [](simd::VecF g, simd::VecF u) {
    const simd::VecF a2 = kTwoSqrt2OverPi * (g + 0.044715f * g * g * g);
    return g / (1.0f + simd::Exp(-a2)) * u;
  });
}

void SwiGluOai(float* gate, const float* up, int64_t n) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  simd::MapInPlace(gate, up, n, [](simd::VecF g, simd::VecF u) {
    const simd::VecF lim = simd::Splat(kLimit);
    g = lim < g ? lim : g;  // std::min(g, 7), a NaN gate kept as NaN
    u = u > lim ? lim : (u < -lim ? -lim : u);
    return g / (1.0f + simd::Exp(-kAlpha * g)) * (u + 1.0f);
  });
}

void SoftCap(float* x, int64_t n, float c) {
  const float inv = 1.0f / c;
  for (int64_t i = 0; i < n; ++i) x[i] = c * std::tanh(x[i] * inv);
}

void AddInPlace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float mx = *std::max_element(x, x + n);
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace kvserve
