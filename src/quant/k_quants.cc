// Reference kernels for the 256-element super-block K-quants: Q4_K, Q5_K, Q6_K (and Q8_K
// dequantization).
//
// NOTE: layouts follow ggml exactly (ggml-common.h). Element e of a super-block belongs to
// sub-block e / 32 (Q4_K, Q5_K) or e / 16 (Q6_K). Q4_K/Q5_K: qs[32 * c + l] holds element 64c + l
// in its low nibble and 64c + 32 + l in its high nibble; Q5_K's fifth bit of element e is bit
// e / 32 of qh[e % 32]. Q6_K works in halves of 128: for half h and k = e % 128, g = k / 32,
// l = k % 32, the low 4 bits sit in ql[64h + 32(g & 1) + l] (low nibble for g < 2, high for
// g >= 2) and the high 2 bits in bits 2g..2g+1 of qh[32h + l]; the stored value is q + 32.
//
// Quantization is a simple min/max scheme (not ggml's iterative search), chosen so that no value
// ever clamps: every sub-block's scale is rounded UP, so the error of each element is at most half
// a quantization step of its sub-block:
//   Q4_K / Q5_K: |x - x'| <= (d * sc) / 2 <= ((max_s - min(0, min_s) + dmin) / L + d) / 2, with
//                L = 15 (Q4_K) or 31 (Q5_K), d = super scale, dmin = super min scale;
//   Q6_K:        |x - x'| <= (amax_s / 31 + d) / 2.
// REQUIRES: finite inputs with |x| < 1e6 (so the f16 super-scales do not overflow).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/quants_internal.h"
#include "quant/types.h"
#include "util/fp16.h"

namespace kvserve::quant_internal {
namespace {

constexpr int kSubBlocksK4 = kQKK / 32;  // Q4_K / Q5_K: 8 sub-blocks of 32
constexpr int kSubBlocksK6 = kQKK / 16;  // Q6_K: 16 sub-blocks of 16

// f16 bits of the smallest half >= v (v >= 0), so a scale derived from it never undershoots.
uint16_t F16RoundUp(float v) {
  uint16_t bits = F32ToF16(v);
  if (F16ToF32(bits) < v && bits < 0x7bff) ++bits;
  return bits;
}

int CeilClamp(float v, int hi) {
  if (!(v > 0.0f)) return 0;
  const float c = std::ceil(v);
  return c >= static_cast<float>(hi) ? hi : static_cast<int>(c);
}

int RoundClamp(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::lround(v));
}

// Shared Q4_K / Q5_K quantizer: fills d, dmin, the packed scales and q[256] in [0, levels].
void QuantizeAffineSuperBlock(const float* x, int levels, uint16_t* d_bits, uint16_t* dmin_bits,
                              uint8_t packed_scales[kKScaleBytes], uint8_t q[kQKK]) {
  float neg_min[kSubBlocksK4];
  float max[kSubBlocksK4];
  float max_neg_min = 0.0f;
  for (int s = 0; s < kSubBlocksK4; ++s) {
    const float* xs = x + 32 * s;
    float mn = 0.0f;  // the offset is -dmin * m with m >= 0, so the minimum is clamped to <= 0
    float mx = xs[0];
    for (int l = 0; l < 32; ++l) {
      mn = std::min(mn, xs[l]);
      mx = std::max(mx, xs[l]);
    }
    neg_min[s] = -mn;
    max[s] = mx;
    max_neg_min = std::max(max_neg_min, -mn);
  }
  *dmin_bits = max_neg_min > 0.0f ? F16RoundUp(max_neg_min / 63.0f) : 0;
  const float dmin = F16ToF32(*dmin_bits);
  uint8_t sc[kSubBlocksK4];
  uint8_t m[kSubBlocksK4];
  float offset[kSubBlocksK4];
  float need[kSubBlocksK4];
  float max_need = 0.0f;
  for (int s = 0; s < kSubBlocksK4; ++s) {
    m[s] = static_cast<uint8_t>(dmin > 0.0f ? CeilClamp(neg_min[s] / dmin, 63) : 0);
    offset[s] = dmin * m[s];
    need[s] = std::max(0.0f, (max[s] + offset[s]) / static_cast<float>(levels));
    max_need = std::max(max_need, need[s]);
  }
  *d_bits = max_need > 0.0f ? F16RoundUp(max_need / 63.0f) : 0;
  const float d = F16ToF32(*d_bits);
  for (int s = 0; s < kSubBlocksK4; ++s) {
    sc[s] = static_cast<uint8_t>(d > 0.0f ? CeilClamp(need[s] / d, 63) : 0);
    const float step = d * sc[s];
    for (int l = 0; l < 32; ++l) {
      const float v = step > 0.0f ? (x[32 * s + l] + offset[s]) / step : 0.0f;
      q[32 * s + l] = static_cast<uint8_t>(RoundClamp(v, 0, levels));
    }
  }
  PackScaleMinK4(sc, m, packed_scales);
}

}  // namespace

