// RadixTree as a specification: blocks of 2 tokens, exact block ids, exact eviction orders, and
// CheckInvariants() after every operation.
#include "prefix/radix_tree.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvserve {
namespace {
// The test executables are unity builds: this file's helpers stay apart from its neighbours'.
namespace radix_tree_test {

constexpr CacheNamespace kNs{7};

std::vector<int> Ids(const std::vector<BlockId>& v) {
  std::vector<int> out;
  for (BlockId b : v) out.push_back(b.value());
  return out;
}

class RadixTreeTest : public ::testing::Test {
 protected:
  explicit RadixTreeTest(EvictionPolicyKind kind = EvictionPolicyKind::kLru)
      : pool_(8), tree_(2, MakeEvictionPolicy(kind), &pool_) {}

  // Inserts one block of `tokens` under parent, with a fresh block that the tree then owns
  // alone (ref 0: cached-evictable).
  RadixTree::Node* Add(RadixTree::Node* parent, std::vector<TokenId> tokens) {
    const BlockId b = *pool_.Allocate();
    RadixTree::Node* n = tree_.AddChild(kNs, parent, tokens, b);
    pool_.Release(b);
    Check();
    return n;
  }
  void Check() {
    pool_.CheckInvariants();
    tree_.CheckInvariants();
  }

