#include "util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <set>
#include <utility>
#include <vector>

namespace kvserve {
namespace {

TEST(ThreadPool, RunCallsEveryThreadOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> calls(4);
  for (int rep = 0; rep < 100; ++rep) {
    pool.Run([&](int t, int nt) {
      EXPECT_EQ(nt, 4);
      calls[t].fetch_add(1);
    });
  }
  for (auto& c : calls) EXPECT_EQ(c.load(), 100);
}

TEST(ThreadPool, ParallelForCoversRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 3, 7, 64, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, ParallelForRespectsGrain) {
  ThreadPool pool(2);
  std::atomic<int> bad{0};
  pool.ParallelFor(
      100,
      [&](int64_t b, int64_t) {
        if (b % 16 != 0) bad++;
      },
      16);
  EXPECT_EQ(bad.load(), 0);
}

// Both waiting paths: spin 0 sleeps at once; a long spin never sleeps between back-to-back jobs.
class ThreadPoolSpin : public ::testing::TestWithParam<int> {};

TEST_P(ThreadPoolSpin, MixedJobsCoverEveryIndexOnce) {
  ThreadPool pool(3, std::chrono::microseconds(GetParam()));
  std::mt19937 rng(7);
  for (int rep = 0; rep < 300; ++rep) {
    const int64_t n = std::uniform_int_distribution<int64_t>(0, 200)(rng);
    const int64_t grain = std::uniform_int_distribution<int64_t>(1, 9)(rng);
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    switch (rep % 3) {
      case 0:
        pool.ParallelFor(
            n,
            [&](int64_t b, int64_t e) {
              for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
            },
            grain);
        break;
      case 1:
        pool.ForEach(n, [&](int64_t i) { hits[i].fetch_add(1); });
        break;
      default: {
        std::atomic<int> threads{0};
        pool.Run([&](int, int) { threads.fetch_add(1); });
        ASSERT_EQ(threads.load(), 3);
        for (auto& h : hits) h.store(1);
      }
    }
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "rep " << rep << " i " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Spin, ThreadPoolSpin, ::testing::Values(0, 5, 2000));

// What a piece covers depends on the range, never on the schedule: the same call gives the same
// pieces every time, whichever threads claim them.
TEST(ThreadPool, ParallelForPiecesDoNotDependOnTheSchedule) {
  ThreadPool pool(2, std::chrono::microseconds(0));
  auto pieces_of = [&](int64_t n, int64_t grain) {
    std::mutex mu;
    std::set<std::pair<int64_t, int64_t>> pieces;
    pool.ParallelFor(
        n,
        [&](int64_t b, int64_t e) {
          std::lock_guard<std::mutex> lock(mu);
          pieces.insert({b, e});
        },
        grain);
    return pieces;
  };
  for (int64_t n : {5, 64, 1000, 5632}) {
    const auto first = pieces_of(n, 4);
    EXPECT_LE(first.size(), size_t{ThreadPool::kPiecesPerThread} * 2);
    for (const auto& [b, e] : first) {
      EXPECT_EQ(b % 4, 0);
      EXPECT_TRUE(e % 4 == 0 || e == n);
    }
    for (int rep = 0; rep < 20; ++rep) ASSERT_EQ(pieces_of(n, 4), first) << "n=" << n;
  }
}

TEST(ThreadPool, SingleThreadRunsOnCaller) {
  ThreadPool pool(1);
  int calls = 0;
  pool.Run([&](int t, int nt) {
    EXPECT_EQ(t, 0);
    EXPECT_EQ(nt, 1);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace kvserve
