#include "util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
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
  pool.ParallelFor(100, [&](int64_t b, int64_t) { if (b % 16 != 0) bad++; }, 16);
  EXPECT_EQ(bad.load(), 0);
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
