// Dequantization of hand-built blocks: every expected value is worked out by hand in a comment
// from the ggml block layout, so these tests pin the bit packing independently of our quantizer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "quant/types.h"

namespace kvserve {
namespace {

// f16 bit patterns used below.
constexpr uint16_t kHalf0_125 = 0x3000;
constexpr uint16_t kHalf0_25 = 0x3400;
constexpr uint16_t kHalf0_5 = 0x3800;
constexpr uint16_t kHalf1 = 0x3c00;
constexpr uint16_t kHalf2 = 0x4000;
constexpr uint16_t kHalfMinus1 = 0xbc00;

template <typename Block>
std::vector<float> Dequant(GgmlType type, const Block& block, int n) {
  std::vector<float> out(n, -12345.0f);
  DequantizeRow(type, &block, out.data(), n);
  return out;
}

TEST(Dequantize, F32F16Bf16) {
  const float f32[3] = {1.5f, -0.0f, 3e38f};
  float out[3];
  DequantizeRow(GgmlType::kF32, f32, out, 3);
  EXPECT_EQ(std::memcmp(f32, out, sizeof(out)), 0);

  const uint16_t f16[4] = {0x3c00, 0xc000, 0x3555, 0x0001};  // 1, -2, 0.33325195, 2^-24
  float h[4];
  DequantizeRow(GgmlType::kF16, f16, h, 4);
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_FLOAT_EQ(h[2], 0.33325195f);
  EXPECT_FLOAT_EQ(h[3], 5.9604645e-08f);

  const uint16_t bf16[2] = {0x3f80, 0xc040};  // 1.0, -3.0 (the top halves of the f32 bits)
  float b[2];
  DequantizeRow(GgmlType::kBF16, bf16, b, 2);
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], -3.0f);
}

TEST(Dequantize, Q4_0NibblesAreOffsetByEight) {
  BlockQ4_0 blk;
  blk.d = kHalf0_5;
  std::memset(blk.qs, 0x88, sizeof(blk.qs));  // both nibbles 8 -> (8 - 8) * d = 0
  blk.qs[0] = 0x9f;  // x[0] = (15 - 8) * 0.5 = 3.5; x[16] = (9 - 8) * 0.5 = 0.5
  blk.qs[1] = 0x08;  // x[1] = (8 - 8) * 0.5 = 0;   x[17] = (0 - 8) * 0.5 = -4
  std::vector<float> y = Dequant(GgmlType::kQ4_0, blk, 32);
  std::vector<float> want(32, 0.0f);
  want[0] = 3.5f;
  want[16] = 0.5f;
  want[17] = -4.0f;
  EXPECT_EQ(y, want);
}

TEST(Dequantize, MXFP4CodesAreDoubledE2M1TimesAPowerOfTwo) {
  BlockMXFP4 blk;
  blk.e = 130;  // 2^(130 - 128) = 4
  std::memset(blk.qs, 0, sizeof(blk.qs));
  blk.qs[0] = 0xf7;  // x[0] = 12 * 4 = 48; x[16] = -12 * 4 = -48
  blk.qs[1] = 0x89;  // x[1] = -1 * 4 = -4; x[17] = -0 = 0
  std::vector<float> y = Dequant(GgmlType::kMXFP4, blk, 32);
  std::vector<float> want(32, 0.0f);
  want[0] = 48.0f;
  want[16] = -48.0f;
  want[1] = -4.0f;
  EXPECT_EQ(y, want);
  // The smallest scales are subnormal floats, exact.
  EXPECT_EQ(Mxfp4Scale(0), std::ldexp(1.0f, -128));
  EXPECT_EQ(Mxfp4Scale(1), std::ldexp(1.0f, -127));
  EXPECT_EQ(Mxfp4Scale(255), std::ldexp(1.0f, 127));
}

TEST(Dequantize, Q4_1IsAffine) {
  BlockQ4_1 blk;
  blk.d = kHalf0_25;
  blk.m = kHalfMinus1;
  std::memset(blk.qs, 0, sizeof(blk.qs));  // q = 0 -> 0 * 0.25 + (-1) = -1
  blk.qs[0] = 0x3a;  // x[0] = 10 * 0.25 - 1 = 1.5; x[16] = 3 * 0.25 - 1 = -0.25
  std::vector<float> y = Dequant(GgmlType::kQ4_1, blk, 32);
  std::vector<float> want(32, -1.0f);
  want[0] = 1.5f;
  want[16] = -0.25f;
  EXPECT_EQ(y, want);
}

TEST(Dequantize, Q5_0HighBitsComeFromQh) {
  BlockQ5_0 blk;
  blk.d = kHalf1;
  std::memset(blk.qs, 0, sizeof(blk.qs));
  // qh = 0x00020001: bit 0 (element 0) and bit 17 (element 17) set.
  const uint8_t qh[4] = {0x01, 0x00, 0x02, 0x00};
  std::memcpy(blk.qh, qh, 4);
  blk.qs[0] = 0x35;  // x[0] = (5 | 16) - 16 = 5;  x[16] = (3 | 0) - 16 = -13
  // Element 1: nibble 0, no high bit -> 0 - 16 = -16; element 17: (0 | 16) - 16 = 0.
  std::vector<float> y = Dequant(GgmlType::kQ5_0, blk, 32);
  std::vector<float> want(32, -16.0f);
  want[0] = 5.0f;
  want[16] = -13.0f;
  want[17] = 0.0f;
  EXPECT_EQ(y, want);
}

