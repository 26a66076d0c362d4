#include "loadgen/arrival.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvserve::loadgen {
namespace {

std::vector<double> Gaps(const ArrivalConfig& c, int n) {
  ArrivalProcess p(c);
  std::vector<double> g;
  for (int i = 0; i < n; ++i) g.push_back(p.NextGapSeconds());
  return g;
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double SquaredCv(const std::vector<double>& v) {
  const double m = Mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(v.size()) / (m * m);
}

TEST(ArrivalTest, SameSeedSameGapsOtherSeedOtherGaps) {
  EXPECT_EQ(Gaps({4.0, 1.0, 7}, 100), Gaps({4.0, 1.0, 7}, 100));
  EXPECT_NE(Gaps({4.0, 1.0, 7}, 100), Gaps({4.0, 1.0, 8}, 100));
  EXPECT_EQ(Gaps({4.0, 0.3, 7}, 100), Gaps({4.0, 0.3, 7}, 100));
}

TEST(ArrivalTest, PoissonGapsHaveMeanOneOverRateAndUnitCv) {
  const auto g = Gaps({5.0, 1.0, 1}, 200000);
  EXPECT_NEAR(Mean(g), 0.2, 0.2 * 0.01);
  EXPECT_NEAR(SquaredCv(g), 1.0, 0.03);  // exponential: variance = mean^2
  EXPECT_EQ(ArrivalProcess({5.0, 1.0, 1}).Name(), "poisson");
}

TEST(ArrivalTest, GammaKeepsTheMeanAndBurstinessSetsTheSpread) {
  for (double b : {0.25, 0.5, 2.0, 4.0}) {
    const auto g = Gaps({10.0, b, 3}, 200000);
    EXPECT_NEAR(Mean(g), 0.1, 0.1 * 0.02) << "burstiness " << b;
    EXPECT_NEAR(SquaredCv(g), 1.0 / b, 0.06 / b) << "burstiness " << b;  // gamma: CV^2 = 1/shape
  }
  EXPECT_EQ(ArrivalProcess({10.0, 0.5, 3}).Name(), "gamma");
}

TEST(ArrivalTest, InfiniteRateHasNoGaps) {
  ArrivalConfig c;
  for (double g : Gaps(c, 10)) EXPECT_EQ(g, 0.0);
  EXPECT_EQ(ArrivalProcess(c).Name(), "none");
}

TEST(ArrivalTest, BadValuesNameTheFlag) {
  EXPECT_NE(ValidateArrivalConfig({0.0, 1.0, 0}).message().find("--request-rate"), std::string::npos);
  EXPECT_NE(ValidateArrivalConfig({1.0, 0.0, 0}).message().find("--burstiness"), std::string::npos);
  EXPECT_TRUE(ValidateArrivalConfig({1.0, 1.0, 0}).ok());
}

}  // namespace
}  // namespace kvserve::loadgen
