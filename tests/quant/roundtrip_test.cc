// Quantize -> dequantize round trips over random data: each type's documented per-element error
// bound, plus an overall relative RMS error bound, over several row lengths and distributions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/types.h"
#include "util/fp16.h"

namespace kvserve {
namespace {

std::vector<float> RandomRow(int64_t n, int distribution, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::uniform_real_distribution<float> positive(0.5f, 2.0f);
  std::vector<float> x(n);
  for (float& v : x) {
    switch (distribution) {
      case 0: v = uniform(rng); break;
      case 1: v = normal(rng); break;  // typical weight scale
      default: v = positive(rng); break;  // all positive: exercises the min handling
    }
  }
  return x;
}

std::vector<float> RoundTrip(GgmlType type, const std::vector<float>& x,
                             std::vector<uint8_t>* bytes) {
  const int64_t n = static_cast<int64_t>(x.size());
  bytes->assign(*RowBytes(type, n), 0xcd);
  EXPECT_TRUE(QuantizeRow(type, x.data(), bytes->data(), n));
  std::vector<float> y(n);
  DequantizeRow(type, bytes->data(), y.data(), n);
  return y;
}

float Range(const float* x, int n, bool clamp_min_to_zero, float* amax_out) {
  float mn = clamp_min_to_zero ? 0.0f : x[0];
  float mx = x[0];
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  if (amax_out) *amax_out = amax;
  return mx - mn;
}

// Per-element bound for element i of row x quantized as `bytes` (see the kernels' comments).
float ElementBound(GgmlType type, const std::vector<float>& x, const std::vector<uint8_t>& bytes,
                   int64_t i) {
  const float f16_rel = 1.0f / 1024.0f;  // generous f16 rounding of the stored scales
  float amax = 0.0f;
  switch (type) {
    case GgmlType::kF32: return 0.0f;
    case GgmlType::kF16: return std::fabs(x[i]) / 2048.0f;
    case GgmlType::kBF16: return std::fabs(x[i]) / 256.0f;
    case GgmlType::kQ8_0:  // half a step, plus f16 rounding of d times |q| <= 127
      Range(&x[i / 32 * 32], 32, false, &amax);
      return amax / 127.0f * 0.5f + amax * f16_rel;
    case GgmlType::kQ4_0:  // the positive end may clamp at q = 7: one full step
      Range(&x[i / 32 * 32], 32, false, &amax);
      return amax / 8.0f + amax * f16_rel;
    case GgmlType::kQ5_0:
      Range(&x[i / 32 * 32], 32, false, &amax);
      return amax / 16.0f + amax * f16_rel;
    case GgmlType::kMXFP4: {  // d = 2^(floor(log2 amax) - 3) <= amax / 8; the widest step 4d
      // (between the doubled levels 8 and 12), halved; amax itself may lie past 12d (up to 16d)
      Range(&x[i / 32 * 32], 32, false, &amax);
      const float d = std::ldexp(1.0f, static_cast<int>(std::floor(std::log2(amax))) - 3);
      return std::max(2 * d, amax - 12 * d) * 1.0001f;
    }
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1: {
      const float levels = type == GgmlType::kQ4_1 ? 15.0f : 31.0f;
      const float range = Range(&x[i / 32 * 32], 32, false, &amax);
      return range / levels * 0.5f + amax * 2 * f16_rel;
    }
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {  // (range_s' + dmin) / L + d, halved; d and dmin read from the block
      const float levels = type == GgmlType::kQ4_K ? 15.0f : 31.0f;
      const size_t block_bytes = type == GgmlType::kQ4_K ? sizeof(BlockQ4_K) : sizeof(BlockQ5_K);
      uint16_t d_bits, dmin_bits;
      std::memcpy(&d_bits, &bytes[i / 256 * block_bytes], 2);
      std::memcpy(&dmin_bits, &bytes[i / 256 * block_bytes + 2], 2);
      const float range = Range(&x[i / 32 * 32], 32, true, nullptr);
      const float bound = ((range + F16ToF32(dmin_bits)) / levels + F16ToF32(d_bits)) * 0.5f;
      return bound * 1.0001f + 1e-7f;
    }
    case GgmlType::kQ6_K: {
      uint16_t d_bits;
      std::memcpy(&d_bits, &bytes[i / 256 * sizeof(BlockQ6_K) + 208], 2);
      Range(&x[i / 16 * 16], 16, false, &amax);
      return (amax / 31.0f + F16ToF32(d_bits)) * 0.5f * 1.0001f + 1e-7f;
    }
    default: return 0.0f;
  }
}

float RmsBound(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return 0.0f;
    case GgmlType::kF16: return 1e-3f;
    case GgmlType::kBF16: return 5e-3f;
    case GgmlType::kQ8_0: return 0.01f;
    case GgmlType::kQ6_K: return 0.03f;
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ5_K: return 0.06f;
    case GgmlType::kMXFP4:
      return 0.2f;  // 8 levels a side, a power-of-two scale
    default:
      return 0.12f;  // 4-bit types
  }
}

class RoundTripTest : public ::testing::TestWithParam<GgmlType> {};

TEST_P(RoundTripTest, ErrorWithinDocumentedBounds) {
  const GgmlType type = GetParam();
  const int64_t block = Traits(type).block_elems;
  const int64_t unit = std::max<int64_t>(block, 32);
  for (int64_t blocks : {1, 2, 7}) {
    for (int distribution = 0; distribution < 3; ++distribution) {
      const int64_t n = unit * blocks;
      const std::vector<float> x = RandomRow(n, distribution, static_cast<uint32_t>(n + distribution));
      std::vector<uint8_t> bytes;
      const std::vector<float> y = RoundTrip(type, x, &bytes);
      double err2 = 0.0;
      double sig2 = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const float err = std::fabs(y[i] - x[i]);
        ASSERT_LE(err, ElementBound(type, x, bytes, i))
            << Traits(type).name << " n=" << n << " dist=" << distribution << " i=" << i
            << " x=" << x[i] << " y=" << y[i];
        err2 += static_cast<double>(err) * err;
        sig2 += static_cast<double>(x[i]) * x[i];
      }
      EXPECT_LE(std::sqrt(err2 / sig2), RmsBound(type))
          << Traits(type).name << " n=" << n << " dist=" << distribution;
    }
  }
}

