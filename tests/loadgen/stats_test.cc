#include "loadgen/stats.h"

#include <gtest/gtest.h>

namespace kvserve::loadgen {
namespace {

TEST(PercentileTest, InterpolatesBetweenRanksLikeNumpy) {
  const std::vector<double> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 90), 3.7);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
}

TEST(SummarizeTest, SortsAndFillsEveryField) {
  const Summary s = Summarize({10, 0, 30, 20, 40});
  EXPECT_EQ(s.count, 5);
  EXPECT_DOUBLE_EQ(s.mean, 20);
  EXPECT_DOUBLE_EQ(s.min, 0);
  EXPECT_DOUBLE_EQ(s.max, 40);
  EXPECT_DOUBLE_EQ(s.p50, 20);
  EXPECT_DOUBLE_EQ(s.p90, 36);
  EXPECT_NEAR(s.p99, 39.6, 1e-12);
  EXPECT_NEAR(s.std, 14.142135623730951, 1e-12);
}

TEST(SummarizeTest, NoSamplesGiveZeros) {
  const Summary s = Summarize({});
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.p99, 0);
}

}  // namespace
}  // namespace kvserve::loadgen
