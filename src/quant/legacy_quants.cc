// Reference kernels for the 32-element block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and MXFP4.
//
// NOTE: layouts follow ggml exactly. In the 4/5-bit formats byte j of qs holds element j in its
// low nibble and element j + 16 in its high nibble; Q5's fifth bits live in the 32-bit
// little-endian qh, bit j for element j and bit j + 16 for element j + 16. "_0" formats are
// symmetric (x = d * (q - offset)), "_1" formats affine (x = d * q + m). Quantization uses ggml's
// reference rounding so our files match what ggml produces for the same input.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/quants_internal.h"
#include "quant/types.h"
#include "util/fp16.h"

namespace kvserve::quant_internal {
namespace {

// Truncates toward zero into [lo, hi]; NaN maps to lo (never UB on out-of-range floats).
int TruncClamp(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

uint32_t LoadQh(const uint8_t qh[4]) {
  uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;  // GGUF is little-endian and so are all hosts we build for.
}

// Signed value of largest magnitude in x[0..kQK), and its magnitude.
float SignedAbsMax(const float* x, float* amax_out) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax_out != nullptr) *amax_out = amax;
  return max;
}

void MinMax(const float* x, float* min, float* max) {
  *min = x[0];
  *max = x[0];
  for (int j = 1; j < kQK; ++j) {
    if (x[j] < *min) *min = x[j];
    if (x[j] > *max) *max = x[j];
  }
}

}  // namespace

void DequantizeQ4_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = F16ToF32(blocks[b].d);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[b * kQK + j] = d * static_cast<float>((blocks[b].qs[j] & 0x0f) - 8);
      dst[b * kQK + j + kQK / 2] = d * static_cast<float>((blocks[b].qs[j] >> 4) - 8);
    }
  }
}

void DequantizeQ4_1(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_1*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = F16ToF32(blocks[b].d);
    const float m = F16ToF32(blocks[b].m);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[b * kQK + j] = d * static_cast<float>(blocks[b].qs[j] & 0x0f) + m;
      dst[b * kQK + j + kQK / 2] = d * static_cast<float>(blocks[b].qs[j] >> 4) + m;
    }
  }
}

void DequantizeQ5_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = F16ToF32(blocks[b].d);
    const uint32_t qh = LoadQh(blocks[b].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int hi0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int hi1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      dst[b * kQK + j] = d * static_cast<float>(((blocks[b].qs[j] & 0x0f) | hi0) - 16);
      dst[b * kQK + j + kQK / 2] = d * static_cast<float>(((blocks[b].qs[j] >> 4) | hi1) - 16);
    }
  }
}

void DequantizeQ5_1(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_1*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = F16ToF32(blocks[b].d);
    const float m = F16ToF32(blocks[b].m);
    const uint32_t qh = LoadQh(blocks[b].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int hi0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int hi1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      dst[b * kQK + j] = d * static_cast<float>((blocks[b].qs[j] & 0x0f) | hi0) + m;
      dst[b * kQK + j + kQK / 2] = d * static_cast<float>((blocks[b].qs[j] >> 4) | hi1) + m;
    }
  }
}

void DequantizeQ8_0(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_0*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = F16ToF32(blocks[b].d);
    for (int j = 0; j < kQK; ++j) dst[b * kQK + j] = d * static_cast<float>(blocks[b].qs[j]);
  }
}

// Symmetric 4-bit: d = max / -8 so the largest-magnitude value maps exactly onto q = 0.
void QuantizeQ4_0(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ4_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    const float d = SignedAbsMax(x, nullptr) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = F32ToF16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = TruncClamp(x[j] * id + 8.5f, 0, 15);
      const int q1 = TruncClamp(x[j + kQK / 2] * id + 8.5f, 0, 15);
      blocks[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void QuantizeQ4_1(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ4_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    float min, max;
    MinMax(x, &min, &max);
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = F32ToF16(d);
    blocks[b].m = F32ToF16(min);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = TruncClamp((x[j] - min) * id + 0.5f, 0, 15);
      const int q1 = TruncClamp((x[j + kQK / 2] - min) * id + 0.5f, 0, 15);
      blocks[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void QuantizeQ5_0(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ5_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    const float d = SignedAbsMax(x, nullptr) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = F32ToF16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = TruncClamp(x[j] * id + 16.5f, 0, 31);
      const int q1 = TruncClamp(x[j + kQK / 2] * id + 16.5f, 0, 31);
      blocks[b].qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j;
      qh |= static_cast<uint32_t>(q1 >> 4) << (j + 16);
    }
    std::memcpy(blocks[b].qh, &qh, 4);
  }
}

void QuantizeQ5_1(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ5_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    float min, max;
    MinMax(x, &min, &max);
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = F32ToF16(d);
    blocks[b].m = F32ToF16(min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = TruncClamp((x[j] - min) * id + 0.5f, 0, 31);
      const int q1 = TruncClamp((x[j + kQK / 2] - min) * id + 0.5f, 0, 31);
      blocks[b].qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j;
      qh |= static_cast<uint32_t>(q1 >> 4) << (j + 16);
    }
    std::memcpy(blocks[b].qh, &qh, 4);
  }
}

void QuantizeQ8_0(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    float amax;
    SignedAbsMax(x, &amax);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = F32ToF16(d);
    for (int j = 0; j < kQK; ++j) {
      const float v = std::round(x[j] * id);
      blocks[b].qs[j] = static_cast<int8_t>(TruncClamp(v, -127, 127));
    }
  }
}

void DequantizeMXFP4(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockMXFP4*>(src);
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float d = Mxfp4Scale(blocks[b].e);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[b * kQK + j] = d * static_cast<float>(kMxfp4Values[blocks[b].qs[j] & 0x0f]);
      dst[b * kQK + j + kQK / 2] = d * static_cast<float>(kMxfp4Values[blocks[b].qs[j] >> 4]);
    }
  }
}

void QuantizeMXFP4(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockMXFP4*>(dst);
  const auto nearest = [](float x, float d) {
    int best = 0;
    float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * d - x);
    for (int i = 1; i < 16; ++i) {
      const float err = std::fabs(static_cast<float>(kMxfp4Values[i]) * d - x);
      if (err < best_err) {
        best = i;
        best_err = err;
      }
    }
    return best;
  };
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* x = src + b * kQK;
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float e = amax > 0.0f ? std::floor(std::log2(amax)) - 2.0f + 127.0f : 0.0f;
    blocks[b].e = static_cast<uint8_t>(std::clamp(e, 0.0f, 255.0f));
    const float d = Mxfp4Scale(blocks[b].e);
    for (int j = 0; j < kQK / 2; ++j) {
      blocks[b].qs[j] = static_cast<uint8_t>(nearest(x[j], d) | (nearest(x[j + kQK / 2], d) << 4));
    }
  }
}

}  // namespace kvserve::quant_internal
