#include "loadgen/ideal_cache.h"

#include <gtest/gtest.h>

namespace kvserve::loadgen {
namespace {

Segment S(const char* text, int tokens, Role role = Role::kUser) { return {role, text, tokens}; }

TEST(IdealCacheTest, LaterMembersOfAGroupReuseTheSharedSystemPrompt) {
  const std::vector<std::vector<Segment>> prompts = {
      {S("sysA", 100, Role::kSystem), S("q1", 10)}, {S("sysA", 100, Role::kSystem), S("q2", 10)},
      {S("sysB", 100, Role::kSystem), S("q3", 10)}, {S("sysA", 100, Role::kSystem), S("q4", 10)},
      {S("sysB", 100, Role::kSystem), S("q5", 10)}};
  std::vector<SentPrompt> sent;
  for (const auto& p : prompts) sent.push_back({&p, -1, -1, -1});
  EXPECT_EQ(IdealCachedTokens(sent), (std::vector<int>{0, 100, 0, 100, 100}));
}

TEST(IdealCacheTest, TheSameTextUnderAnotherRoleIsNotTheSamePrefix) {
  const std::vector<Segment> a = {S("x", 50, Role::kSystem), S("q", 5)};
  const std::vector<Segment> b = {S("x", 50, Role::kUser), S("q", 5)};
  EXPECT_EQ(IdealCachedTokens({{&a}, {&b}}), (std::vector<int>{0, 0}));
}

TEST(IdealCacheTest, AnIdenticalPromptStillComputesItsLastToken) {
  const std::vector<Segment> a = {S("doc", 60), S("q", 4)};
  EXPECT_EQ(IdealCachedTokens({{&a}, {&a}}), (std::vector<int>{0, 63}));
  // The reported prompt length (BOS, template) caps it instead when known.
  EXPECT_EQ(IdealCachedTokens({{&a, 66}, {&a, 66}}), (std::vector<int>{0, 64}));
}

TEST(IdealCacheTest, ALaterRoundReusesThePreviousPromptAndAllButTheLastAnswerToken) {
  const std::vector<Segment> r0 = {S("u1", 20)};
  const std::vector<Segment> r1 = {S("u1", 20), S("a1", 8, Role::kAssistant), S("u2", 20)};
  // Reported: round 0 had 25 prompt tokens (template) and 8 answer tokens.
  const std::vector<SentPrompt> sent = {{&r0, 25, 8, -1}, {&r1, 60, 8, 0}};
  EXPECT_EQ(IdealCachedTokens(sent), (std::vector<int>{0, 25 + 8 - 1}));
  // Unknown counts fall back to the shared segments.
  const std::vector<SentPrompt> unknown = {{&r0, -1, -1, -1}, {&r1, -1, -1, 0}};
  EXPECT_EQ(IdealCachedTokens(unknown), (std::vector<int>{0, 20}));
}

TEST(IdealCacheTest, BlocksRoundDown) {
  EXPECT_EQ(RoundDownToBlock(63, 16), 48);
  EXPECT_EQ(RoundDownToBlock(64, 16), 64);
  EXPECT_EQ(RoundDownToBlock(5, 1), 5);
}

}  // namespace
}  // namespace kvserve::loadgen
