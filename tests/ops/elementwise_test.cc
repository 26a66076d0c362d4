#include "ops/elementwise.h"

#include <gtest/gtest.h>

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

TEST(Softmax, IsStableForLargeInputs) {
  std::vector<float> x = {1000.f, 1000.f, -1e30f};
  Softmax(x.data(), 3);
  EXPECT_FLOAT_EQ(x[0], 0.5f);
  EXPECT_FLOAT_EQ(x[1], 0.5f);
  EXPECT_FLOAT_EQ(x[2], 0.f);
}

}  // namespace
}  // namespace kvserve
