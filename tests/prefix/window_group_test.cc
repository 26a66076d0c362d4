// KvCacheManager with a window group (kv_cache_manager.h, "the window group"): the layers that
// read only their last `window_reach` slots keep blocks in a pool of their own. The tests hold a
// stand-in for the K/V bytes (each slot holds the token written there, in both groups, copies
// made by the copiers) and check what every query would read: all earlier slots in the main
// blocks, the last window_reach slots in the window blocks, each holding exactly the
// sequence's tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kv_test_util.h"
#include "prefix/kv_cache_manager.h"

namespace kvserve {
namespace {
namespace window_group_test {

constexpr CacheNamespace kNs{1};
constexpr int kBlock = 4;
constexpr int kReach = 8;  // a query at slot p reads window slots [p - 7, p]

using testing_util::Range;

// The bytes: slot s of block b holds the token computed there (-1 = never written).
struct FakeKv {
  FakeKv(int main_blocks, int window_blocks)
      : main(static_cast<size_t>(main_blocks), std::vector<TokenId>(kBlock, -1)),
        window(static_cast<size_t>(window_blocks), std::vector<TokenId>(kBlock, -1)) {}
  std::vector<std::vector<TokenId>> main, window;
};

class WindowGroupTest : public ::testing::Test {
 protected:
  explicit WindowGroupTest(int main_blocks = 32, int window_blocks = 12)
      : bytes_(main_blocks, window_blocks), kv_(Config(main_blocks, window_blocks)) {
    kv_.set_block_copier([this](BlockId s, BlockId d) {
      bytes_.main[static_cast<size_t>(d.value())] = bytes_.main[static_cast<size_t>(s.value())];
    });
    kv_.set_window_block_copier([this](BlockId s, BlockId d) {
      bytes_.window[static_cast<size_t>(d.value())] = bytes_.window[static_cast<size_t>(s.value())];
    });
  }

  static KvCacheConfig Config(int main_blocks, int window_blocks) {
    KvCacheConfig c{main_blocks, kBlock, true};
    c.num_window_blocks = window_blocks;
    c.window_reach = kReach;
    return c;
  }

  // What the queries of tokens[from, to) read is the sequence's own tokens.
  void ExpectReadsOwnTokens(SeqId seq, const std::vector<TokenId>& tokens, int from, int to) {
    const auto table = kv_.block_table(seq);
    const auto wtable = kv_.window_table(seq);
    ASSERT_EQ(table.size(), wtable.size());
    for (int p = from; p < to; ++p) {
      for (int s = 0; s < p; ++s) {
        ASSERT_EQ(bytes_.main[static_cast<size_t>(table[s / kBlock].value())][s % kBlock],
                  tokens[static_cast<size_t>(s)])
            << "main slot " << s << " read by " << p;
      }
      for (int s = std::max(0, p - kReach + 1); s < p; ++s) {
        const BlockId w = wtable[static_cast<size_t>(s / kBlock)];
        ASSERT_TRUE(w.valid()) << "window slot " << s << " read by " << p << " was released";
        ASSERT_EQ(bytes_.window[static_cast<size_t>(w.value())][s % kBlock],
                  tokens[static_cast<size_t>(s)])
            << "window slot " << s << " read by " << p;
      }
    }
  }

  // One step: computes tokens [done, to) (checking what they read), then commits.
  void Step(SeqId seq, const std::vector<TokenId>& tokens, int done, int to) {
    ASSERT_TRUE(kv_.Allocate(seq, to));
    kv_.CheckInvariants();
    const auto table = kv_.block_table(seq);
    const auto wtable = kv_.window_table(seq);
    for (int s = done; s < to; ++s) {
      bytes_.main[static_cast<size_t>(table[s / kBlock].value())][s % kBlock] = tokens[s];
      const BlockId w = wtable[static_cast<size_t>(s / kBlock)];
      ASSERT_TRUE(w.valid());
      bytes_.window[static_cast<size_t>(w.value())][s % kBlock] = tokens[s];
    }
    ExpectReadsOwnTokens(seq, tokens, done, to);
    kv_.Commit(seq, tokens, to);
    kv_.CheckInvariants();
  }

  // Begins, prefills in one step, decodes the rest one token a step, ends. Returns the hit.
  int Run(SeqId seq, const std::vector<TokenId>& tokens, int prompt) {
    const int hit = kv_.BeginSequence(seq, kNs, std::span(tokens).first(prompt), 0);
    kv_.CheckInvariants();
    Step(seq, tokens, hit, prompt);
    for (int n = prompt; n < static_cast<int>(tokens.size()); ++n) Step(seq, tokens, n, n + 1);
    kv_.EndSequence(seq);
    kv_.CheckInvariants();
    return hit;
  }

