// Retention in the KV manager (prompt caching): holds with deadlines on an injected clock, the
// eviction order they give, the retained share, renewal on hits, explicit holds, and what the
// lower tiers are told. Blocks of 4 tokens, a cache of 8 blocks (at most 4 held), exact block
// ids, and CheckInvariants() after every operation.
#include <gtest/gtest.h>

#include <numeric>
#include <utility>
#include <vector>

#include "prefix/kv_cache_manager.h"

#include "kv_test_util.h"

namespace kvserve {
namespace {
namespace retention_test {

constexpr CacheNamespace kNs{1};
constexpr int64_t k5m = 5 * 60 * 1000;
constexpr int64_t k1h = 60 * 60 * 1000;

using testing_util::Ids;
using testing_util::Range;

// What the lower tiers hear: (block, deadline) for retained blocks, in order, and evictions.
class Recorder : public BlockListener {
 public:
  void OnBlockInserted(const TreeBlock&) override {}
  void OnBlockEvicted(const TreeBlock& b) override { events.push_back({b.block.value(), -1}); }
  void OnBlockRetained(const TreeBlock& b, int64_t until_ms) override {
    events.push_back({b.block.value(), until_ms});
  }
  std::vector<std::pair<int, int64_t>> events;
};

KvCacheConfig Config(int64_t* now) {
  KvCacheConfig c;
  c.num_blocks = 8;
  c.block_size = 4;
  c.max_retained_fraction = 0.5;
  c.clock = [now] { return *now; };
  return c;
}

class RetentionTest : public ::testing::Test {
 protected:
  RetentionTest() : kv_(Config(&now_)) {}

  int RunSequence(SeqId seq, const std::vector<TokenId>& tokens) {
    return testing_util::RunSequence(kv_, kNs, seq, tokens);
  }

