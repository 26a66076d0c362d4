#include "router/block_index.h"

#include <gtest/gtest.h>

namespace kvserve::router {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

KvEventBatch Stored(std::vector<uint64_t> hashes, std::string medium = "GPU", int block_size = 4) {
  KvEventBatch b;
  BlockStoredEvent e;
  e.block_hashes = std::move(hashes);
  e.block_size = block_size;
  e.medium = std::move(medium);
  b.events.emplace_back(std::move(e));
  return b;
}

KvEventBatch Removed(std::vector<uint64_t> hashes, std::string medium = "GPU") {
  KvEventBatch b;
  b.events.emplace_back(BlockRemovedEvent{std::move(hashes), std::move(medium)});
  return b;
}

KvEventBatch Cleared() {
  KvEventBatch b;
  b.events.emplace_back(AllBlocksClearedEvent{});
  return b;
}

struct FakeClock {
  steady_clock::time_point now{};
  std::function<steady_clock::time_point()> fn() {
    return [this] { return now; };
  }
};

BlockIndex MakeIndex(int n, FakeClock* clock = nullptr, milliseconds ttl = milliseconds(1000)) {
  BlockIndexConfig c;
  c.num_replicas = n;
  c.pending_ttl = ttl;
  if (clock != nullptr) c.clock = clock->fn();
  return BlockIndex(c);
}

TEST(BlockIndexTest, StoredBlocksMatchAsAPrefixAndStopAtTheFirstMiss) {
  BlockIndex index = MakeIndex(2);
  index.Apply(0, Stored({1, 2, 3}));
  index.Apply(1, Stored({1, 9}));
  const std::vector<uint64_t> prompt = {1, 2, 3, 4};
  EXPECT_EQ(index.MatchPrefix(0, prompt), 3u);
  EXPECT_EQ(index.MatchPrefix(1, prompt), 1u);
  const std::vector<uint64_t> gap = {1, 5, 2};
  EXPECT_EQ(index.MatchPrefix(0, gap), 1u);  // block 2's hash past a miss is another prefix
  EXPECT_EQ(index.NumStoredBlocks(0), 3u);
  EXPECT_EQ(index.block_size(), 4);
}

TEST(BlockIndexTest, RemovedBlocksLeaveAndClearedEmptiesOnlyThatReplica) {
  BlockIndex index = MakeIndex(2);
  index.Apply(0, Stored({1, 2, 3}));
  index.Apply(1, Stored({1, 2}));
  index.Apply(0, Removed({2}));
  const std::vector<uint64_t> prompt = {1, 2, 3};
  EXPECT_EQ(index.MatchPrefix(0, prompt), 1u);
  EXPECT_EQ(index.NumStoredBlocks(0), 2u);
  index.Apply(0, Removed({42}));  // unknown: nothing happens
  EXPECT_EQ(index.NumStoredBlocks(0), 2u);
  index.Apply(0, Cleared());
  EXPECT_EQ(index.NumStoredBlocks(0), 0u);
  EXPECT_EQ(index.MatchPrefix(1, prompt), 2u);
}

TEST(BlockIndexTest, ABlockStaysWhileAnyMediumHoldsIt) {
  BlockIndex index = MakeIndex(1);
  index.Apply(0, Stored({1}, "GPU"));
  index.Apply(0, Stored({1}, "DISK"));
  index.Apply(0, Removed({1}, "GPU"));  // evicted from RAM, still on disk
  EXPECT_EQ(index.NumStoredBlocks(0), 1u);
  index.Apply(0, Removed({1}, "DISK"));
  EXPECT_EQ(index.NumStoredBlocks(0), 0u);
}

// kvserve's media (docs/kv_events.md): RAM is "GPU", its lower tiers "DISK" and "REDIS". A
// lower tier's BlockRemoved is not a RAM removal, and a prefix counts blocks on any medium (a
// load beats a recompute).
TEST(BlockIndexTest, ALowerTierRemovalLeavesTheRamBlockAndAPrefixSpansMedia) {
  BlockIndex index = MakeIndex(1);
  index.Apply(0, Stored({1, 2}, "GPU"));
  index.Apply(0, Stored({1, 2, 3}, "DISK"));
  index.Apply(0, Stored({4}, "REDIS"));
  index.Apply(0, Removed({1, 2}, "DISK"));  // the disk evicted them; RAM still holds them
  const std::vector<uint64_t> prompt = {1, 2, 3, 4, 5};
  EXPECT_EQ(index.MatchPrefix(0, prompt), 4u);  // GPU, GPU, DISK, REDIS
  index.Apply(0, Removed({3}, "GPU"));          // never in RAM: the disk still has it
  EXPECT_EQ(index.MatchPrefix(0, prompt), 4u);
  index.Apply(0, Cleared());  // a restart clears every medium
  EXPECT_EQ(index.MatchPrefix(0, prompt), 0u);
}

// A shared tier (Redis) counts for the replica that announced a block only.
TEST(BlockIndexTest, ASharedTiersBlocksCountForTheAnnouncingReplicaOnly) {
  BlockIndex index = MakeIndex(2);
  index.Apply(0, Stored({1, 2}, "REDIS"));
  const std::vector<uint64_t> prompt = {1, 2};
  EXPECT_EQ(index.MatchPrefix(0, prompt), 2u);
  EXPECT_EQ(index.MatchPrefix(1, prompt), 0u);
}

TEST(BlockIndexTest, EventsWithoutMediumPairWithEachOther) {
  BlockIndex index = MakeIndex(1);
  index.Apply(0, Stored({1, 2}, ""));
  index.Apply(0, Removed({1}, ""));
  EXPECT_EQ(index.NumStoredBlocks(0), 1u);
}

TEST(BlockIndexTest, TheFirstBlockSizeIsTheFleetsAndOthersAreCounted) {
  BlockIndex index = MakeIndex(2);
  EXPECT_EQ(index.block_size(), 0);
  index.Apply(0, Stored({1}, "GPU", 16));
  index.Apply(1, Stored({2}, "GPU", 32));
  EXPECT_EQ(index.block_size(), 16);
  EXPECT_EQ(index.num_block_size_mismatches(), 1u);
}

TEST(BlockIndexTest, PendingBlocksMatchUntilTheirTtlRunsOut) {
  FakeClock clock;
  BlockIndex index = MakeIndex(2, &clock, milliseconds(1000));
  const std::vector<uint64_t> prompt = {1, 2, 3};
  index.AddPending(1, prompt);
  EXPECT_EQ(index.MatchPrefix(1, prompt), 3u);
  EXPECT_EQ(index.MatchPrefix(0, prompt), 0u);
  EXPECT_EQ(index.NumBlocks(1), 3u);
  EXPECT_EQ(index.NumStoredBlocks(1), 0u);
  clock.now += milliseconds(999);
  EXPECT_EQ(index.MatchPrefix(1, prompt), 3u);
  clock.now += milliseconds(1);
  EXPECT_EQ(index.MatchPrefix(1, prompt), 0u);
  index.AddPending(1, std::vector<uint64_t>{7});  // prunes the lapsed ones
  EXPECT_EQ(index.NumBlocks(1), 1u);
}

TEST(BlockIndexTest, StoredAndRemovedEventsSettlePendingBlocks) {
  FakeClock clock;
  BlockIndex index = MakeIndex(1, &clock);
  const std::vector<uint64_t> prompt = {1, 2, 3};
  index.AddPending(0, prompt);
  index.Apply(0, Stored({1}));   // confirmed: stored from now on
  index.Apply(0, Removed({2}));  // the replica dropped it (or never kept it)
  EXPECT_EQ(index.MatchPrefix(0, prompt), 1u);
  EXPECT_EQ(index.NumBlocks(0), 2u);  // 1 stored, 3 still pending
  clock.now += milliseconds(5000);
  EXPECT_EQ(index.MatchPrefix(0, prompt), 1u);
  index.Clear(0);
  EXPECT_EQ(index.NumBlocks(0), 0u);
}

TEST(BlockIndexTest, AReaddedPendingBlockLivesFromItsLastAdd) {
  FakeClock clock;
  BlockIndex index = MakeIndex(1, &clock, milliseconds(1000));
  const std::vector<uint64_t> prompt = {1};
  index.AddPending(0, prompt);
  clock.now += milliseconds(600);
  index.AddPending(0, prompt);
  clock.now += milliseconds(600);
  index.AddPending(0, std::vector<uint64_t>{});  // prunes: the first entry lapsed, the second not
  EXPECT_EQ(index.MatchPrefix(0, prompt), 1u);
  EXPECT_EQ(index.NumBlocks(0), 1u);
}

}  // namespace
}  // namespace kvserve::router