  BlockPool pool_;
  RadixTree tree_;
};

TEST_F(RadixTreeTest, MatchFindsTheLongestCachedFullBlockPrefix) {
  RadixTree::Node* a = Add(nullptr, {1, 2});  // block 0
  Add(a, {3, 4});                             // block 1
  EXPECT_EQ(tree_.Match(kNs, std::vector<TokenId>{1, 2, 3, 4, 5}, 10).size(), 2u);
  EXPECT_EQ(tree_.Match(kNs, std::vector<TokenId>{1, 2, 3, 9}, 10).size(), 1u);
  EXPECT_EQ(tree_.Match(kNs, std::vector<TokenId>{1, 2, 3}, 10).size(), 1u);  // 3 is no block
  EXPECT_EQ(tree_.Match(kNs, std::vector<TokenId>{1, 2, 3, 4}, 1).size(), 1u);  // capped
  EXPECT_TRUE(tree_.Match(CacheNamespace{8}, std::vector<TokenId>{1, 2, 3, 4}, 10).empty());
  EXPECT_EQ(pool_.num_cached(), 2);
  EXPECT_EQ(pool_.num_free(), 6);
}

TEST_F(RadixTreeTest, LockingANodePinsItsWholePath) {
  RadixTree::Node* a = Add(nullptr, {1, 2});
  RadixTree::Node* b = Add(a, {3, 4});
  RadixTree::Node* c = Add(b, {5, 6});
  EXPECT_EQ(tree_.num_evictable(), 3);
  tree_.Lock(c);
  Check();
  EXPECT_EQ(RadixTree::lock_ref(a), 1);
  EXPECT_EQ(RadixTree::lock_ref(b), 1);
  EXPECT_EQ(RadixTree::lock_ref(c), 1);
  EXPECT_EQ(tree_.num_protected(), 3);
  EXPECT_EQ(tree_.num_evictable(), 0);
  EXPECT_EQ(tree_.Evict(3), 0);
  tree_.Lock(a);  // a second user of the first block only
  tree_.Unlock(c);
  Check();
  EXPECT_EQ(tree_.num_protected(), 1);
  EXPECT_EQ(tree_.num_evictable(), 2);
  EXPECT_EQ(tree_.Evict(5), 2);  // c then b; a stays locked
  Check();
  EXPECT_EQ(Ids(pool_.FreeListOrder()), (std::vector<int>{3, 4, 5, 6, 7, 2, 1}));
  tree_.Unlock(a);
  EXPECT_EQ(tree_.Evict(1), 1);
  Check();
  EXPECT_EQ(tree_.num_nodes(), 0);
}

TEST_F(RadixTreeTest, EvictsOnlyLeavesLeastRecentlyUsedFirst) {
  RadixTree::Node* a = Add(nullptr, {1, 2});  // block 0
  RadixTree::Node* b = Add(a, {3, 4});        // block 1
  Add(a, {5, 6});                             // block 2
  Add(nullptr, {9, 9});                       // block 3
  // Candidates are the leaves only, oldest access first; a is an inner node.
  EXPECT_EQ(Ids(tree_.EvictionOrder()), (std::vector<int>{1, 2, 3}));
  tree_.Lock(b);
  tree_.Unlock(b);  // b (and a) used just now
  Check();
  EXPECT_EQ(Ids(tree_.EvictionOrder()), (std::vector<int>{2, 3, 1}));
  EXPECT_EQ(tree_.Evict(1), 1);  // c
  EXPECT_EQ(Ids(tree_.EvictionOrder()), (std::vector<int>{3, 1}));
  EXPECT_EQ(tree_.Evict(2), 2);  // d, then b; now a is a leaf
  Check();
  EXPECT_EQ(Ids(tree_.EvictionOrder()), (std::vector<int>{0}));
  EXPECT_EQ(tree_.Evict(1), 1);
  Check();
  EXPECT_EQ(tree_.num_evicted(), 4);
  EXPECT_EQ(pool_.num_free(), 8);
}

class LfuTreeTest : public RadixTreeTest {
 protected:
  LfuTreeTest() : RadixTreeTest(EvictionPolicyKind::kLfu) {}
};

TEST_F(LfuTreeTest, EvictsTheLeastFrequentlyUsedLeafFirst) {
  RadixTree::Node* a = Add(nullptr, {1, 2});  // block 0
  RadixTree::Node* b = Add(nullptr, {3, 4});  // block 1
  for (int i = 0; i < 3; ++i) tree_.Touch(a, 0);
  tree_.Touch(b, 0);  // b is the most recent, but a is used more often
  Check();
  EXPECT_EQ(Ids(tree_.EvictionOrder()), (std::vector<int>{1, 0}));
}

class PriorityTreeTest : public RadixTreeTest {
 protected:
  PriorityTreeTest() : RadixTreeTest(EvictionPolicyKind::kPriority) {}
};

TEST_F(PriorityTreeTest, KeepsBlocksOfHighPriorityRequestsLonger) {
  RadixTree::Node* hi = Add(nullptr, {1, 2});  // block 0
  RadixTree::Node* lo = Add(nullptr, {3, 4});  // block 1
  tree_.Touch(hi, 5);
  tree_.Touch(lo, 0);  // more recent, lower priority
  Check();
  EXPECT_EQ(Ids(tree_.EvictionOrder()), (std::vector<int>{1, 0}));
  EXPECT_EQ(tree_.Evict(1), 1);
  EXPECT_EQ(RadixTree::usage(hi).priority, 5);
  Check();
}

TEST_F(RadixTreeTest, PinnedPathsAreKeptUntilUnpinned) {
  RadixTree::Node* a = Add(nullptr, {1, 2});
  RadixTree::Node* b = Add(a, {3, 4});
  Add(nullptr, {5, 6});
  tree_.Pin(b);
  Check();
  EXPECT_EQ(tree_.num_pinned(), 2);
  EXPECT_EQ(tree_.num_evictable(), 1);
  EXPECT_EQ(tree_.Evict(3), 1);
  EXPECT_EQ(tree_.num_nodes(), 2);
  tree_.Unpin(b);
  Check();
  EXPECT_EQ(tree_.Evict(3), 2);
  Check();
}

TEST_F(RadixTreeTest, NamespacesAreSeparateTrees) {
  const BlockId b0 = *pool_.Allocate();
  const BlockId b1 = *pool_.Allocate();
  ASSERT_NE(tree_.AddChild(CacheNamespace{1}, nullptr, std::vector<TokenId>{1, 2}, b0), nullptr);
  ASSERT_NE(tree_.AddChild(CacheNamespace{2}, nullptr, std::vector<TokenId>{1, 2}, b1), nullptr);
  pool_.Release(b0);
  pool_.Release(b1);
  Check();
  const auto m1 = tree_.Match(CacheNamespace{1}, std::vector<TokenId>{1, 2}, 1);
  const auto m2 = tree_.Match(CacheNamespace{2}, std::vector<TokenId>{1, 2}, 1);
  ASSERT_EQ(m1.size(), 1u);
  ASSERT_EQ(m2.size(), 1u);
  EXPECT_EQ(RadixTree::block(m1[0]).value(), 0);
  EXPECT_EQ(RadixTree::block(m2[0]).value(), 1);
}

TEST(EvictionPolicy, ParsesTheThreeNames) {
  EXPECT_EQ(*ParseEvictionPolicy("lru"), EvictionPolicyKind::kLru);
  EXPECT_EQ(*ParseEvictionPolicy("lfu"), EvictionPolicyKind::kLfu);
  EXPECT_EQ(*ParseEvictionPolicy("priority"), EvictionPolicyKind::kPriority);
  auto bad = ParseEvictionPolicy("fifo");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("lru"), std::string::npos);
}

}  // namespace radix_tree_test
}  // namespace
}  // namespace kvserve
