// KV cache element types as a specification: names, exact slot sizes, the FP8 encodings against
// a brute-force nearest-value search, and each type's round-trip error bound.
#include "quant/kv_dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "util/fp16.h"

namespace kvserve {
namespace {

std::vector<float> RoundTrip(KvDtype dtype, const std::vector<float>& x) {
  const int d = static_cast<int>(x.size());
  std::vector<uint8_t> slot(KvBytesPerHeadVector(dtype, d), 0xCD);
  StoreKvVector(dtype, x.data(), d, slot.data());
  std::vector<float> y(x.size());
  LoadKvVector(dtype, slot.data(), d, y.data());
  return y;
}

std::vector<float> Gaussian(int d, std::mt19937& rng, float sigma = 1.f) {
  std::normal_distribution<float> nd(0.f, sigma);
  std::vector<float> x(static_cast<size_t>(d));
  for (float& e : x) e = nd(rng);
  return x;
}

float AbsMax(const std::vector<float>& x) {
  float m = 0;
  for (float e : x) m = std::max(m, std::fabs(e));
  return m;
}

double RelRms(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0, n = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    n += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(e / n);
}

TEST(KvDtype, NamesParseBackAndUnknownNamesListTheValidOnes) {
  for (KvDtype d : kAllKvDtypes) {
    EXPECT_EQ(ParseKvDtype(KvDtypeName(d)), d);
    std::string upper(KvDtypeName(d));
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(ParseKvDtype(upper), d);
  }
  EXPECT_EQ(ParseKvDtype("float16"), KvDtype::kF16);
  EXPECT_EQ(ParseKvDtype("bfloat16"), KvDtype::kBF16);
  EXPECT_FALSE(ParseKvDtype("q4_0").has_value());
  EXPECT_FALSE(ParseKvDtype("").has_value());
  const auto bad = ParseKvDtypeOrError("int3", "--cache-type-k");
  ASSERT_FALSE(bad.ok());
  const std::string msg = bad.status().message();
  EXPECT_NE(msg.find("--cache-type-k"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'int3'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32, f16, bf16, int8, fp8_e4m3, fp8_e5m2, int4"), std::string::npos) << msg;
}

TEST(KvDtype, SlotBytesIncludeScales) {
  // head_dim 64: the sizes the capacity gates are computed from.
  EXPECT_EQ(KvBytesPerHeadVector(KvDtype::kF32, 64), 256u);
  EXPECT_EQ(KvBytesPerHeadVector(KvDtype::kF16, 64), 128u);
  EXPECT_EQ(KvBytesPerHeadVector(KvDtype::kBF16, 64), 128u);
  EXPECT_EQ(KvBytesPerHeadVector(KvDtype::kInt8, 64), 66u);     // 64 + f16 scale
  EXPECT_EQ(KvBytesPerHeadVector(KvDtype::kFp8E4M3, 64), 66u);  // 64 + f16 scale
  EXPECT_EQ(KvBytesPerHeadVector(KvDtype::kFp8E5M2, 64), 64u);  // no scale
  EXPECT_EQ(KvBytesPerHeadVector(KvDtype::kInt4, 64), 36u);     // 32 + f16 scale + f16 min
  EXPECT_EQ(KvBytesPerHeadVector(KvDtype::kInt4, 128), 68u);
  EXPECT_EQ(KvBytesPerHeadVector(KvDtype::kInt8, 128), 130u);
  // Capacity against f16 in the same memory.
  EXPECT_GE(128.0 / 66.0, 1.9);
  EXPECT_GE(128.0 / 36.0, 3.5);
}

TEST(KvDtype, Int4NeedsAPowerOfTwoHeadDim) {
  EXPECT_TRUE(CheckKvDtype(KvDtype::kInt4, 64).ok());
  EXPECT_TRUE(CheckKvDtype(KvDtype::kInt4, 16).ok());
  const Status s = CheckKvDtype(KvDtype::kInt4, 80);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("power of two"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("80"), std::string::npos) << s.message();
  for (KvDtype d : {KvDtype::kF16, KvDtype::kInt8, KvDtype::kFp8E4M3, KvDtype::kFp8E5M2}) {
    EXPECT_TRUE(CheckKvDtype(d, 80).ok());
  }
}

// The finite value of each code, and the nearest code to x by exhaustive search (ties to the
// even code, saturating at the largest finite value).
template <typename Decode>
uint8_t NearestCode(float x, Decode decode, uint8_t max_code) {
  const float ax = std::fabs(x);
  int best = 0;
  double best_err = 1e300;
  for (int c = 0; c <= max_code; ++c) {
    const double err = std::fabs(static_cast<double>(decode(static_cast<uint8_t>(c))) - ax);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>((std::signbit(x) ? 0x80 : 0) | best);
}

TEST(KvDtype, Fp8EncodersRoundToTheNearestCodeTiesToEven) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> mant(1.f, 2.f);
  std::uniform_int_distribution<int> ex(-20, 17);
  std::vector<float> xs = {
      0.f,     -0.f,    448.f, 449.f,     464.f,      1000.f,     -1e9f,
      57344.f, 61440.f, 1e-3f, 2.f / 512, 3.f / 1024, 1.f / 1024, 0.0625f + 0.00390625f};
  // Midpoints between neighbouring e4m3 codes: ties go to the even code.
  for (int c = 0; c < 0x7E; ++c) {
    xs.push_back(
        0.5f * (Fp8E4M3ToF32(static_cast<uint8_t>(c)) + Fp8E4M3ToF32(static_cast<uint8_t>(c + 1))));
  }
  for (int c = 0; c < 0x7B; ++c) {
    xs.push_back(
        0.5f * (Fp8E5M2ToF32(static_cast<uint8_t>(c)) + Fp8E5M2ToF32(static_cast<uint8_t>(c + 1))));
  }
  for (int i = 0; i < 4000; ++i) {
    xs.push_back((i % 2 ? -1.f : 1.f) * std::ldexp(mant(rng), ex(rng)));
  }
  for (float x : xs) {
    const uint8_t e4 = F32ToFp8E4M3(x);
    const uint8_t e5 = F32ToFp8E5M2(x);
    const uint8_t want4 = NearestCode(x, Fp8E4M3ToF32, 0x7E);
    const uint8_t want5 = NearestCode(x, Fp8E5M2ToF32, 0x7B);
    // Zero keeps its sign either way; compare magnitudes of zero codes loosely.
    if ((want4 & 0x7F) != 0) {
      EXPECT_EQ(e4, want4) << "e4m3 x=" << x;
    }
    if ((want5 & 0x7F) != 0) {
      EXPECT_EQ(e5, want5) << "e5m2 x=" << x;
    }
    EXPECT_EQ(e4 & 0x7F, want4 & 0x7F) << "e4m3 x=" << x;
    EXPECT_EQ(e5 & 0x7F, want5 & 0x7F) << "e5m2 x=" << x;
  }
  EXPECT_EQ(Fp8E4M3ToF32(0x7E), 448.f);
  EXPECT_EQ(Fp8E4M3ToF32(0x01), std::ldexp(1.f, -9));  // smallest subnormal
  EXPECT_EQ(Fp8E4M3ToF32(0x08), std::ldexp(1.f, -6));  // smallest normal
  EXPECT_EQ(Fp8E5M2ToF32(0x7B), 57344.f);
  EXPECT_EQ(Fp8E5M2ToF32(0x01), std::ldexp(1.f, -16));
}

TEST(KvDtype, EveryFiniteFp8CodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const auto b = static_cast<uint8_t>(c);
    if ((c & 0x7F) <= 0x7E) {
      EXPECT_EQ(F32ToFp8E4M3(Fp8E4M3ToF32(b)), b) << c;
    }
    if ((c & 0x7F) <= 0x7B) {
      EXPECT_EQ(F32ToFp8E5M2(Fp8E5M2ToF32(b)), b) << c;
    }
  }
}

TEST(KvDtype, FloatTypesRoundTripWithinHalfAnUlp) {
  std::mt19937 rng(1);
  for (int d : {16, 64, 128}) {
    for (int trial = 0; trial < 50; ++trial) {
      const std::vector<float> x = Gaussian(d, rng, trial % 2 ? 1.f : 0.05f);
      EXPECT_EQ(RoundTrip(KvDtype::kF32, x), x);
      const std::vector<float> h = RoundTrip(KvDtype::kF16, x);
      const std::vector<float> b = RoundTrip(KvDtype::kBF16, x);
      for (int i = 0; i < d; ++i) {
        EXPECT_EQ(h[i], F16ToF32(F32ToF16(x[i])));
        EXPECT_EQ(b[i], BF16ToF32(F32ToBF16(x[i])));
      }
    }
  }
}

// int8: symmetric, 127 steps of amax / 127 (the scale rounded to f16): each element within half
// a step.
TEST(KvDtype, Int8ErrorIsAtMostHalfAStepOfTheVectorsAbsMax) {
  std::mt19937 rng(2);
  for (int d : {16, 64, 128}) {
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<float> x = Gaussian(d, rng, trial % 3 == 0 ? 30.f : 0.3f);
      if (trial % 5 == 0) x[trial % d] *= 40.f;  // an outlier channel
      const std::vector<float> y = RoundTrip(KvDtype::kInt8, x);
      const float amax = AbsMax(x);
      for (int i = 0; i < d; ++i) {
        ASSERT_LE(std::fabs(x[i] - y[i]), amax / 254.f * (1.f + 1.f / 512))
            << "d=" << d << " trial=" << trial << " i=" << i;
      }
    }
  }
}

// fp8_e4m3 with a per-vector scale mapping amax to 448: 3 mantissa bits, so each element within
// 2^-4 of itself (half an ulp), or within half a subnormal step of the scaled grid.
TEST(KvDtype, Fp8E4M3ErrorIsRelativeWithinHalfAnUlp) {
  std::mt19937 rng(4);
  for (int d : {16, 64, 128}) {
    for (int trial = 0; trial < 200; ++trial) {
      const float sigma = trial % 3 == 0 ? 1e-3f : (trial % 3 == 1 ? 1.f : 100.f);
      const std::vector<float> x = Gaussian(d, rng, sigma);
      const std::vector<float> y = RoundTrip(KvDtype::kFp8E4M3, x);
      const float s = AbsMax(x) / 448.f * (1.f + 1.f / 1024);
      for (int i = 0; i < d; ++i) {
        ASSERT_LE(std::fabs(x[i] - y[i]), std::fabs(x[i]) / 16.f + s * std::ldexp(1.f, -10) * 1.01f)
            << "d=" << d << " trial=" << trial << " i=" << i << " x=" << x[i];
      }
    }
  }
}

// fp8_e5m2 without a scale: 2 mantissa bits, so within 2^-3 of itself (subnormals below 2^-14).
TEST(KvDtype, Fp8E5M2ErrorIsRelativeWithinHalfAnUlp) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<float> x = Gaussian(64, rng, trial % 2 ? 1.f : 1e-2f);
    const std::vector<float> y = RoundTrip(KvDtype::kFp8E5M2, x);
    for (int i = 0; i < 64; ++i) {
      ASSERT_LE(std::fabs(x[i] - y[i]), std::fabs(x[i]) / 8.f + std::ldexp(1.f, -17)) << x[i];
    }
  }
}

