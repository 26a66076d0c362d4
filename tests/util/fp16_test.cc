#include "util/fp16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace kvserve {
namespace {

TEST(Fp16, KnownValuesRoundTrip) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xc000);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(1e6f), 0x7c00);                 // overflow to +inf
  EXPECT_EQ(F32ToF16(5.9604645e-08f), 0x0001);       // smallest subnormal
  EXPECT_FLOAT_EQ(F16ToF32(0x0001), 5.9604645e-08f);
  EXPECT_FLOAT_EQ(F16ToF32(0x3555), 0.33325195f);
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Fp16, EveryHalfValueRoundTripsExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToF16(f), h) << "h=" << h;
  }
}

TEST(Fp16, RoundsToNearestEven) {
  // 1 + 2^-11 lies exactly between 1 and the next half (1 + 2^-10): ties go to even (1.0).
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

TEST(Bf16, RoundTripAndRounding) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80);
  EXPECT_FLOAT_EQ(BF16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(F32ToBF16(1.00390625f), 0x3f80);  // tie -> even
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = BF16ToF32(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToBF16(f), b);
  }
}

}  // namespace
}  // namespace kvserve
