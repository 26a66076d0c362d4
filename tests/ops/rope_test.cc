#include "ops/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvserve {
namespace {

TEST(Rope, PositionZeroIsIdentity) {
  Rope rope(RopeConfig{.style = RopeStyle::kAdjacentPairs, .rotary_dim = 8});
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<float> before = x;
  rope.Apply(x.data(), 1, 8, 0);
  EXPECT_EQ(x, before);
}

TEST(Rope, AdjacentPairsRotateByPosTimesFrequency) {
  // d = 4, base 100: pair 0 turns by pos * 1, pair 1 by pos * 100^(-1/2) = pos / 10.
  Rope rope(RopeConfig{.style = RopeStyle::kAdjacentPairs, .rotary_dim = 4, .freq_base = 100.f});
  std::vector<float> x = {1, 0, 1, 0};
  rope.Apply(x.data(), 1, 4, 3);
  EXPECT_NEAR(x[0], std::cos(3.f), 1e-6);
  EXPECT_NEAR(x[1], std::sin(3.f), 1e-6);
  EXPECT_NEAR(x[2], std::cos(0.3f), 1e-6);
  EXPECT_NEAR(x[3], std::sin(0.3f), 1e-6);
}

TEST(Rope, HalvesPairDimensionIWithIPlusHalf) {
  Rope rope(RopeConfig{.style = RopeStyle::kHalves, .rotary_dim = 4, .freq_base = 100.f});
  std::vector<float> x = {1, 1, 0, 0};  // pairs (x0, x2) and (x1, x3)
  rope.Apply(x.data(), 1, 4, 3);
  EXPECT_NEAR(x[0], std::cos(3.f), 1e-6);
  EXPECT_NEAR(x[2], std::sin(3.f), 1e-6);
  EXPECT_NEAR(x[1], std::cos(0.3f), 1e-6);
  EXPECT_NEAR(x[3], std::sin(0.3f), 1e-6);
}

TEST(Rope, LinearScalingDividesThePosition) {
  Rope scaled(RopeConfig{.rotary_dim = 4, .scaling = RopeScaling::kLinear, .scaling_factor = 4.f});
  Rope plain(RopeConfig{.rotary_dim = 4});
  std::vector<float> a = {1, 2, 3, 4}, b = a;
  scaled.Apply(a.data(), 1, 4, 8);
  plain.Apply(b.data(), 1, 4, 2);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(a[i], b[i], 1e-6);
}

TEST(Rope, FrequencyFactorsDivideTheFrequencies) {
  Rope with(RopeConfig{.rotary_dim = 4, .freq_base = 100.f, .freq_factors = {1.f, 2.f}});
  std::vector<float> x = {0, 0, 1, 0};
  with.Apply(x.data(), 1, 4, 3);
  EXPECT_NEAR(x[2], std::cos(0.15f), 1e-6);
  EXPECT_NEAR(x[3], std::sin(0.15f), 1e-6);
}

TEST(Rope, RotationKeepsNormsAndOnlyTouchesRotaryDims) {
  Rope rope(RopeConfig{.style = RopeStyle::kHalves, .rotary_dim = 4});
  std::vector<float> x = {1, 2, 3, 4, 5, 6};  // head_dim 6, last two pass through
  rope.Apply(x.data(), 1, 6, 11);
  EXPECT_NEAR(x[0] * x[0] + x[2] * x[2], 1 + 9, 1e-4);
  EXPECT_NEAR(x[1] * x[1] + x[3] * x[3], 4 + 16, 1e-4);
  EXPECT_EQ(x[4], 5);
  EXPECT_EQ(x[5], 6);
}

}  // namespace
}  // namespace kvserve
