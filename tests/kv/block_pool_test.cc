#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvserve {
namespace {

std::vector<int> Ids(const std::vector<BlockId>& v) {
  std::vector<int> out;
  for (BlockId b : v) out.push_back(b.value());
  return out;
}

TEST(BlockPool, HandsOutBlocksInIdOrderAtStart) {
  BlockPool pool(4);
  pool.CheckInvariants();
  EXPECT_EQ(pool.Allocate()->value(), 0);
  EXPECT_EQ(pool.Allocate()->value(), 1);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.num_in_use(), 2);
  pool.CheckInvariants();
}

TEST(BlockPool, ReleasedBlocksGoToTheTailOfTheFreeList) {
  BlockPool pool(4);
  const BlockId a = *pool.Allocate();  // 0
  const BlockId b = *pool.Allocate();  // 1
  pool.Release(b);
  pool.CheckInvariants();
  EXPECT_EQ(Ids(pool.FreeListOrder()), (std::vector<int>{2, 3, 1}));
  pool.Release(a);
  EXPECT_EQ(Ids(pool.FreeListOrder()), (std::vector<int>{2, 3, 1, 0}));
  EXPECT_EQ(pool.Allocate()->value(), 2);
  pool.CheckInvariants();
}

TEST(BlockPool, SharedBlockIsFreedOnlyByTheLastReference) {
  BlockPool pool(2);
  const BlockId a = *pool.Allocate();
  pool.AddRef(a);
  EXPECT_EQ(pool.ref_count(a), 2);
  pool.Release(a);
  EXPECT_EQ(pool.ref_count(a), 1);
  EXPECT_EQ(pool.num_free(), 1);
  pool.Release(a);
  EXPECT_EQ(pool.num_free(), 2);
  pool.CheckInvariants();
}

TEST(BlockPool, ExhaustionIsAnOrdinaryResult) {
  BlockPool pool(2);
  std::vector<BlockId> got;
  EXPECT_FALSE(pool.AllocateN(3, &got));
  EXPECT_TRUE(got.empty());  // all or nothing
  EXPECT_TRUE(pool.AllocateN(2, &got));
  EXPECT_FALSE(pool.Allocate().has_value());
  pool.CheckInvariants();
}

TEST(BlockPool, ACachedBlockIsNeitherFreeNorInUseUntilEvicted) {
  BlockPool pool(3);
  const BlockId a = *pool.Allocate();  // 0
  pool.MarkCached(a);
  pool.Release(a);  // cached-evictable: off the free list, ref 0
  pool.CheckInvariants();
  EXPECT_EQ(pool.num_cached(), 1);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.num_in_use(), 0);
  EXPECT_EQ(Ids(pool.FreeListOrder()), (std::vector<int>{1, 2}));
  pool.AddRef(a);  // reused by a request that hit the prefix cache
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_EQ(pool.num_in_use(), 1);
  pool.Release(a);
  pool.Evict(a);  // the prefix cache lets it go: it joins the free list's tail
  pool.CheckInvariants();
  EXPECT_FALSE(pool.is_cached(a));
  EXPECT_EQ(Ids(pool.FreeListOrder()), (std::vector<int>{1, 2, 0}));
}

TEST(BlockPoolDeathTest, EvictingABlockInUseIsACheckFailure) {
  BlockPool pool(1);
  const BlockId a = *pool.Allocate();
  pool.MarkCached(a);
  EXPECT_DEATH(pool.Evict(a), "evict of block 0");
}

TEST(BlockPoolDeathTest, DoubleReleaseIsACheckFailure) {
  BlockPool pool(1);
  const BlockId a = *pool.Allocate();
  pool.Release(a);
  EXPECT_DEATH(pool.Release(a), "release of free block 0");
}

}  // namespace
}  // namespace kvserve
