#include "ops/act_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvserve {
namespace {

// Quantizes n values with scale amax / 127; returns the scale. Round half away from zero.
float QuantizeBlock(const float* x, int64_t n, int8_t* q) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.f;
  const float id = d > 0.f ? 1.f / d : 0.f;
  for (int64_t i = 0; i < n; ++i) {
    // Round half away from zero without a libm call, so the loop vectorizes. |x * id| <= 127.
    const float v = x[i] * id;
    q[i] = static_cast<int8_t>(static_cast<int>(v + (v >= 0.f ? 0.5f : -0.5f)));
  }
  return d;
}

}  // namespace

void QuantizeActQ8_0(const float* x, int64_t num_tokens, ActQ8_0& out) {
  const int64_t nb = out.cols / 32;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t off = t * out.cols + b * 32;
      out.d[t * nb + b] = QuantizeBlock(x + off, 32, out.q + off);
    }
  }
}

void SumActQ8_0(ActQ8_0& out, int64_t t0, int64_t t1) {
  const int64_t nb = out.cols / 32;
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t b = 0; b < nb; ++b) {
      const int8_t* q = out.q + t * out.cols + b * 32;
      int32_t sum = 0;
      for (int k = 0; k < 32; ++k) sum += q[k];
      out.sum[t * nb + b] = sum;
    }
  }
}

void TileActQ8_0(ActQ8_0& out, int64_t t0, int64_t t1, int32_t offset) {
  const int64_t nb = out.cols / 32;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t base = ActTileOffset(t, nb);
    for (int64_t b = 0; b < nb; ++b) {
      out.tile_d[base + b * kActTileTokens] = out.d[t * nb + b];
      out.tile_osum[base + b * kActTileTokens] = -offset * out.sum[t * nb + b];
    }
  }
}

void QuantizeActQ8K(const float* x, int64_t num_tokens, ActQ8K& out) {
  const int64_t nsb = out.cols / 256;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t s = 0; s < nsb; ++s) {
      const int64_t off = t * out.cols + s * 256;
      out.d[t * nsb + s] = QuantizeBlock(x + off, 256, out.q + off);
      for (int j = 0; j < 16; ++j) {
        int sum = 0;
        for (int k = 0; k < 16; ++k) sum += out.q[off + j * 16 + k];
        out.bsum[(t * nsb + s) * 16 + j] = static_cast<int16_t>(sum);
      }
    }
  }
  if (out.qu != nullptr) {
    for (int64_t i = 0; i < num_tokens * out.cols; ++i) {
      out.qu[i] = static_cast<uint8_t>(static_cast<uint8_t>(out.q[i]) ^ 0x80u);
    }
  }
}

void PairSumsActQ8K(ActQ8K& out, int64_t t0, int64_t t1) {
  const int64_t nsb = out.cols / 256;
  for (int64_t i = t0 * nsb; i < t1 * nsb; ++i) {  // super-block i of the whole batch
    const int16_t* b = out.bsum + i * 16;
    for (int p = 0; p < 4; ++p) {
      // |s_j| <= 32 * 127: an int16
      const int16_t pair[2] = {static_cast<int16_t>(b[4 * p] + b[4 * p + 1]),
                               static_cast<int16_t>(b[4 * p + 2] + b[4 * p + 3])};
      std::memcpy(out.sum32_pairs + i * 4 + p, pair, sizeof pair);
    }
  }
}

}  // namespace kvserve
