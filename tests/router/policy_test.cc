#include "router/policy.h"

#include <gtest/gtest.h>

namespace kvserve::router {
namespace {

// Candidate `replica` with `load` requests in flight, `matched` prompt blocks cached, `blocks`
// blocks held.
Candidate C(int replica, int64_t load, size_t matched = 0, size_t blocks = 0) {
  return Candidate{replica, load, matched, blocks};
}

Decision Ask(Policy& p, const std::vector<Candidate>& c, size_t prompt_tokens = 0, int sticky = -1,
             int num_replicas = 3) {
  RouteInput in;
  in.candidates = c;
  in.num_replicas = num_replicas;
  in.prompt_tokens = prompt_tokens;
  in.block_size = 16;
  in.sticky_replica = sticky;
  return p.Choose(in);
}

TEST(PolicyTest, NamesParseAndPrint) {
  EXPECT_EQ(*ParsePolicy("cache-aware"), PolicyKind::kCacheAware);
  EXPECT_EQ(*ParsePolicy("least-load"), PolicyKind::kLeastLoad);
  EXPECT_EQ(*ParsePolicy("round-robin"), PolicyKind::kRoundRobin);
  EXPECT_FALSE(ParsePolicy("random").ok());
  EXPECT_EQ(PolicyName(PolicyKind::kCacheAware), "cache-aware");
}

TEST(PolicyTest, RoundRobinCyclesInReplicaOrderAndSkipsAbsentReplicas) {
  auto p = MakePolicy(PolicyKind::kRoundRobin);
  const std::vector<Candidate> all = {C(0, 5), C(1, 0), C(2, 9)};
  EXPECT_EQ(Ask(*p, all).replica, 0);
  EXPECT_EQ(Ask(*p, all).replica, 1);
  EXPECT_EQ(Ask(*p, all).replica, 2);
  EXPECT_EQ(Ask(*p, all).replica, 0);
  const std::vector<Candidate> without_1 = {C(0, 0), C(2, 0)};
  EXPECT_EQ(Ask(*p, without_1).replica, 2);  // after 0 comes 1, which is out: 2
  EXPECT_EQ(Ask(*p, without_1).replica, 0);
  EXPECT_EQ(Ask(*p, all).rule, Rule::kRoundRobin);
}

TEST(PolicyTest, LeastLoadTakesTheFewestInFlightAndRotatesTies) {
  auto p = MakePolicy(PolicyKind::kLeastLoad);
  EXPECT_EQ(Ask(*p, {C(0, 3), C(1, 1), C(2, 2)}).replica, 1);
  EXPECT_EQ(Ask(*p, {C(0, 0), C(1, 0), C(2, 0)}).replica, 2);  // after 1: 2
  EXPECT_EQ(Ask(*p, {C(0, 0), C(1, 0), C(2, 0)}).replica, 0);
  EXPECT_EQ(Ask(*p, {C(0, 0), C(1, 0), C(2, 0)}).rule, Rule::kLeastLoad);
}

TEST(PolicyTest, CacheAwareFollowsTheLongestCachedPrefixAboveTheThreshold) {
  auto p = MakePolicy(PolicyKind::kCacheAware, {.cache_threshold = 0.5});
  // 100 prompt tokens; replica 2 holds 4 blocks = 64 tokens (64%), replica 0 holds 1.
  const Decision d = Ask(*p, {C(0, 0, 1, 50), C(1, 0, 0, 0), C(2, 3, 4, 90)}, 100);
  EXPECT_EQ(d.replica, 2);
  EXPECT_EQ(d.rule, Rule::kCacheMatch);
  EXPECT_EQ(d.matched_blocks, 4u);
}

TEST(PolicyTest, CacheAwareBelowTheThresholdTakesTheLeastLoadedThenTheMostRoom) {
  auto p = MakePolicy(PolicyKind::kCacheAware, {.cache_threshold = 0.5});
  // 3 blocks = 48 of 100 tokens: under half. Replicas 0 and 2 are idle; 0 holds fewer blocks.
  // Replica 1 holds fewest of all but is busy.
  Decision d = Ask(*p, {C(0, 0, 3, 50), C(1, 2, 0, 10), C(2, 0, 0, 90)}, 100);
  EXPECT_EQ(d.replica, 0);
  EXPECT_EQ(d.rule, Rule::kNoMatch);
  // All equally loaded: the most room.
  d = Ask(*p, {C(0, 1, 3, 50), C(1, 1, 0, 10), C(2, 1, 0, 90)}, 100);
  EXPECT_EQ(d.replica, 1);
}

TEST(PolicyTest, CacheAwareBreaksTiesByLoadThenRotation) {
  auto p = MakePolicy(PolicyKind::kCacheAware, {.cache_threshold = 0.1});
  // Replicas 0 and 2 both hold the 4 cached blocks; 2 is less loaded.
  EXPECT_EQ(Ask(*p, {C(0, 2, 4), C(1, 0, 0), C(2, 1, 4)}, 100).replica, 2);
  // Same match and load: rotation (after 2 comes 0).
  EXPECT_EQ(Ask(*p, {C(0, 1, 4), C(1, 0, 0), C(2, 1, 4)}, 100).replica, 0);
  EXPECT_EQ(Ask(*p, {C(0, 1, 4), C(1, 0, 0), C(2, 1, 4)}, 100).replica, 2);
  // No cache anywhere, equal room and load: rotation.
  EXPECT_EQ(Ask(*p, {C(0, 0), C(1, 0), C(2, 0)}, 100).replica, 0);
  EXPECT_EQ(Ask(*p, {C(0, 0), C(1, 0), C(2, 0)}, 100).replica, 1);
}

TEST(PolicyTest, CacheAwareWithoutAPromptScoreUsesLoadAndRoom) {
  auto p = MakePolicy(PolicyKind::kCacheAware);
  const Decision d = Ask(*p, {C(0, 1, 9, 5), C(1, 0, 0, 5)}, /*prompt_tokens=*/0);
  EXPECT_EQ(d.replica, 1);  // matched blocks mean nothing without a prompt size
  EXPECT_EQ(d.rule, Rule::kNoMatch);
}

TEST(PolicyTest, AnImbalancedFleetFallsBackToLeastLoad) {
  auto p = MakePolicy(
      PolicyKind::kCacheAware,
      {.cache_threshold = 0.1, .balance_abs_threshold = 4, .balance_rel_threshold = 1.5});
  // Replica 0 holds the whole prompt but has 10 in flight against 2: 10 - 2 > 4 and 10 > 3.
  const Decision d = Ask(*p, {C(0, 10, 6), C(1, 2, 0), C(2, 3, 0)}, 100);
  EXPECT_EQ(d.replica, 1);
  EXPECT_EQ(d.rule, Rule::kImbalanced);
  // Both thresholds must be crossed: 6 - 2 = 4 is not more than 4.
  EXPECT_EQ(Ask(*p, {C(0, 6, 6), C(1, 2, 0), C(2, 3, 0)}, 100).replica, 0);
  // 30 vs 25: far apart in absolute terms but within 1.5x.
  EXPECT_EQ(Ask(*p, {C(0, 30, 6), C(1, 25, 0), C(2, 26, 0)}, 100).replica, 0);
  EXPECT_TRUE(Imbalanced(2, 10, {.balance_abs_threshold = 4, .balance_rel_threshold = 1.5}));
  EXPECT_FALSE(Imbalanced(0, 4, {.balance_abs_threshold = 4, .balance_rel_threshold = 1.5}));
}

TEST(PolicyTest, ACacheKeyStaysWithItsReplicaUnlessItIsOverloaded) {
  auto p = MakePolicy(
      PolicyKind::kCacheAware,
      {.cache_threshold = 0.1, .balance_abs_threshold = 4, .balance_rel_threshold = 1.5});
  // Replica 2 served the key last; replica 0 holds more of the prompt: the key wins.
  Decision d = Ask(*p, {C(0, 0, 6), C(1, 0, 0), C(2, 1, 1)}, 100, /*sticky=*/2);
  EXPECT_EQ(d.replica, 2);
  EXPECT_EQ(d.rule, Rule::kSticky);
  // Overloaded (9 against 0): the usual rules decide.
  d = Ask(*p, {C(0, 0, 6), C(1, 0, 0), C(2, 9, 1)}, 100, 2);
  EXPECT_EQ(d.rule, Rule::kImbalanced);
  // The key's replica is not a candidate (out of the pool): the usual rules decide.
  d = Ask(*p, {C(0, 0, 6), C(1, 0, 0)}, 100, 2);
  EXPECT_EQ(d.replica, 0);
  EXPECT_EQ(d.rule, Rule::kCacheMatch);
}

TEST(StickyKeysTest, RemembersTheLastReplicaOfTheMostRecentKeys) {
  StickyKeys keys(2);
  keys.Set("a", 0);
  keys.Set("b", 1);
  keys.Set("a", 2);  // a is now the most recent
  keys.Set("c", 1);  // b, the least recent, goes
  EXPECT_EQ(keys.Find("a"), 2);
  EXPECT_EQ(keys.Find("b"), -1);
  EXPECT_EQ(keys.Find("c"), 1);
  EXPECT_EQ(keys.size(), 2u);
}

}  // namespace
}  // namespace kvserve::router