TEST_P(RoundTripTest, ZerosStayZero) {
  const GgmlType type = GetParam();
  const int64_t n = std::max<int64_t>(Traits(type).block_elems, 32) * 2;
  const std::vector<float> x(n, 0.0f);
  std::vector<uint8_t> bytes;
  for (float v : RoundTrip(type, x, &bytes)) ASSERT_EQ(v, 0.0f) << Traits(type).name;
}

TEST_P(RoundTripTest, QuantizingTwiceIsStable) {
  // Dequantized values are exactly representable, so a second round trip may not drift far.
  const GgmlType type = GetParam();
  const int64_t n = std::max<int64_t>(Traits(type).block_elems, 32) * 3;
  const std::vector<float> x = RandomRow(n, 0, 7);
  std::vector<uint8_t> bytes1, bytes2;
  const std::vector<float> y1 = RoundTrip(type, x, &bytes1);
  const std::vector<float> y2 = RoundTrip(type, y1, &bytes2);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_LE(std::fabs(y2[i] - y1[i]), ElementBound(type, y1, bytes2, i)) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllQuantizable, RoundTripTest,
                         ::testing::Values(GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16,
                                           GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                                           GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ4_K,
                                           GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kMXFP4),
                         [](const ::testing::TestParamInfo<GgmlType>& param_info) {
                           return std::string(Traits(param_info.param).name);
                         });

TEST(QuantizeQ8_0, MatchesGgmlReferenceRounding) {
  // amax = 2.54 -> d = 0.02, q = round(x / d): 2.54 -> 127, -1.0 -> -50, 0.01 -> 0.5 -> 1 (half
  // away from zero, as roundf).
  std::vector<float> x(32, 0.0f);
  x[0] = 2.54f;
  x[1] = -1.0f;
  x[2] = 0.0101f;
  BlockQ8_0 blk;
  ASSERT_TRUE(QuantizeRow(GgmlType::kQ8_0, x.data(), &blk, 32));
  EXPECT_EQ(blk.d, F32ToF16(0.02f));
  EXPECT_EQ(blk.qs[0], 127);
  EXPECT_EQ(blk.qs[1], -50);
  EXPECT_EQ(blk.qs[2], 1);
  EXPECT_EQ(blk.qs[3], 0);
}

TEST(QuantizeMXFP4, PowerOfTwoScaleAndNearestLevel) {
  // amax = 5 -> e = floor(log2 5) - 2 + 127 = 127 -> d = 2^-1, so codes 0..7 stand for
  // 0, 0.5, 1, 1.5, 2, 3, 4, 6 and codes 8..15 for their negatives.
  std::vector<float> x(32, 0.0f);
  x[0] = 5.0f;    // as far from 4 (code 6) as from 6 (code 7): the first, code 6
  x[1] = -2.6f;   // -3 (code 13) is nearest
  x[16] = 0.2f;   // 0 (code 0) beats 0.5 (code 1)
  x[17] = -0.3f;  // -0.5 (code 9) beats 0
  BlockMXFP4 blk;
  ASSERT_TRUE(QuantizeRow(GgmlType::kMXFP4, x.data(), &blk, 32));
  EXPECT_EQ(blk.e, 127);
  EXPECT_EQ(Mxfp4Scale(blk.e), 0.5f);
  EXPECT_EQ(blk.qs[0], 0x06);  // x[0] code 6, x[16] code 0 (zeros take +0, the first)
  EXPECT_EQ(blk.qs[1], 0x9d);  // x[1] code 13, x[17] code 9
  EXPECT_EQ(blk.qs[2], 0x00);
  // An all-zero block: e = 0, every code 0.
  std::vector<float> z(32, 0.0f);
  ASSERT_TRUE(QuantizeRow(GgmlType::kMXFP4, z.data(), &blk, 32));
  EXPECT_EQ(blk.e, 0);
}

TEST(QuantizeQ4_0, LargestMagnitudeMapsToMinusEight) {
  // max = -4 (largest magnitude) -> d = -4 / -8 = 0.5; x = -4 -> q = -8 -> nibble 0;
  // x = 3.4 -> 3.4 / 0.5 + 8.5 = 15.3 -> 15 (trunc) -> 7 * 0.5 = 3.5.
  std::vector<float> x(32, 0.0f);
  x[0] = -4.0f;
  x[16] = 3.4f;
  BlockQ4_0 blk;
  ASSERT_TRUE(QuantizeRow(GgmlType::kQ4_0, x.data(), &blk, 32));
  EXPECT_EQ(blk.d, F32ToF16(0.5f));
  EXPECT_EQ(blk.qs[0], 0xf0);  // low nibble: x[0] -> 0; high nibble: x[16] -> 15
  EXPECT_EQ(blk.qs[1], 0x88);  // zeros -> 8
}

}  // namespace
}  // namespace kvserve