TEST(KvDtype, RotationIsOrthonormalAndUndoesItself) {
  std::mt19937 rng(6);
  for (int d : {2, 16, 64, 128, 256}) {
    const std::vector<float> x = Gaussian(d, rng), y = Gaussian(d, rng);
    std::vector<float> rx = x, ry = y;
    RotateKvVector(rx.data(), d);
    RotateKvVector(ry.data(), d);
    double dot = 0, rdot = 0, n = 0, rn = 0;
    for (int i = 0; i < d; ++i) {
      dot += static_cast<double>(x[i]) * y[i];
      rdot += static_cast<double>(rx[i]) * ry[i];
      n += static_cast<double>(x[i]) * x[i];
      rn += static_cast<double>(rx[i]) * rx[i];
    }
    EXPECT_NEAR(rn, n, 1e-5 * n) << d;
    EXPECT_NEAR(rdot, dot, 1e-5 * n) << d;  // q·k is unchanged by rotating both
    UnrotateKvVector(rx.data(), d);
    for (int i = 0; i < d; ++i) EXPECT_NEAR(rx[i], x[i], 1e-5f) << d;
  }
}

// int4 quantizes the rotated vector with 15 steps between its min and max: each rotated element
// within half a step; the vector as a whole within ~10% RMS for Gaussian data.
TEST(KvDtype, Int4ErrorIsHalfAStepOfTheRotatedRange) {
  std::mt19937 rng(7);
  for (int d : {16, 32, 64, 128}) {
    double worst = 0;
    for (int trial = 0; trial < 200; ++trial) {
      const std::vector<float> x = Gaussian(d, rng, trial % 2 ? 3.f : 0.02f);
      std::vector<uint8_t> slot(KvBytesPerHeadVector(KvDtype::kInt4, d));
      StoreKvVector(KvDtype::kInt4, x.data(), d, slot.data());
      std::vector<float> rot = x, raw(x.size());
      RotateKvVector(rot.data(), d);
      LoadKvVectorRaw(KvDtype::kInt4, slot.data(), d, raw.data());
      const auto [lo, hi] = std::minmax_element(rot.begin(), rot.end());
      const float step = (*hi - *lo) / 15.f;
      for (int i = 0; i < d; ++i) {
        ASSERT_LE(std::fabs(raw[i] - rot[i]), step * 0.502f + 1e-3f * std::fabs(*lo))
            << "d=" << d << " trial=" << trial << " i=" << i;
      }
      worst = std::max(worst, RelRms(x, RoundTrip(KvDtype::kInt4, x)));
    }
    EXPECT_LT(worst, 0.16) << d;
  }
}

