// Small per-token kernels: RMSNorm, SwiGLU / GeGLU activations, residual add, softmax, soft-cap.
// Pure functions on raw spans; thread-safe; no allocation.
#pragma once

#include <cstdint>

namespace kvserve {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i]; out may alias x.
void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out);
// gate[i] = silu(gate[i]) * up[i]
void SwiGlu(float* gate, const float* up, int64_t n);
// gate[i] = gelu(gate[i]) * up[i], GELU's tanh approximation
// 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (GeGLU: gemma)
void GeGluTanh(float* gate, const float* up, int64_t n);
// gpt-oss's clamped SwiGLU: g = min(gate[i], 7), u = clamp(up[i], -7, 7),
// gate[i] = g * sigmoid(1.702 g) * (u + 1)
void SwiGluOai(float* gate, const float* up, int64_t n);
// x[i] = c * tanh(x[i] / c) (gemma2's logit soft-capping)
void SoftCap(float* x, int64_t n, float c);
// y[i] += x[i]
void AddInPlace(float* y, const float* x, int64_t n);
// In-place numerically stable softmax over x[0..n).
void Softmax(float* x, int64_t n);

}  // namespace kvserve
