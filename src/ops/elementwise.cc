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
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void GeGluTanh(float* gate, const float* up, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * up[i];
  }
}

void SwiGluOai(float* gate, const float* up, int64_t n) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], kLimit);
    const float u = std::clamp(up[i], -kLimit, kLimit);
    gate[i] = g / (1.0f + std::exp(-kAlpha * g)) * (u + 1.0f);
  }
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