// An outlier channel (as keys have) would stretch a per-token grid so far that the other channels
// fall to one or two levels; the rotation spreads it over all channels first.
TEST(KvDtype, Int4RotationKeepsSmallChannelsNextToAnOutlier) {
  std::mt19937 rng(8);
  double err = 0, plain = 0;
  const int d = 64, trials = 200;
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<float> x = Gaussian(d, rng);
    x[5] = 60.f;
    const std::vector<float> y = RoundTrip(KvDtype::kInt4, x);
    // The same grid without the rotation: 15 steps between min and max.
    const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
    const float step = (*hi - *lo) / 15.f;
    for (int i = 0; i < d; ++i) {
      if (i == 5) continue;
      err += (y[i] - x[i]) * (y[i] - x[i]);
      const float q = std::nearbyint((x[i] - *lo) / step) * step + *lo;
      plain += (q - x[i]) * (q - x[i]);
    }
  }
  const double rms = std::sqrt(err / (trials * (d - 1)));
  const double rms_plain = std::sqrt(plain / (trials * (d - 1)));
  // Channels of unit size keep most of their information (~0.37 RMS error against ~1.36).
  EXPECT_LT(rms, 0.45);
  EXPECT_LT(rms, rms_plain / 2.5) << rms << " vs " << rms_plain;
}

TEST(KvDtype, ZeroVectorsAndRepeatedStoresAreExact) {
  for (KvDtype dtype : kAllKvDtypes) {
    const std::vector<float> zero(64, 0.f);
    for (float v : RoundTrip(dtype, zero)) EXPECT_EQ(v, 0.f) << KvDtypeName(dtype);
    // Storing the same vector twice gives the same bytes (blocks are compared and shared).
    std::mt19937 rng(9);
    const std::vector<float> x = Gaussian(64, rng);
    const size_t n = KvBytesPerHeadVector(dtype, 64);
    std::vector<uint8_t> a(n, 0), b(n, 0xFF);
    StoreKvVector(dtype, x.data(), 64, a.data());
    StoreKvVector(dtype, x.data(), 64, b.data());
    EXPECT_EQ(a, b) << KvDtypeName(dtype);
  }
}

}  // namespace
}  // namespace kvserve