void PackScaleMinK4(const uint8_t* scales, const uint8_t* mins, uint8_t* packed) {
  std::memset(packed, 0, kKScaleBytes);
  for (int j = 0; j < 4; ++j) {
    packed[j] = scales[j] & 63;
    packed[j + 4] = mins[j] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    packed[j + 4] = static_cast<uint8_t>((scales[j] & 0x0f) | ((mins[j] & 0x0f) << 4));
    packed[j - 4] |= static_cast<uint8_t>((scales[j] >> 4) << 6);
    packed[j] |= static_cast<uint8_t>((mins[j] >> 4) << 6);
  }
}

void DequantizeQ4_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ4_K*>(src);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ4_K& blk = blocks[b];
    const float d = F16ToF32(blk.d);
    const float dmin = F16ToF32(blk.dmin);
    float* y = dst + b * kQKK;
    for (int e = 0; e < kQKK; ++e) {
      const int s = e / 32;
      uint8_t sc, m;
      UnpackScaleMinK4(blk.scales, s, &sc, &m);
      const uint8_t byte = blk.qs[32 * (e / 64) + e % 32];
      const int q = (s % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
      y[e] = d * sc * static_cast<float>(q) - dmin * m;
    }
  }
}

void DequantizeQ5_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ5_K*>(src);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ5_K& blk = blocks[b];
    const float d = F16ToF32(blk.d);
    const float dmin = F16ToF32(blk.dmin);
    float* y = dst + b * kQKK;
    for (int e = 0; e < kQKK; ++e) {
      const int s = e / 32;
      uint8_t sc, m;
      UnpackScaleMinK4(blk.scales, s, &sc, &m);
      const uint8_t byte = blk.qs[32 * (e / 64) + e % 32];
      const int low = (s % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
      const int high = (blk.qh[e % 32] >> s) & 1;
      y[e] = d * sc * static_cast<float>(low | (high << 4)) - dmin * m;
    }
  }
}

void DequantizeQ6_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ6_K*>(src);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ6_K& blk = blocks[b];
    const float d = F16ToF32(blk.d);
    float* y = dst + b * kQKK;
    for (int e = 0; e < kQKK; ++e) {
      const int h = e / 128;
      const int g = (e % 128) / 32;
      const int l = e % 32;
      const uint8_t lbyte = blk.ql[64 * h + 32 * (g & 1) + l];
      const int low = g < 2 ? (lbyte & 0x0f) : (lbyte >> 4);
      const int high = (blk.qh[32 * h + l] >> (2 * g)) & 3;
      const int q = (low | (high << 4)) - 32;
      y[e] = d * static_cast<float>(blk.scales[e / 16]) * static_cast<float>(q);
    }
  }
}

void DequantizeQ8_K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8_K*>(src);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    float d;
    std::memcpy(&d, &blocks[b].d, sizeof(d));
    for (int e = 0; e < kQKK; ++e) dst[b * kQKK + e] = d * static_cast<float>(blocks[b].qs[e]);
  }
}

void QuantizeQ4_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ4_K*>(dst);
  uint8_t q[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b) {
    BlockQ4_K& blk = blocks[b];
    QuantizeAffineSuperBlock(src + b * kQKK, 15, &blk.d, &blk.dmin, blk.scales, q);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        blk.qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
      }
    }
  }
}

void QuantizeQ5_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ5_K*>(dst);
  uint8_t q[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b) {
    BlockQ5_K& blk = blocks[b];
    QuantizeAffineSuperBlock(src + b * kQKK, 31, &blk.d, &blk.dmin, blk.scales, q);
    std::memset(blk.qh, 0, sizeof(blk.qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int q0 = q[64 * c + l];
        const int q1 = q[64 * c + 32 + l];
        blk.qs[32 * c + l] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
        blk.qh[l] |= static_cast<uint8_t>(((q0 >> 4) << (2 * c)) | ((q1 >> 4) << (2 * c + 1)));
      }
    }
  }
}

void QuantizeQ6_K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ6_K*>(dst);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float* x = src + b * kQKK;
    BlockQ6_K& blk = blocks[b];
    float sub_scale[kSubBlocksK6];
    float max_scale = 0.0f;
    for (int s = 0; s < kSubBlocksK6; ++s) {
      float amax = 0.0f;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * s + l]));
      sub_scale[s] = amax / 31.0f;
      max_scale = std::max(max_scale, sub_scale[s]);
    }
    blk.d = max_scale > 0.0f ? F16RoundUp(max_scale / 127.0f) : 0;
    const float d = F16ToF32(blk.d);
    std::memset(blk.ql, 0, sizeof(blk.ql));
    std::memset(blk.qh, 0, sizeof(blk.qh));
    for (int e = 0; e < kQKK; ++e) {
      const int s = e / 16;
      if (e % 16 == 0) blk.scales[s] = static_cast<int8_t>(d > 0 ? CeilClamp(sub_scale[s] / d, 127) : 0);
      const float step = d * blk.scales[s];
      const int q = (step > 0.0f ? RoundClamp(x[e] / step, -32, 31) : 0) + 32;
      const int h = e / 128;
      const int g = (e % 128) / 32;
      const int l = e % 32;
      blk.ql[64 * h + 32 * (g & 1) + l] |= static_cast<uint8_t>((q & 0x0f) << (g < 2 ? 0 : 4));
      blk.qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * g));
    }
  }
}

}  // namespace kvserve::quant_internal

namespace kvserve {

void UnpackScaleMinK4(const uint8_t* packed, int j, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = packed[j] & 63;
    *min = packed[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
  }
}

}  // namespace kvserve
