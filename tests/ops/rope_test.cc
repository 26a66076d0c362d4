#include "ops/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "quant/kv_dtype.h"

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


// Every RoPE type the loader builds: both pairings, no scaling, linear, YaRN (whose attention
// factor must not be applied twice) and per-dimension frequency factors, with a partial rotary
// dimension for one.
std::vector<std::pair<std::string, RopeConfig>> RopeTypes() {
  std::vector<float> factors(32);
  for (int i = 0; i < 32; ++i) factors[static_cast<size_t>(i)] = 1.f + 0.25f * static_cast<float>(i % 5);
  return {
      {"adjacent", RopeConfig{.style = RopeStyle::kAdjacentPairs, .rotary_dim = 64}},
      {"halves", RopeConfig{.style = RopeStyle::kHalves, .rotary_dim = 64, .freq_base = 1e6f}},
      {"partial", RopeConfig{.style = RopeStyle::kHalves, .rotary_dim = 32}},
      {"linear", RopeConfig{.rotary_dim = 64, .scaling = RopeScaling::kLinear,
                            .scaling_factor = 4.f}},
      {"yarn", RopeConfig{.style = RopeStyle::kHalves, .rotary_dim = 64, .scaling = RopeScaling::kYarn,
                          .scaling_factor = 4.f, .original_context_length = 2048}},
      {"freq_factors", RopeConfig{.rotary_dim = 64, .freq_base = 500000.f,
                                  .freq_factors = factors}},
  };
}

TEST(Rope, RotateByDeltaEqualsApplyingAtTheNewPosition) {
  constexpr int kDim = 64;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (const auto& [name, config] : RopeTypes()) {
    Rope rope(config);
    for (const auto& [pos, delta] : {std::pair{300, -200}, std::pair{4000, -3968}, std::pair{17, 40},
                                    std::pair{2047, -2047}}) {
      std::vector<float> x(kDim);
      for (float& v : x) v = normal(rng);
      std::vector<float> shifted = x, direct = x;
      rope.Apply(shifted.data(), 1, kDim, pos);
      rope.Rotate(shifted.data(), 1, kDim, delta);
      rope.Apply(direct.data(), 1, kDim, pos + delta);
      double err = 0, norm = 0;
      for (int i = 0; i < kDim; ++i) {
        err = std::max(err, static_cast<double>(std::abs(shifted[i] - direct[i])));
        norm += static_cast<double>(direct[i]) * direct[i];
      }
      // Float angles at positions in the thousands: about 1e-3 of the vector's scale.
      EXPECT_LT(err, 2e-3 * std::sqrt(norm / kDim)) << name << " pos " << pos << " delta " << delta;
    }
  }
}

TEST(Rope, YarnRotationDoesNotReapplyTheAttentionFactor) {
  Rope rope(RopeConfig{.rotary_dim = 8, .scaling = RopeScaling::kYarn, .scaling_factor = 8.f,
                       .original_context_length = 1024});
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  double before = 0, after = 0;
  rope.Apply(x.data(), 1, 8, 100);
  for (float v : x) before += v * v;
  for (int shift = 0; shift < 50; ++shift) rope.Rotate(x.data(), 1, 8, -1);
  for (float v : x) after += v * v;
  EXPECT_NEAR(after, before, 1e-3 * before);  // 50 shifts, no 1.2x growth per shift
}

// What eviction does to a stored key: read it back, rotate, store it again in the cache's type.
// Its error against storing the key computed at the new position stays within a small multiple
// of the type's own rounding error, for every type and RoPE type.
TEST(Rope, ReRotatingStoredKeysStaysWithinTheTypesRoundingError) {
  constexpr int kDim = 64;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (KvDtype dtype : kAllKvDtypes) {
    const size_t bytes = KvBytesPerHeadVector(dtype, kDim);
    for (const auto& [name, config] : RopeTypes()) {
      Rope rope(config);
      double rerotated_err = 0, direct_err = 0, norm = 0;
      for (int trial = 0; trial < 64; ++trial) {
        std::vector<float> x(kDim);
        for (float& v : x) v = normal(rng);
        const int pos = 256 + trial * 37, delta = -(16 * (1 + trial % 12));
        std::vector<float> k = x, exact = x, back(kDim), direct(kDim);
        std::vector<uint8_t> slot(bytes), other(bytes);
        rope.Apply(k.data(), 1, kDim, pos);
        StoreKvVector(dtype, k.data(), kDim, slot.data());
        LoadKvVector(dtype, slot.data(), kDim, back.data());
        rope.Rotate(back.data(), 1, kDim, delta);
        StoreKvVector(dtype, back.data(), kDim, slot.data());
        LoadKvVector(dtype, slot.data(), kDim, back.data());
        rope.Apply(exact.data(), 1, kDim, pos + delta);
        StoreKvVector(dtype, exact.data(), kDim, other.data());
        LoadKvVector(dtype, other.data(), kDim, direct.data());
        for (int i = 0; i < kDim; ++i) {
          rerotated_err += std::pow(back[i] - exact[i], 2);
          direct_err += std::pow(direct[i] - exact[i], 2);
          norm += exact[i] * exact[i];
        }
      }
      const double rerotated = std::sqrt(rerotated_err / norm), own = std::sqrt(direct_err / norm);
      // Two roundings instead of one, plus the float angles (about 1e-4 relative).
      EXPECT_LE(rerotated, 2.5 * own + 5e-4)
          << KvDtypeName(dtype) << " " << name << ": relative RMS error " << rerotated
          << " against " << own << " for the key stored directly";
    }
  }
}

}  // namespace
}  // namespace kvserve