TEST(Dequantize, Q5_1HighBitsAndMin) {
  BlockQ5_1 blk;
  blk.d = kHalf0_5;
  blk.m = kHalf2;
  std::memset(blk.qs, 0, sizeof(blk.qs));  // default q = 0 -> 0 * 0.5 + 2 = 2
  const uint8_t qh[4] = {0x00, 0x00, 0x00, 0x80};  // bit 31 -> element 31 (high nibble of qs[15])
  std::memcpy(blk.qh, qh, 4);
  blk.qs[15] = 0xf0;  // x[15] = 0 * 0.5 + 2 = 2; x[31] = (15 | 16) * 0.5 + 2 = 17.5
  blk.qs[0] = 0x01;   // x[0] = 1 * 0.5 + 2 = 2.5; x[16] = 2
  std::vector<float> y = Dequant(GgmlType::kQ5_1, blk, 32);
  std::vector<float> want(32, 2.0f);
  want[0] = 2.5f;
  want[31] = 17.5f;
  EXPECT_EQ(y, want);
}

TEST(Dequantize, Q8_0IsSignedBytesTimesD) {
  BlockQ8_0 blk;
  blk.d = kHalf0_125;
  std::memset(blk.qs, 0, sizeof(blk.qs));
  blk.qs[0] = -128;  // -128 * 0.125 = -16
  blk.qs[5] = 7;     // 7 * 0.125 = 0.875
  blk.qs[31] = 127;  // 127 * 0.125 = 15.875
  std::vector<float> y = Dequant(GgmlType::kQ8_0, blk, 32);
  std::vector<float> want(32, 0.0f);
  want[0] = -16.0f;
  want[5] = 0.875f;
  want[31] = 15.875f;
  EXPECT_EQ(y, want);
}

// Packed 6-bit scales/mins shared by the Q4_K and Q5_K tests:
//   scale = {1, 2, 3, 4, 17, 33, 49, 63}, min = {0, 1, 2, 3, 16, 32, 48, 63}.
// bytes 0..3 = scale[0..3] | (scale[4..7] >> 4) << 6 = 1|1<<6, 2|2<<6, 3|3<<6, 4|3<<6
// bytes 4..7 = min[0..3]   | (min[4..7]   >> 4) << 6 = 0|1<<6, 1|2<<6, 2|3<<6, 3|3<<6
// bytes 8..11 = (scale[j] & 15) | (min[j] & 15) << 4 for j = 4..7 = 0x01, 0x01, 0x01, 0xff
constexpr uint8_t kKScales[12] = {0x41, 0x82, 0xc3, 0xc4, 0x40, 0x81, 0xc2, 0xc3,
                                  0x01, 0x01, 0x01, 0xff};
constexpr float kKScale[8] = {1, 2, 3, 4, 17, 33, 49, 63};
constexpr float kKMin[8] = {0, 1, 2, 3, 16, 32, 48, 63};

TEST(Dequantize, Q4_KScalesMinsAndNibbles) {
  BlockQ4_K blk;
  blk.d = kHalf1;       // d = 1
  blk.dmin = kHalf0_5;  // dmin = 0.5
  std::memcpy(blk.scales, kKScales, 12);
  std::memset(blk.qs, 0, sizeof(blk.qs));
  // Element e is in sub-block s = e / 32: y = 1 * scale[s] * q - 0.5 * min[s]; q = 0 gives
  // -0.5 * min[s] = {0, -0.5, -1, -1.5, -8, -16, -24, -31.5}.
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) want[e] = -0.5f * kKMin[e / 32];
  blk.qs[0] = 0x52;   // e0 (s0): 1*2 - 0 = 2;           e32 (s1): 2*5 - 0.5 = 9.5
  blk.qs[67] = 0xa7;  // chunk 2, l=3: e131 (s4): 17*7 - 8 = 111; e163 (s5): 33*10 - 16 = 314
  blk.qs[127] = 0xf1; // chunk 3, l=31: e223 (s6): 49*1 - 24 = 25; e255 (s7): 63*15 - 31.5 = 913.5
  want[0] = 2.0f;
  want[32] = 9.5f;
  want[131] = 111.0f;
  want[163] = 314.0f;
  want[223] = 25.0f;
  want[255] = 913.5f;
  EXPECT_EQ(Dequant(GgmlType::kQ4_K, blk, 256), want);
  (void)kKScale;
}