  FakeKv bytes_;
  KvCacheManager kv_;
};

TEST_F(WindowGroupTest, ALongDecodeHoldsOnlyItsWindowInTheWindowPool) {
  const std::vector<TokenId> tokens = Range(100, 60);
  const SeqId seq(1);
  EXPECT_EQ(kv_.BeginSequence(seq, kNs, std::span(tokens).first(4), 0), 0);
  Step(seq, tokens, 0, 4);
  for (int n = 4; n < 60; ++n) {
    Step(seq, tokens, n, n + 1);
    const KvCacheStats st = kv_.stats();
    EXPECT_EQ(st.num_in_use, (n + 1 + kBlock - 1) / kBlock);  // the main blocks keep all
    // The window's blocks: those holding slots [n + 1 - 7, n] plus the block being filled.
    EXPECT_LE(st.window_in_use, (kReach - 1 + kBlock - 1) / kBlock + 2) << n;
  }
  const auto wtable = kv_.window_table(seq);
  EXPECT_FALSE(wtable[0].valid());
  EXPECT_TRUE(wtable.back().valid());
  kv_.EndSequence(seq);
  kv_.CheckInvariants();
}

TEST_F(WindowGroupTest, AHitRestoresTheWindowAtTheMatchedDepth) {
  const std::vector<TokenId> first = Range(100, 24);
  EXPECT_EQ(Run(SeqId(1), first, 12), 0);
  // A second turn: the whole first conversation and more. Its window blocks stayed cached.
  std::vector<TokenId> second = first;
  for (TokenId t : Range(500, 9)) second.push_back(t);
  const int hit = kv_.BeginSequence(SeqId(2), kNs, second, 0);
  EXPECT_EQ(hit, 24);
  const auto wtable = kv_.window_table(SeqId(2));
  EXPECT_FALSE(wtable[0].valid());  // before the window at slot 24: never referenced
  kv_.CheckInvariants();
  Step(SeqId(2), second, hit, 33);
  kv_.EndSequence(SeqId(2));
  kv_.CheckInvariants();
}

TEST_F(WindowGroupTest, TokenGranularHitsCopyTheWindowBlockToo) {
  const std::vector<TokenId> first = Range(100, 24);
  EXPECT_EQ(Run(SeqId(1), first, 24), 0);
  // Diverges inside block 4 (slots 16..19) after two of its tokens.
  std::vector<TokenId> second(first.begin(), first.begin() + 18);
  for (TokenId t : Range(700, 6)) second.push_back(t);
  const int hit = kv_.BeginSequence(SeqId(2), kNs, second, 0);
  EXPECT_EQ(hit, 18);
  EXPECT_EQ(kv_.stats().partial_hit_tokens, 0);  // counted at the first Allocate
  Step(SeqId(2), second, hit, 24);
  EXPECT_EQ(kv_.stats().partial_hit_tokens, 2);
  kv_.EndSequence(SeqId(2));
  kv_.CheckInvariants();
}

TEST_F(WindowGroupTest, AHitEndsWhereTheWindowWasEvicted) {
  // 40 tokens: every window block the sequence released is kept beside its tree node, ten of
  // the pool's twelve.
  const std::vector<TokenId> first = Range(100, 40);
  EXPECT_EQ(Run(SeqId(1), first, 4), 0);
  EXPECT_EQ(kv_.stats().window_cached, 10);
  // Two other sequences take six of them: the least recently released, those of the first
  // sequence's early blocks.
  for (int i = 0; i < 2; ++i) Run(SeqId(10 + i), Range(1000 * (i + 2), 16), 16);
  EXPECT_EQ(kv_.stats().window_evicted, 6);
  // The end of the first sequence still hits: its last window was released last.
  std::vector<TokenId> late = first;
  late.push_back(9);
  EXPECT_EQ(kv_.PeekCachedTokens(kNs, late), 40);
  EXPECT_EQ(kv_.BeginSequence(SeqId(3), kNs, late, 0), 40);
  Step(SeqId(3), late, 40, 41);
  kv_.EndSequence(SeqId(3));
  // A prefix whose window is gone is no hit at that depth, nor at any depth before it whose
  // window is gone too: the hit is the deepest depth whose window is cached (here none).
  std::vector<TokenId> early(first.begin(), first.begin() + 12);
  early.push_back(9);
  EXPECT_EQ(kv_.PeekCachedTokens(kNs, early), 0);
  EXPECT_EQ(kv_.BeginSequence(SeqId(2), kNs, early, 0), 0);
  Step(SeqId(2), early, 0, static_cast<int>(early.size()));
  kv_.EndSequence(SeqId(2));
  kv_.CheckInvariants();
  // Recomputing it put its window back: the same prefix hits now.
  EXPECT_EQ(kv_.PeekCachedTokens(kNs, early), 12);
}

TEST_F(WindowGroupTest, ForkSharesTheWindowAndCopiesThePartialBlock) {
  const std::vector<TokenId> tokens = Range(100, 22);
  ASSERT_EQ(kv_.BeginSequence(SeqId(1), kNs, tokens, 0), 0);
  Step(SeqId(1), tokens, 0, 22);
  auto copy = kv_.Fork(SeqId(1), SeqId(2), 22);
  ASSERT_TRUE(copy.ok());
  ASSERT_TRUE(copy->has_value());
  bytes_.main[static_cast<size_t>((*copy)->dst.value())] =
      bytes_.main[static_cast<size_t>((*copy)->src.value())];
  kv_.CheckInvariants();
  EXPECT_NE(kv_.window_table(SeqId(1)).back(), kv_.window_table(SeqId(2)).back());
  // Both go on with different tokens and read their own.
  std::vector<TokenId> a = tokens, b = tokens;
  a.push_back(1);
  b.push_back(2);
  for (int n = 22; n < 30; ++n) {
    Step(SeqId(1), a, n, n + 1);
    Step(SeqId(2), b, n, n + 1);
    a.push_back(n);
    b.push_back(n + 50);
  }
  kv_.EndSequence(SeqId(1));
  kv_.EndSequence(SeqId(2));
  kv_.CheckInvariants();
}

TEST_F(WindowGroupTest, SpeculativeBlocksShrinkAway) {
  std::vector<TokenId> tokens = Range(100, 10);
  ASSERT_EQ(kv_.BeginSequence(SeqId(1), kNs, tokens, 0), 0);
  Step(SeqId(1), tokens, 0, 10);
  // Room for 7 drafts, then only 1 accepted.
  ASSERT_TRUE(kv_.Allocate(SeqId(1), 18));
  EXPECT_EQ(kv_.window_table(SeqId(1)).size(), 5u);
  kv_.Commit(SeqId(1), tokens, 10);
  kv_.Shrink(SeqId(1), 12);
  kv_.CheckInvariants();
  EXPECT_EQ(kv_.window_table(SeqId(1)).size(), 3u);
  kv_.EndSequence(SeqId(1));
  kv_.CheckInvariants();
  EXPECT_EQ(kv_.stats().window_in_use, 0);
}

// Many sequences over shared prefixes, in random steps, with the pools under pressure: every
// query reads its own tokens, and the invariants hold after every operation.
class WindowGroupStressTest : public WindowGroupTest {
 protected:
  WindowGroupStressTest() : WindowGroupTest(40, 16) {}
};

TEST_F(WindowGroupStressTest, EveryQueryReadsItsOwnTokens) {
  std::mt19937 rng(7);
  const std::vector<std::vector<TokenId>> stems = {Range(100, 30), Range(200, 9), Range(300, 17)};
  struct Live {
    SeqId id;
    std::vector<TokenId> tokens;
    int done = 0;
  };
  std::vector<Live> live;
  int next = 1;
  int64_t hits = 0;
  for (int op = 0; op < 600; ++op) {
    if (live.size() < 3 && rng() % 3 == 0) {
      Live l{SeqId(next++), {}, 0};
      const auto& stem = stems[rng() % stems.size()];
      const int keep = 1 + static_cast<int>(rng() % stem.size());
      l.tokens.assign(stem.begin(), stem.begin() + keep);
      for (int i = 0, n = static_cast<int>(rng() % 12); i < n; ++i) {
        l.tokens.push_back(static_cast<TokenId>(rng() % 5));
      }
      l.done = kv_.BeginSequence(l.id, kNs, l.tokens, 0);
      hits += l.done;
      kv_.CheckInvariants();
      live.push_back(std::move(l));
      continue;
    }
    if (live.empty()) continue;
    Live& l = live[rng() % live.size()];
    const int pending = static_cast<int>(l.tokens.size()) - l.done;
    if (pending == 0 && rng() % 4 == 0) {
      kv_.EndSequence(l.id);
      kv_.CheckInvariants();
      live.erase(live.begin() + (&l - live.data()));
      continue;
    }
    if (pending == 0) l.tokens.push_back(static_cast<TokenId>(rng() % 5));  // a decode token
    const int to =
        std::min(static_cast<int>(l.tokens.size()), l.done + 1 + static_cast<int>(rng() % 6));
    if (!kv_.Allocate(l.id, to)) {  // no room: preempted (begins again later)
      kv_.EndSequence(l.id);
      kv_.CheckInvariants();
      live.erase(live.begin() + (&l - live.data()));
      continue;
    }
    Step(l.id, l.tokens, l.done, to);
    l.done = to;
  }
  for (Live& l : live) kv_.EndSequence(l.id);
  kv_.CheckInvariants();
  EXPECT_GT(hits, 0);
  EXPECT_GT(kv_.stats().window_evicted, 0);
  EXPECT_EQ(kv_.stats().window_in_use, 0);
}

}  // namespace window_group_test
}  // namespace
}  // namespace kvserve