  int64_t now_ = 1'000'000;
  KvCacheManager kv_;
};

TEST_F(RetentionTest, AHeldPrefixOutlivesNewerUnheldOnesUnderPressure) {
  RunSequence(SeqId(1), Range(0, 9));    // caches blocks 0, 1 (least recently used)
  RunSequence(SeqId(2), Range(100, 9));  // caches blocks 3, 4
  const auto held = kv_.HoldPrefix(kNs, Range(0, 9), k5m);
  kv_.CheckInvariants();
  EXPECT_EQ(held.held_tokens, 8);
  EXPECT_EQ(held.tier_tokens, 0);
  EXPECT_EQ(kv_.stats().num_held, 2);
  // Least recently used would take block 1 first; held, it goes after every unheld leaf.
  EXPECT_EQ(Ids(kv_.tree()->EvictionOrder()), (std::vector<int>{4, 1}));
  // 5 blocks: the 4 free ones and block 4; then 2 more: block 3, then the held block 1.
  kv_.BeginSequence(SeqId(3), kNs, Range(500, 20), 0);
  ASSERT_TRUE(kv_.Allocate(SeqId(3), 20));
  kv_.CheckInvariants();
  EXPECT_EQ(Ids(kv_.block_table(SeqId(3))), (std::vector<int>{6, 7, 2, 5, 4}));
  ASSERT_TRUE(kv_.Allocate(SeqId(3), 24));
  EXPECT_EQ(kv_.block_table(SeqId(3)).back().value(), 3);
  EXPECT_EQ(kv_.stats().num_held, 2);
  ASSERT_TRUE(kv_.Allocate(SeqId(3), 28));  // nothing unheld is left: the held leaf goes
  kv_.CheckInvariants();
  EXPECT_EQ(kv_.block_table(SeqId(3)).back().value(), 1);
  EXPECT_EQ(kv_.stats().num_held, 1);
  kv_.EndSequence(SeqId(3));
  kv_.CheckInvariants();
}

TEST_F(RetentionTest, AnExpiredHoldLeavesAnOrdinaryBlock) {
  RunSequence(SeqId(1), Range(0, 9));
  RunSequence(SeqId(2), Range(100, 9));
  kv_.HoldPrefix(kNs, Range(0, 9), k5m);
  now_ += k5m - 1;
  kv_.BeginSequence(SeqId(3), kNs, Range(500, 20), 0);
  ASSERT_TRUE(kv_.Allocate(SeqId(3), 20));
  EXPECT_EQ(kv_.block_table(SeqId(3)).back().value(), 4);  // still held at the last ms
  kv_.EndSequence(SeqId(3));
  now_ += 1;  // the deadline: held no more, and block 1 is again the least recently used
  kv_.BeginSequence(SeqId(4), kNs, Range(600, 24), 0);
  ASSERT_TRUE(kv_.Allocate(SeqId(4), 24));  // the 5 free blocks and one evicted
  kv_.CheckInvariants();
  EXPECT_EQ(kv_.stats().num_held, 0);
  EXPECT_EQ(kv_.block_table(SeqId(4)).back().value(), 1);
  kv_.EndSequence(SeqId(4));
  kv_.CheckInvariants();
}

TEST_F(RetentionTest, AHitRenewsTheTtlAndExtendingTheConversationKeepsIt) {
  RunSequence(SeqId(1), Range(0, 9));
  kv_.HoldPrefix(kNs, Range(0, 9), k5m);
  now_ += 4 * 60 * 1000;
  // Turn 2 matches the held prefix (renewed to 5 minutes from now) and caches one more block.
  EXPECT_EQ(RunSequence(SeqId(2), Range(0, 13)), 8);
  now_ += 4 * 60 * 1000;  // 8 minutes after the hold, 4 after the hit
  EXPECT_EQ(kv_.HoldPrefix(kNs, {}, k5m).held_tokens, 0);  // an empty prefix holds nothing
  kv_.CheckInvariants();
  EXPECT_EQ(kv_.stats().num_held, 2);
  now_ += 60 * 1000;
  EXPECT_EQ(RunSequence(SeqId(3), Range(900, 5)), 0);  // ticks the clock
  EXPECT_EQ(kv_.stats().num_held, 0);
}

TEST_F(RetentionTest, HoldsStayWithinTheRetainedShareAndTheRestGoesToTheTiers) {
  Recorder tiers;
  kv_.set_block_listener(&tiers);
  RunSequence(SeqId(1), Range(0, 13));    // blocks 0, 1, 2
  RunSequence(SeqId(2), Range(100, 13));  // blocks 4, 5, 6
  EXPECT_EQ(kv_.HoldPrefix(kNs, Range(0, 13), k1h).held_tokens, 12);
  // One block of the share is left: the second prefix's first block is held in RAM, the
  // other two go to the tiers with their deadline.
  const auto second = kv_.HoldPrefix(kNs, Range(100, 13), k5m);
  kv_.CheckInvariants();
  EXPECT_EQ(second.held_tokens, 4);
  EXPECT_EQ(second.tier_tokens, 8);
  EXPECT_EQ(kv_.stats().num_held, 4);
  EXPECT_EQ(kv_.stats().tier_retained_blocks, 2);
  EXPECT_EQ(tiers.events, (std::vector<std::pair<int, int64_t>>{{5, now_ + k5m}, {6, now_ + k5m}}));
  // A held block that RAM evicts is handed to the tiers first, with its deadline: the unheld
  // leaves go first, then the hold that ends first.
  tiers.events.clear();
  kv_.BeginSequence(SeqId(3), kNs, Range(500, 32), 0);
  ASSERT_TRUE(kv_.Allocate(SeqId(3), 20));  // the 2 free blocks, 6, 5 and the held leaf 4
  kv_.CheckInvariants();
  EXPECT_EQ(tiers.events,
            (std::vector<std::pair<int, int64_t>>{{6, -1}, {5, -1}, {4, now_ + k5m}, {4, -1}}));
  ASSERT_TRUE(kv_.Allocate(SeqId(3), 24));  // then the 1-hour hold's leaf
  EXPECT_EQ(tiers.events.back(), (std::pair<int, int64_t>{2, -1}));
  EXPECT_EQ(kv_.stats().num_held, 2);
  kv_.EndSequence(SeqId(3));
  // With ram false the whole prefix goes to the tiers and RAM holds nothing more.
  RunSequence(SeqId(4), Range(300, 5));
  tiers.events.clear();
  const auto tier_only = kv_.HoldPrefix(kNs, Range(300, 5), 24 * k1h, /*ram=*/false);
  EXPECT_EQ(tier_only.held_tokens, 0);
  EXPECT_EQ(tier_only.tier_tokens, 4);
  EXPECT_EQ(tiers.events.size(), 1u);
  EXPECT_EQ(tiers.events[0].second, now_ + 24 * k1h);
  kv_.CheckInvariants();
}

// An observer (the KV event publisher) hears inserts and evictions beside the tiers, but a hold
// that RAM does not keep counts as kept by the tiers only when there is a listener.
TEST_F(RetentionTest, ObserversHearInsertsAndEvictionsBesideTheListener) {
  class Inserts : public Recorder {
   public:
    void OnBlockInserted(const TreeBlock& b) override { inserted.push_back(b.block.value()); }
    std::vector<int> inserted;
  };
  Inserts observer;
  kv_.add_block_observer(&observer);
  RunSequence(SeqId(1), Range(0, 9));  // blocks 0, 1
  EXPECT_EQ(observer.inserted, (std::vector<int>{0, 1}));
  EXPECT_EQ(kv_.HoldPrefix(kNs, Range(0, 9), k5m, /*ram=*/false).tier_tokens, 0);
  Inserts tiers;
  kv_.set_block_listener(&tiers);
  RunSequence(SeqId(2), Range(100, 5));  // block 3
  EXPECT_EQ(tiers.inserted, (std::vector<int>{3}));
  EXPECT_EQ(observer.inserted, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(kv_.HoldPrefix(kNs, Range(0, 9), k5m, /*ram=*/false).tier_tokens, 8);
  tiers.events.clear();
  observer.events.clear();
  kv_.BeginSequence(SeqId(3), kNs, Range(500, 32), 0);
  ASSERT_TRUE(kv_.Allocate(SeqId(3), 32));  // every block: the three cached ones are evicted
  kv_.CheckInvariants();
  const std::vector<std::pair<int, int64_t>> evicted{{1, -1}, {0, -1}, {3, -1}};
  EXPECT_EQ(tiers.events, evicted);
  EXPECT_EQ(observer.events, evicted);
  kv_.EndSequence(SeqId(3));
  kv_.CheckInvariants();
}

TEST_F(RetentionTest, ExplicitHoldsHaveFixedDeadlinesAndCountAgainstTheShare) {
  RunSequence(SeqId(1), Range(0, 13));    // blocks 0, 1, 2
  RunSequence(SeqId(2), Range(100, 13));  // blocks 4, 5, 6
  ASSERT_EQ(*kv_.HoldExplicit(7, kNs, Range(0, 12), now_ + k5m), 12);
  // Its first two blocks are shared with a second cache: together they hold 3 blocks.
  ASSERT_EQ(*kv_.HoldExplicit(8, kNs, Range(0, 8), now_ + k1h), 8);
  kv_.CheckInvariants();
  EXPECT_EQ(kv_.stats().num_held, 3);
  EXPECT_EQ(kv_.HoldExplicit(9, kNs, Range(100, 12), now_ + k5m).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(kv_.stats().num_explicit_holds, 2);
  // A hit does not move a fixed deadline.
  now_ += k5m - 1;
  EXPECT_EQ(RunSequence(SeqId(3), Range(0, 13)), 12);
  now_ += 1;
  EXPECT_EQ(RunSequence(SeqId(4), Range(900, 5)), 0);
  EXPECT_EQ(kv_.stats().num_held, 2);  // cache 7 ended; cache 8's two blocks stay held
  EXPECT_EQ(kv_.stats().num_explicit_holds, 1);
  // Deleting cache 8 leaves nothing held; a shorter deadline for a cache takes effect.
  kv_.ReleaseExplicit(8);
  kv_.CheckInvariants();
  EXPECT_EQ(kv_.stats().num_held, 0);
  ASSERT_TRUE(kv_.HoldExplicit(10, kNs, Range(100, 12), now_ + k1h).ok());
  ASSERT_TRUE(kv_.HoldExplicit(10, kNs, Range(100, 12), now_ + 1000).ok());
  kv_.CheckInvariants();
  now_ += 1000;
  EXPECT_EQ(RunSequence(SeqId(5), Range(901, 5)), 0);
  EXPECT_EQ(kv_.stats().num_held, 0);
  EXPECT_EQ(kv_.stats().num_explicit_holds, 0);
  EXPECT_EQ(kv_.HoldExplicit(11, kNs, Range(100, 12), now_).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(RetentionTest, AnExplicitHoldAndARenewableOneOnTheSamePathKeepTheLaterDeadline) {
  RunSequence(SeqId(1), Range(0, 9));
  ASSERT_TRUE(kv_.HoldExplicit(1, kNs, Range(0, 8), now_ + 1000).ok());
  kv_.HoldPrefix(kNs, Range(0, 9), k5m);
  kv_.ReleaseExplicit(1);  // the renewable hold remains
  kv_.CheckInvariants();
  EXPECT_EQ(kv_.stats().num_held, 2);
  now_ += k5m;
  EXPECT_EQ(RunSequence(SeqId(2), Range(900, 5)), 0);
  EXPECT_EQ(kv_.stats().num_held, 0);
}

}  // namespace retention_test
}  // namespace
}  // namespace kvserve
