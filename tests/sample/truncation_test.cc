#include "sample/truncation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvserve {
namespace {

std::vector<TokenId> Ids(const std::vector<Candidate>& c, size_t n) {
  std::vector<TokenId> ids;
  for (size_t i = 0; i < n; ++i) ids.push_back(c[i].id);
  return ids;
}

TEST(TopK, KeepsExactlyTheKHighestSortedDescending) {
  std::vector<Candidate> c = {{0, 1.0f}, {1, 3.0f}, {2, 2.0f}, {3, -1.0f}, {4, 2.5f}};
  const size_t n = TopK(c, 2);
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(Ids(c, n), (std::vector<TokenId>{1, 4}));
}

TEST(TopK, BreaksTiesByLowerIdAndClampsKToSize) {
  std::vector<Candidate> c = {{5, 1.0f}, {2, 3.0f}, {7, 3.0f}, {1, 3.0f}};
  EXPECT_EQ(TopK(c, 2), 2u);
  EXPECT_EQ(Ids(c, 2), (std::vector<TokenId>{1, 2}));
  std::vector<Candidate> d = {{0, 1.0f}, {1, 2.0f}};
  EXPECT_EQ(TopK(d, 10), 2u);
  EXPECT_EQ(Ids(d, 2), (std::vector<TokenId>{1, 0}));
}

// Probabilities 0.4, 0.3, 0.2, 0.1 (softmax of their logs).
std::vector<Candidate> FourSorted() {
  return {{7, std::log(0.4f)}, {3, std::log(0.3f)}, {9, std::log(0.2f)}, {1, std::log(0.1f)}};
}

TEST(TopP, KeepsTheMinimalPrefixReachingTheMass) {
  const auto c = FourSorted();
  EXPECT_EQ(TopP(c, 0.1f), 1u);   // 0.4 >= 0.1
  EXPECT_EQ(TopP(c, 0.5f), 2u);   // 0.4 < 0.5 <= 0.7
  EXPECT_EQ(TopP(c, 0.75f), 3u);  // 0.7 < 0.75 <= 0.9
  EXPECT_EQ(TopP(c, 0.95f), 4u);
  EXPECT_EQ(TopP(c, 1.0f), 4u);
}

TEST(MinP, KeepsTokensWithProbabilityAtLeastMinPTimesTheMaxInOrder) {
  // Relative to the max: 0.5, 1, 0.05, 0.2.
  std::vector<Candidate> c = {
      {0, std::log(0.5f)}, {1, 0.0f}, {2, std::log(0.05f)}, {3, std::log(0.2f)}};
  const size_t n = MinP(c, 0.1f);
  EXPECT_EQ(Ids(c, n), (std::vector<TokenId>{0, 1, 3}));
  std::vector<Candidate> d = c;
  EXPECT_EQ(MinP(d, 0.0f), 4u);
  EXPECT_EQ(MinP(d, 1.0f), 1u);  // only the max itself
}

}  // namespace
}  // namespace kvserve
