#include "ops/elementwise.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace kvserve {
namespace {

TEST(RmsNorm, ScalesToUnitRootMeanSquareTimesWeight) {
  std::vector<float> x = {3, 4};  // mean square 12.5
  std::vector<float> w = {1, 2}, out(2);
  RmsNorm(x.data(), w.data(), 2, 0.f, out.data());
  EXPECT_NEAR(out[0], 3 / std::sqrt(12.5f), 1e-6);
  EXPECT_NEAR(out[1], 2 * 4 / std::sqrt(12.5f), 1e-6);
}

TEST(SwiGlu, IsSiluOfGateTimesUp) {
  std::vector<float> g = {0.f, 1.f, -2.f}, u = {5.f, 2.f, 3.f};
  SwiGlu(g.data(), u.data(), 3);
  EXPECT_FLOAT_EQ(g[0], 0.f);
  EXPECT_NEAR(g[1], 1.f / (1.f + std::exp(-1.f)) * 2.f, 1e-6);
  EXPECT_NEAR(g[2], -2.f / (1.f + std::exp(2.f)) * 3.f, 1e-6);
}

// The gated activations against their formulas in double, for gates from -120 to 120 (past where
// the exponentials leave the float range either way) and ups around the gpt-oss clamp, 1003 of
// them so that the last vector is partial.
using Activation = void (*)(float*, const float*, int64_t);
struct ActivationCase {
  const char* name;
  Activation fn;
  double (*ref)(double g, double u);
  // Relative tolerance at gate g: a few ulps, and where the exponent's argument is computed from
  // g in float (the GELU's 2a, gpt-oss's 1.702 g) also its rounding x · 2^-24, which scales
  // e^(-x) by about 1 ± |x| · 2^-24.
  double (*rel_tol)(double g);
};
const ActivationCase kActivations[] = {
    {"SwiGlu", &SwiGlu, [](double g, double u) { return g / (1.0 + std::exp(-g)) * u; },
     [](double) { return 5e-7; }},
    {"GeGluTanh", &GeGluTanh,
     [](double g, double u) {
       // 0.5 g (1 + tanh(a)), written as g / (1 + e^(-2a)) (the same function; 1 + tanh(a)
       // cancels to 0 in double for a below about -19, where the value is still ~1e-17 g).
       const double a = 0.7978845608028654 * (g + 0.044715 * g * g * g);
       return g / (1.0 + std::exp(-2.0 * a)) * u;
     },
     [](double g) {
       return 5e-7 + 3e-7 * std::abs(2 * 0.7978845608028654 * (g + 0.044715 * g * g * g));
     }},
    {"SwiGluOai", &SwiGluOai,
     [](double g, double u) {
       g = std::min(g, 7.0);
       u = std::clamp(u, -7.0, 7.0);
       return g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0);
     },
     [](double g) { return 5e-7 + 3e-7 * std::abs(1.702 * std::min(g, 7.0)); }},
};

TEST(GatedActivations, MatchTheirFormulasOverTheWholeRange) {
  const int n = 1003;
  for (const ActivationCase& c : kActivations) {
    std::vector<float> g(n), u(n), expect(n);
    for (int i = 0; i < n; ++i) {
      g[i] = -120.f + 240.f * static_cast<float>(i) / (n - 1);
      u[i] = -9.5f + static_cast<float>(i % 20);
      expect[i] = static_cast<float>(c.ref(g[i], u[i]));
    }
    c.fn(g.data(), u.data(), n);
    for (int i = 0; i < n; ++i) {
      const double tol = c.rel_tol(-120.0 + 240.0 * i / (n - 1)) * std::abs(expect[i]);
      // Absolutely: where e^(-x) passes e^88 simd::Exp stops there, leaving g / e^88 (|g| <= 120,
      // |u| <= 10: below 1e-35) where the value is smaller still.
      EXPECT_NEAR(g[i], expect[i], tol + 1e-35) << c.name << " at " << i;
    }
  }
}

TEST(GatedActivations, GiveAnElementTheSameBitsWhereverItLies) {
  // The same gate and up values at every offset of rows of several lengths: a value in a full
  // vector and in the partial last one come out the same.
  const std::vector<float> vals = {-3.25f, -0.5f, 0.f, 1e-20f, 0.75f, 2.5f, 11.f, -40.f, 90.f};
  for (const ActivationCase& c : kActivations) {
    for (int len : {1, 5, 8, 13, 17}) {
      for (int at = 0; at < len; ++at) {
        for (float v : vals) {
          std::vector<float> g(static_cast<size_t>(len), 1.f), u(static_cast<size_t>(len), 2.f);
          g[static_cast<size_t>(at)] = v;
          u[static_cast<size_t>(at)] = 1.5f;
          c.fn(g.data(), u.data(), len);
          std::vector<float> one = {v}, up = {1.5f};
          c.fn(one.data(), up.data(), 1);
          EXPECT_EQ(g[static_cast<size_t>(at)], one[0]) << c.name << " len " << len << " at " << at;
        }
      }
    }
  }
}

TEST(GatedActivations, KeepANanGateAsNan) {
  for (const ActivationCase& c : kActivations) {
    std::vector<float> g = {std::nanf(""), 1.f}, u = {1.f, 1.f};
    c.fn(g.data(), u.data(), 2);
    EXPECT_TRUE(std::isnan(g[0])) << c.name;
  }
}

TEST(Softmax, IsStableForLargeInputs) {
  std::vector<float> x = {1000.f, 1000.f, -1e30f};
  Softmax(x.data(), 3);
  EXPECT_FLOAT_EQ(x[0], 0.5f);
  EXPECT_FLOAT_EQ(x[1], 0.5f);
  EXPECT_FLOAT_EQ(x[2], 0.f);
}

}  // namespace
}  // namespace kvserve
