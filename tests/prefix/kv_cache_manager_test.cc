// KvCacheManager as a specification: blocks of 4 tokens, a cache of 8 blocks, exact block ids,
// hit accounting in tokens, and CheckInvariants() after every operation.
#include "prefix/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "kv_test_util.h"

namespace kvserve {
namespace {
// The test executables are unity builds: this file's helpers stay apart from its neighbours'.
namespace kv_cache_manager_test {

constexpr CacheNamespace kNs{1};

using testing_util::Ids;
using testing_util::Range;

std::vector<TokenId> Concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class KvCacheManagerTest : public ::testing::Test {
 protected:
  explicit KvCacheManagerTest(KvCacheConfig config = {8, 4, true})
      : kv_(config) {}

  // Runs a whole sequence: begin, allocate, "compute" every token, commit, end.
  int RunSequence(SeqId seq, const std::vector<TokenId>& tokens) {
    return testing_util::RunSequence(kv_, kNs, seq, tokens);
  }

  KvCacheManager kv_;
};

TEST_F(KvCacheManagerTest, ASecondRequestWithTheSamePromptHitsItsFullBlocks) {
  const std::vector<TokenId> prompt = Range(100, 10);  // blocks [100..103] [104..107] + 2
  EXPECT_EQ(RunSequence(SeqId(1), prompt), 0);
  // The two full blocks stay cached; the partial third block went back to the free list.
  KvCacheStats st = kv_.stats();
  EXPECT_EQ(st.num_cached, 2);
  EXPECT_EQ(st.num_free, 6);
  EXPECT_EQ(st.num_in_use, 0);
  EXPECT_EQ(kv_.BeginSequence(SeqId(2), kNs, prompt, 0), 8);
  EXPECT_EQ(Ids(kv_.block_table(SeqId(2))), (std::vector<int>{0, 1}));
  ASSERT_TRUE(kv_.Allocate(SeqId(2), 10));
  EXPECT_EQ(Ids(kv_.block_table(SeqId(2))), (std::vector<int>{0, 1, 3}));
  kv_.CheckInvariants();
  st = kv_.stats();
  EXPECT_EQ(st.query_tokens, 20);
  EXPECT_EQ(st.hit_tokens, 8);
  EXPECT_EQ(st.num_in_use, 3);
  EXPECT_EQ(st.num_cached, 0);
  kv_.EndSequence(SeqId(2));
  kv_.CheckInvariants();
}

TEST_F(KvCacheManagerTest, TheLastPromptTokenIsAlwaysComputed) {
  const std::vector<TokenId> prompt = Range(0, 8);  // exactly two blocks
  RunSequence(SeqId(1), prompt);
  EXPECT_EQ(kv_.stats().num_cached, 2);
  // Both blocks are cached, but the logits of token 7 are needed: only the first block counts.
  EXPECT_EQ(kv_.BeginSequence(SeqId(2), kNs, prompt, 0), 4);
  kv_.CheckInvariants();
  kv_.EndSequence(SeqId(2));
}

TEST_F(KvCacheManagerTest, GeneratedTokensAreCommittedSoTheNextTurnHits) {
  const std::vector<TokenId> turn1 = Range(0, 6);
  const std::vector<TokenId> answer = Range(50, 5);  // generated
  // Prompt and answer computed (the last answer token has no K/V yet).
  const std::vector<TokenId> all = Concat(turn1, answer);
  kv_.BeginSequence(SeqId(1), kNs, turn1, 0);
  ASSERT_TRUE(kv_.Allocate(SeqId(1), 10));
  kv_.Commit(SeqId(1), all, 10);  // slots 0..9: two full blocks
  kv_.EndSequence(SeqId(1));
  kv_.CheckInvariants();
  const std::vector<TokenId> turn2 = Concat(all, Range(200, 4));
  EXPECT_EQ(kv_.BeginSequence(SeqId(2), kNs, turn2, 0), 8);
  kv_.EndSequence(SeqId(2));
}

TEST_F(KvCacheManagerTest, AllocationEvictsOnlyWhatItNeedsLeastRecentFirst) {
  RunSequence(SeqId(1), Range(0, 9));    // caches blocks 0, 1 (block 2 freed)
  RunSequence(SeqId(2), Range(100, 9));  // caches blocks 3, 4 (block 5 freed)
  EXPECT_EQ(kv_.stats().num_cached, 4);
  EXPECT_EQ(kv_.stats().num_free, 4);
  // 5 blocks: 4 free + 1 evicted, the least recently used leaf: block 1 (seq 1's second).
  kv_.BeginSequence(SeqId(3), kNs, Range(500, 20), 0);
  ASSERT_TRUE(kv_.Allocate(SeqId(3), 20));
  kv_.CheckInvariants();
  EXPECT_EQ(kv_.stats().evicted_blocks, 1);
  EXPECT_EQ(Ids(kv_.block_table(SeqId(3))), (std::vector<int>{6, 7, 2, 5, 1}));
  // Only 3 cached blocks are left and nothing is free: 4 more cannot be had. All or nothing.
  kv_.BeginSequence(SeqId(4), kNs, Range(900, 16), 0);
  EXPECT_FALSE(kv_.Allocate(SeqId(4), 16));
  EXPECT_EQ(kv_.stats().num_cached, 3);
  EXPECT_TRUE(kv_.block_table(SeqId(4)).empty());
  kv_.CheckInvariants();
  kv_.EndSequence(SeqId(4));
  kv_.EndSequence(SeqId(3));
  kv_.CheckInvariants();
}

TEST_F(KvCacheManagerTest, ALockedPrefixIsNeverEvicted) {
  RunSequence(SeqId(1), Range(0, 9));  // caches 0, 1
  EXPECT_EQ(kv_.BeginSequence(SeqId(2), kNs, Range(0, 9), 0), 8);  // locks 0, 1
  // Everything else: 6 free blocks. A seventh cannot come from the locked prefix.
  kv_.BeginSequence(SeqId(3), kNs, Range(300, 28), 0);
  EXPECT_FALSE(kv_.Allocate(SeqId(3), 28));
  EXPECT_TRUE(kv_.Allocate(SeqId(3), 24));
  kv_.CheckInvariants();
  EXPECT_EQ(kv_.stats().evicted_blocks, 0);
  kv_.EndSequence(SeqId(2));
  EXPECT_TRUE(kv_.Allocate(SeqId(3), 28));  // now the old prefix may go
  EXPECT_EQ(kv_.stats().evicted_blocks, 1);
  kv_.CheckInvariants();
  kv_.EndSequence(SeqId(3));
  kv_.CheckInvariants();
}

TEST_F(KvCacheManagerTest, ABlockComputedTwiceIsDeduplicatedOnCommit) {
  const std::vector<TokenId> prompt = Range(0, 6);
  // Two sequences start before either has committed: neither hits.
  EXPECT_EQ(kv_.BeginSequence(SeqId(1), kNs, prompt, 0), 0);
  EXPECT_EQ(kv_.BeginSequence(SeqId(2), kNs, prompt, 0), 0);
  ASSERT_TRUE(kv_.Allocate(SeqId(1), 6));  // blocks 0, 1
  ASSERT_TRUE(kv_.Allocate(SeqId(2), 6));  // blocks 2, 3
  kv_.Commit(SeqId(1), prompt, 6);
  kv_.Commit(SeqId(2), prompt, 6);
  kv_.CheckInvariants();
  // Sequence 2 adopted the cached block 0 and freed its duplicate 2; its partial block stays.
  EXPECT_EQ(Ids(kv_.block_table(SeqId(2))), (std::vector<int>{0, 3}));
  EXPECT_EQ(kv_.pool().ref_count(BlockId(0)), 2);
  EXPECT_EQ(kv_.stats().num_free, 5);
  kv_.EndSequence(SeqId(1));
  kv_.EndSequence(SeqId(2));
  kv_.CheckInvariants();
  EXPECT_EQ(kv_.stats().num_cached, 1);
}

TEST_F(KvCacheManagerTest, ForkSharesFullBlocksAndCopiesThePartialOne) {
  const std::vector<TokenId> prompt = Range(0, 6);
  kv_.BeginSequence(SeqId(1), kNs, prompt, 0);
  ASSERT_TRUE(kv_.Allocate(SeqId(1), 6));  // blocks 0, 1
  kv_.Commit(SeqId(1), prompt, 6);
  auto copy = kv_.Fork(SeqId(1), SeqId(2), 6);
  ASSERT_TRUE(copy.ok());
  ASSERT_TRUE(copy->has_value());
  EXPECT_EQ((*copy)->src.value(), 1);
  EXPECT_EQ((*copy)->dst.value(), 2);
  EXPECT_EQ(Ids(kv_.block_table(SeqId(2))), (std::vector<int>{0, 2}));
  EXPECT_EQ(kv_.pool().ref_count(BlockId(0)), 2);
  kv_.CheckInvariants();
  // At a block boundary there is nothing to copy.
  auto aligned = kv_.Fork(SeqId(1), SeqId(3), 4);
  ASSERT_TRUE(aligned.ok());
  EXPECT_FALSE(aligned->has_value());
  kv_.CheckInvariants();
  for (int s = 1; s <= 3; ++s) kv_.EndSequence(SeqId(s));
  kv_.CheckInvariants();
  EXPECT_EQ(kv_.stats().num_in_use, 0);
}

TEST_F(KvCacheManagerTest, NamespacesNeverShare) {
  const std::vector<TokenId> prompt = Range(0, 9);
  RunSequence(SeqId(1), prompt);
  EXPECT_EQ(kv_.BeginSequence(SeqId(2), CacheNamespace{2}, prompt, 0), 0);
  kv_.EndSequence(SeqId(2));
  EXPECT_NE(MakeCacheNamespace({"model", "salt-a"}).value,
            MakeCacheNamespace({"model", "salt-b"}).value);
  EXPECT_NE(MakeCacheNamespace({"ab", "c"}).value, MakeCacheNamespace({"a", "bc"}).value);
}

TEST_F(KvCacheManagerTest, PinsAreKeptWithinTheirShareOfTheCache) {
  // 8 blocks * 0.25 = at most 2 pinned blocks.
  RunSequence(SeqId(1), Range(0, 13));  // caches 0, 1, 2
  EXPECT_EQ(kv_.Pin(kNs, Range(0, 12)).status().code(), StatusCode::kResourceExhausted);
  auto pinned = kv_.Pin(kNs, Range(0, 8));
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(*pinned, 8);
  EXPECT_EQ(kv_.Pin(kNs, Range(700, 8)).status().code(), StatusCode::kNotFound);
  kv_.CheckInvariants();
  EXPECT_EQ(kv_.max_blocks_for_one_sequence(), 6);
  // Allocating everything else evicts block 2 but never the pinned 0 and 1.
  kv_.BeginSequence(SeqId(2), kNs, Range(400, 24), 0);
  EXPECT_TRUE(kv_.Allocate(SeqId(2), 24));
  EXPECT_FALSE(kv_.Allocate(SeqId(2), 28));
  kv_.CheckInvariants();
  EXPECT_EQ(kv_.stats().num_pinned, 2);
  ASSERT_TRUE(kv_.Unpin(kNs, Range(0, 8)).ok());
  EXPECT_EQ(kv_.Unpin(kNs, Range(0, 8)).code(), StatusCode::kNotFound);
  EXPECT_TRUE(kv_.Allocate(SeqId(2), 32));
  kv_.CheckInvariants();
  kv_.EndSequence(SeqId(2));
  kv_.CheckInvariants();
}

// Token-granular hits: with a block copier set, the tokens a prompt shares with a cached block
// it leaves (or ends) inside are reused through a copy into a private block.
class PartialBlockTest : public KvCacheManagerTest {
 protected:
  PartialBlockTest() {
    kv_.set_block_copier([this](BlockId src, BlockId dst) {
      copies_.push_back({src.value(), dst.value()});
    });
  }
  std::vector<std::pair<int, int>> copies_;  // (src, dst)
};

TEST_F(PartialBlockTest, APromptThatLeavesACachedBlockReusesWhatItShares) {
  RunSequence(SeqId(1), Range(100, 8));  // blocks 0 = [100..103], 1 = [104..107]
  // Shares block 0 and three tokens of block 1, then diverges.
  const std::vector<TokenId> prompt = Concat(Range(100, 7), {9, 9, 9});
  EXPECT_EQ(kv_.PeekCachedTokens(kNs, prompt), 7);
  EXPECT_EQ(kv_.BeginSequence(SeqId(2), kNs, prompt, 0), 7);
  kv_.CheckInvariants();
  ASSERT_EQ(copies_.size(), 1u);
  EXPECT_EQ(copies_[0].first, 1);  // from the cached block holding [104..107]
  const std::vector<int> table = Ids(kv_.block_table(SeqId(2)));
  ASSERT_EQ(table.size(), 2u);
  EXPECT_EQ(table[0], 0);                  // shared
  EXPECT_EQ(table[1], copies_[0].second);  // private copy
  EXPECT_NE(table[1], 1);
  ASSERT_TRUE(kv_.Allocate(SeqId(2), 10));
  kv_.Commit(SeqId(2), prompt, 10);
  kv_.CheckInvariants();
  // The private block became full and joined the tree beside the one it was copied from.
  EXPECT_EQ(kv_.PeekCachedTokens(kNs, Concat(prompt, {5})), 8);
  kv_.EndSequence(SeqId(2));
  kv_.CheckInvariants();
  const KvCacheStats st = kv_.stats();
  EXPECT_EQ(st.hit_tokens, 7);
  EXPECT_EQ(st.partial_hit_tokens, 3);
}

TEST_F(PartialBlockTest, AFullyCachedPromptComputesOnlyItsLastToken) {
  const std::vector<TokenId> prompt = Range(0, 8);
  RunSequence(SeqId(1), prompt);
  // Whole blocks alone would give 4 (the last block is needed for the last token's logits).
  EXPECT_EQ(RunSequence(SeqId(2), prompt), 7);
  EXPECT_EQ(copies_.size(), 1u);
  // A prompt ending inside a cached block, and one of a single token (nothing to reuse).
  EXPECT_EQ(RunSequence(SeqId(3), Range(0, 3)), 2);
  EXPECT_EQ(RunSequence(SeqId(4), Range(0, 1)), 0);
  EXPECT_EQ(copies_.size(), 2u);
}

TEST_F(PartialBlockTest, NoRoomForTheCopyMeansWholeBlocksOnly) {
  RunSequence(SeqId(1), Range(0, 8));  // blocks 0, 1 cached
  // Another sequence holds the six other blocks.
  ASSERT_EQ(kv_.BeginSequence(SeqId(2), kNs, Range(1000, 24), 0), 0);
  ASSERT_TRUE(kv_.Allocate(SeqId(2), 24));
  // Block 0 is this prompt's path and block 1 the copy's source: both are locked, so the copy
  // cannot evict its own source to make room, and the hit stops at the whole block.
  EXPECT_EQ(kv_.BeginSequence(SeqId(3), kNs, Range(0, 7), 0), 4);
  EXPECT_TRUE(copies_.empty());
  kv_.CheckInvariants();
  kv_.EndSequence(SeqId(3));
  kv_.EndSequence(SeqId(2));
  kv_.CheckInvariants();
  EXPECT_EQ(kv_.stats().num_cached, 2);
}

TEST_F(PartialBlockTest, TheHolderOfATierLoadAndTheOffSwitchTakeWholeBlocks) {
  RunSequence(SeqId(1), Range(0, 8));
  EXPECT_EQ(kv_.BeginSequence(SeqId(2), kNs, Range(0, 7), 0, /*count_tokens=*/false,
                              /*partial_block=*/false),
            4);
  kv_.EndSequence(SeqId(2));
  KvCacheManager off(KvCacheConfig{8, 4, true, EvictionPolicyKind::kLru, 0.25,
                                   /*partial_block_hits=*/false});
  off.set_block_copier([this](BlockId src, BlockId dst) {
    copies_.push_back({src.value(), dst.value()});
  });
  off.BeginSequence(SeqId(1), kNs, Range(0, 8), 0);
  ASSERT_TRUE(off.Allocate(SeqId(1), 8));
  off.Commit(SeqId(1), Range(0, 8), 8);
  off.EndSequence(SeqId(1));
  EXPECT_EQ(off.BeginSequence(SeqId(2), kNs, Range(0, 7), 0), 4);
  off.EndSequence(SeqId(2));
  EXPECT_TRUE(copies_.empty());
}

class NoPrefixCachingTest : public KvCacheManagerTest {
 protected:
  NoPrefixCachingTest() : KvCacheManagerTest(KvCacheConfig{8, 4, false}) {}
};

TEST_F(NoPrefixCachingTest, SameFacadeButNothingIsMatchedOrKept) {
  const std::vector<TokenId> prompt = Range(0, 9);
  EXPECT_EQ(RunSequence(SeqId(1), prompt), 0);
  EXPECT_EQ(RunSequence(SeqId(2), prompt), 0);
  const KvCacheStats st = kv_.stats();
  EXPECT_EQ(st.num_free, 8);
  EXPECT_EQ(st.num_cached, 0);
  EXPECT_EQ(st.query_tokens, 0);
  EXPECT_FALSE(kv_.Pin(kNs, prompt).ok());
  // Fork still shares full blocks by reference count.
  kv_.BeginSequence(SeqId(3), kNs, prompt, 0);
  ASSERT_TRUE(kv_.Allocate(SeqId(3), 9));
  ASSERT_TRUE(kv_.Fork(SeqId(3), SeqId(4), 9).ok());
  EXPECT_EQ(kv_.stats().num_in_use, 4);
  kv_.CheckInvariants();
  kv_.EndSequence(SeqId(3));
  kv_.EndSequence(SeqId(4));
  EXPECT_EQ(kv_.stats().num_free, 8);
}

// Eviction inside a sequence (EvictBlocks): blocks of 4, a cache of 8.
TEST(KvCacheManagerEvict, DropsBlocksFromTheMiddleAndMovesTheRestDown) {
  KvCacheManager kv(KvCacheConfig{8, 4, /*prefix caching=*/false});
  const std::vector<TokenId> tokens = Range(0, 16);
  kv.BeginSequence(SeqId(1), kNs, tokens, 0);
  ASSERT_TRUE(kv.Allocate(SeqId(1), 16));
  const std::vector<int> before = Ids(kv.block_table(SeqId(1)));
  const std::optional<BlockEviction> e = kv.EvictBlocks(SeqId(1), 1, 2);
  ASSERT_TRUE(e.has_value());
  kv.CheckInvariants();
  EXPECT_TRUE(e->copies.empty());  // nothing shared
  EXPECT_EQ(e->evicted_tokens, 8);
  EXPECT_EQ(Ids(e->moved), (std::vector<int>{before[3]}));
  EXPECT_EQ(Ids(kv.block_table(SeqId(1))), (std::vector<int>{before[0], before[3]}));
  EXPECT_EQ(kv.evicted_tokens(SeqId(1)), 8);
  EXPECT_EQ(kv.stats().num_free, 6);
  // Token counts go on from the first token: 20 tokens are 12 slots, three blocks.
  ASSERT_TRUE(kv.Allocate(SeqId(1), 20));
  EXPECT_EQ(kv.block_table(SeqId(1)).size(), 3u);
  kv.Shrink(SeqId(1), 16);  // 8 slots: two blocks
  EXPECT_EQ(kv.block_table(SeqId(1)).size(), 2u);
  kv.EndSequence(SeqId(1));
  kv.CheckInvariants();
  EXPECT_EQ(kv.stats().num_free, 8);
}

TEST(KvCacheManagerEvict, CommittedBlocksAreCopiedBeforeTheyMoveAndStayValidInTheTree) {
  KvCacheManager kv(KvCacheConfig{8, 4, true});
  std::vector<std::pair<int, int>> copied;
  kv.set_block_copier([&](BlockId s, BlockId d) { copied.push_back({s.value(), d.value()}); });
  const std::vector<TokenId> tokens = Range(0, 16);
  kv.BeginSequence(SeqId(1), kNs, tokens, 0);
  ASSERT_TRUE(kv.Allocate(SeqId(1), 16));
  kv.Commit(SeqId(1), tokens, 16);  // all four blocks in the tree
  const std::vector<int> before = Ids(kv.block_table(SeqId(1)));
  const std::optional<BlockEviction> e = kv.EvictBlocks(SeqId(1), 1, 2);
  ASSERT_TRUE(e.has_value());
  kv.CheckInvariants();
  // Block 3 moves and the tree holds it: the sequence now has a private copy of it.
  ASSERT_EQ(e->copies.size(), 1u);
  EXPECT_EQ(e->copies[0].src.value(), before[3]);
  const int copy = e->copies[0].dst.value();
  EXPECT_EQ(Ids(e->moved), (std::vector<int>{copy}));
  EXPECT_EQ(Ids(kv.block_table(SeqId(1))), (std::vector<int>{before[0], copy}));
  KvCacheStats st = kv.stats();
  EXPECT_EQ(st.num_in_use, 2);   // block 0 (shared with the tree) and the copy
  EXPECT_EQ(st.num_cached, 3);   // blocks 1-3 stay cached: what was computed before is valid
  // Nothing more is committed, even when the sequence goes on.
  std::vector<TokenId> longer = Concat(tokens, Range(16, 8));
  ASSERT_TRUE(kv.Allocate(SeqId(1), 24));
  kv.Commit(SeqId(1), longer, 24);
  kv.CheckInvariants();
  EXPECT_EQ(kv.tree()->num_nodes(), 4);
  // Another request over the same tokens still hits the blocks computed before the eviction.
  EXPECT_EQ(kv.BeginSequence(SeqId(2), kNs, Concat(tokens, {99}), 0), 16);
  EXPECT_EQ(Ids(kv.block_table(SeqId(2))), before);
  kv.EndSequence(SeqId(2));
  kv.EndSequence(SeqId(1));
  kv.CheckInvariants();
  EXPECT_EQ(kv.stats().num_in_use, 0);
  EXPECT_TRUE(copied.empty());  // the engine copies eviction's bytes, not the copier
}

TEST(KvCacheManagerEvict, BlocksSharedWithAParallelSampleAreCopiedAndTheSampleKeepsItsOwn) {
  KvCacheManager kv(KvCacheConfig{8, 4, false});
  kv.BeginSequence(SeqId(1), kNs, Range(0, 12), 0);
  ASSERT_TRUE(kv.Allocate(SeqId(1), 12));
  ASSERT_TRUE(kv.Fork(SeqId(1), SeqId(2), 12).ok());  // shares all three full blocks
  const std::vector<int> shared = Ids(kv.block_table(SeqId(2)));
  const std::optional<BlockEviction> e = kv.EvictBlocks(SeqId(1), 0, 1);
  ASSERT_TRUE(e.has_value());
  kv.CheckInvariants();
  EXPECT_EQ(e->copies.size(), 2u);  // blocks 1 and 2 move: both are the sample's too
  EXPECT_EQ(Ids(kv.block_table(SeqId(2))), shared);
  for (int b : Ids(kv.block_table(SeqId(1)))) {
    EXPECT_EQ(std::count(shared.begin(), shared.end(), b), 0);
  }
  kv.EndSequence(SeqId(1));
  kv.EndSequence(SeqId(2));
  kv.CheckInvariants();
  EXPECT_EQ(kv.stats().num_free, 8);
}

TEST(KvCacheManagerEvict, WithoutBlocksForTheCopiesNothingChanges) {
  KvCacheManager kv(KvCacheConfig{4, 4, false});
  kv.BeginSequence(SeqId(1), kNs, Range(0, 12), 0);
  ASSERT_TRUE(kv.Allocate(SeqId(1), 12));
  ASSERT_TRUE(kv.Fork(SeqId(1), SeqId(2), 12).ok());
  ASSERT_TRUE(kv.Allocate(SeqId(2), 13));  // the last free block
  const std::vector<int> before = Ids(kv.block_table(SeqId(1)));
  EXPECT_FALSE(kv.EvictBlocks(SeqId(1), 0, 1).has_value());
  EXPECT_EQ(Ids(kv.block_table(SeqId(1))), before);
  EXPECT_EQ(kv.evicted_tokens(SeqId(1)), 0);
  kv.CheckInvariants();
}

TEST(KvCacheManagerEvict, AHitIsCappedAtTheBudget) {
  KvCacheManager kv(KvCacheConfig{8, 4, true});
  const std::vector<TokenId> tokens = Range(0, 20);
  EXPECT_EQ(kv.BeginSequence(SeqId(1), kNs, tokens, 0), 0);
  ASSERT_TRUE(kv.Allocate(SeqId(1), 20));
  kv.Commit(SeqId(1), tokens, 20);
  kv.EndSequence(SeqId(1));
  EXPECT_EQ(kv.BeginSequence(SeqId(2), kNs, tokens, 0, true, true, /*max_hit_tokens=*/8), 8);
  EXPECT_EQ(kv.block_table(SeqId(2)).size(), 2u);
  kv.EndSequence(SeqId(2));
  kv.CheckInvariants();
}

}  // namespace kv_cache_manager_test
}  // namespace
}  // namespace kvserve