TEST(Dequantize, Q5_KAddsFifthBitPerSubBlock) {
  BlockQ5_K blk;
  blk.d = kHalf1;
  blk.dmin = kHalf0_5;
  std::memcpy(blk.scales, kKScales, 12);
  std::memset(blk.qs, 0, sizeof(blk.qs));
  std::memset(blk.qh, 0, sizeof(blk.qh));
  std::vector<float> want(256);
  for (int e = 0; e < 256; ++e) want[e] = -0.5f * kKMin[e / 32];
  // Bit s of qh[e % 32] is the fifth bit of element e in sub-block s.
  blk.qs[0] = 0x52;
  blk.qh[0] = 0x03;    // e0: (2|16) = 18 -> 1*18 - 0 = 18;  e32: (5|16) = 21 -> 2*21 - 0.5 = 41.5
  blk.qs[127] = 0xf1;
  blk.qh[31] = 0x80;   // e255 (s7): (15|16) = 31 -> 63*31 - 31.5 = 1921.5; e223 (s6): 49*1 - 24 = 25
  blk.qh[5] = 0x10;    // e133 (s4): q = 0|16 -> 17*16 - 8 = 264
  want[0] = 18.0f;
  want[32] = 41.5f;
  want[223] = 25.0f;
  want[255] = 1921.5f;
  want[133] = 264.0f;
  EXPECT_EQ(Dequant(GgmlType::kQ5_K, blk, 256), want);
}

TEST(Dequantize, Q6_KSixBitValuesAndSignedScales) {
  BlockQ6_K blk;
  blk.d = kHalf0_5;
  for (int s = 0; s < 16; ++s) blk.scales[s] = 1;
  blk.scales[2] = -2;
  blk.scales[4] = 3;
  blk.scales[6] = 4;
  blk.scales[8] = 5;
  blk.scales[15] = -1;
  // Stored value 32 (low nibble 0, high bits 2 = 0b10) means q = 0; 0xaa is 2 in every 2-bit field.
  std::memset(blk.ql, 0, sizeof(blk.ql));
  std::memset(blk.qh, 0xaa, sizeof(blk.qh));
  std::vector<float> want(256, 0.0f);
  // Half 0, l = 0: e0 low nibble of ql[0], e32 low of ql[32], e64 high of ql[0], e96 high of
  // ql[32]; their high bits are qh[0] bits 0-1, 2-3, 4-5, 6-7.
  blk.ql[0] = 0x35;
  blk.ql[32] = 0x0f;
  blk.qh[0] = 0x2b;  // fields (low to high): 3, 2, 2, 0
  want[0] = 0.5f * 1 * ((5 | 3 << 4) - 32);    // 0.5 * 1 * 21 = 10.5
  want[32] = 0.5f * -2 * ((15 | 2 << 4) - 32); // scale[2] = -2: 0.5 * -2 * 15 = -15
  want[64] = 0.5f * 3 * ((3 | 2 << 4) - 32);   // scale[4] = 3: 0.5 * 3 * 3 = 4.5
  want[96] = 0.5f * 4 * ((0 | 0 << 4) - 32);   // scale[6] = 4: 0.5 * 4 * -32 = -64
  // Half 1: e128 low of ql[64] with qh[32] bits 0-1; e255 high of ql[127] with qh[63] bits 6-7.
  blk.ql[64] = 0x01;                            // e128: scale[8] = 5: 0.5 * 5 * 1 = 2.5
  blk.ql[127] = 0xf0;
  blk.qh[63] = 0xea;                            // e255: (15 | 3 << 4) - 32 = 31; scale[15] = -1
  want[128] = 2.5f;
  want[255] = -15.5f;
  EXPECT_EQ(want[0], 10.5f);
  EXPECT_EQ(want[32], -15.0f);
  EXPECT_EQ(want[64], 4.5f);
  EXPECT_EQ(want[96], -64.0f);
  EXPECT_EQ(Dequant(GgmlType::kQ6_K, blk, 256), want);
}

TEST(Dequantize, Q8_KUsesF32Scale) {
  BlockQ8_K blk;
  const float d = 0.25f;
  std::memcpy(&blk.d, &d, 4);
  std::memset(blk.qs, 0, sizeof(blk.qs));
  std::memset(blk.bsums, 0, sizeof(blk.bsums));
  blk.qs[0] = -3;    // -0.75
  blk.qs[255] = 100; // 25
  std::vector<float> want(256, 0.0f);
  want[0] = -0.75f;
  want[255] = 25.0f;
  EXPECT_EQ(Dequant(GgmlType::kQ8_K, blk, 256), want);
}

TEST(Dequantize, MultipleBlocksAreIndependent) {
  BlockQ8_0 blks[2];
  blks[0].d = kHalf1;
  blks[1].d = kHalf2;
  for (int j = 0; j < 32; ++j) {
    blks[0].qs[j] = static_cast<int8_t>(j);
    blks[1].qs[j] = static_cast<int8_t>(-j);
  }
  float y[64];
  DequantizeRow(GgmlType::kQ8_0, blks, y, 64);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(y[j], static_cast<float>(j));
    EXPECT_EQ(y[32 + j], -2.0f * j);
  }
}

}  // namespace
}  // namespace kvserve
