// Small per-token kernels: RMSNorm, SwiGLU activation, residual add, softmax.
// Pure functions on raw spans; thread-safe; no allocation.
#pragma once

#include <cstdint>

namespace kvserve {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i]; out may alias x.
void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out);
// gate[i] = silu(gate[i]) * up[i]
void SwiGlu(float* gate, const float* up, int64_t n);
// y[i] += x[i]
void AddInPlace(float* y, const float* x, int64_t n);
// In-place numerically stable softmax over x[0..n).
void Softmax(float* x, int64_t n);

}  // namespace kvserve
