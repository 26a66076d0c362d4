// ThreadPool: a fixed set of persistent worker threads for data-parallel kernels.
//
// Contract: one caller at a time submits a job; the calling thread takes part as worker 0 and the
// call returns only when the job is done and no worker touches it any more, so a job may capture
// stack references. Submitting allocates nothing. Not reentrant: a job must not call back into the
// same pool.
//
// Two kinds of job:
// - ParallelFor / ForEach split the work into pieces that threads claim as they go. The pieces
//   are a function of the range alone (never of which thread runs them or how many threads
//   there are), so what each piece computes, and sums, is the same on any schedule. A thread
//   that loses its core delays only the piece it holds; a worker that has not started by the time
//   every piece is claimed is not waited for. This is what keeps a step fast on shared cores.
// - Run calls a function once on every thread and waits for all of them (benchmarks that need
//   every thread busy at once).
//
// Waiting threads spin for a bounded time (`spin`, chosen with bench/contention_bench.py),
// yielding the core after the first microseconds, and then sleep on a condition variable, so a
// thread waiting for a descheduled partner gives the core back instead of burning the time slice
// the partner needs.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace kvserve {

class ThreadPool {
 public:
  // Default spin before sleeping: long enough to bridge the gap between the back-to-back jobs of a
  // decode step, short next to a scheduler time slice.
  static constexpr std::chrono::microseconds kDefaultSpin{50};
  // ParallelFor cuts a range into at most this many pieces per thread.
  static constexpr int kPiecesPerThread = 4;

  // num_threads counts the caller: ThreadPool(1) runs everything on the caller.
  explicit ThreadPool(int num_threads, std::chrono::microseconds spin = kDefaultSpin);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  std::chrono::microseconds spin() const { return std::chrono::microseconds(spin_ns_ / 1000); }

  // Calls fn(thread_index, num_threads) once on each thread, thread_index in [0, num_threads), and
  // waits for every thread.
  template <typename Fn>
  void Run(Fn&& fn) {
    RunImpl(&Trampoline<Fn>, static_cast<void*>(&fn), /*claimed=*/false);
  }

  // Calls fn(begin, end) over pieces that together cover [0, n) exactly once. Piece boundaries
  // are multiples of `grain` (or n) and depend only on n, grain and num_threads(), never on which
  // thread claims a piece or when.
  template <typename Fn>
  void ParallelFor(int64_t n, Fn&& fn, int64_t grain = 1) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    const int64_t units = (n + grain - 1) / grain;
    const int64_t pieces = std::min<int64_t>(units, int64_t{kPiecesPerThread} * num_threads_);
    if (pieces == 1 || num_threads_ == 1) {
      fn(int64_t{0}, n);
      return;
    }
    std::atomic<int64_t> next{0};
    auto body = [&](int, int) {
      for (int64_t p = next.fetch_add(1, std::memory_order_relaxed); p < pieces;
           p = next.fetch_add(1, std::memory_order_relaxed)) {
        const int64_t begin = std::min(n, units * p / pieces * grain);
        const int64_t end = std::min(n, units * (p + 1) / pieces * grain);
        if (begin < end) fn(begin, end);
      }
    };
    RunImpl(&Trampoline<decltype(body)>, static_cast<void*>(&body), /*claimed=*/true);
  }

  // Calls fn(i) for each i in [0, n), claiming one index at a time (for items of uneven cost).
  template <typename Fn>
  void ForEach(int64_t n, Fn&& fn) {
    if (n <= 0) return;
    if (n == 1 || num_threads_ == 1) {
      for (int64_t i = 0; i < n; ++i) fn(i);
      return;
    }
    std::atomic<int64_t> next{0};
    auto body = [&](int, int) {
      for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
           i = next.fetch_add(1, std::memory_order_relaxed)) {
        fn(i);
      }
    };
    RunImpl(&Trampoline<decltype(body)>, static_cast<void*>(&body), /*claimed=*/true);
  }

  // Default thread count: the number of hardware threads, at least 1.
  static int DefaultThreads();

 private:
  using Callback = void (*)(void* ctx, int thread_index, int num_threads);
  template <typename Fn>
  static void Trampoline(void* ctx, int t, int nt) {
    (*static_cast<std::remove_reference_t<Fn>*>(ctx))(t, nt);
  }
  void RunImpl(Callback cb, void* ctx, bool claimed);
  void WorkerLoop(int index);
  // Polls `done` for up to the spin budget; true as soon as it holds.
  template <typename Pred>
  bool Spin(Pred done) const;
  // Spins, then sleeps until `done` holds (the caller's wait for its workers).
  template <typename Pred>
  void WaitForWorkers(Pred done);

  const int num_threads_;
  const int64_t spin_ns_;
  std::vector<std::thread> workers_;

  // The job word: generation (high 32 bits), a "closed" bit (no worker may join any more) and
  // how many workers are inside the job. Workers join by compare-and-swap on an open word.
  std::atomic<uint64_t> job_{0};
  std::atomic<int> finished_{0};  // workers done with a Run job
  Callback cb_ = nullptr;         // written before job_ is published, read after joining
  void* ctx_ = nullptr;
  bool claimed_ = false;

  std::mutex mu_;  // only for sleeping and waking
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  std::atomic<int> sleeping_workers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
};

// A --poll-us value as a spin budget: negative means the default.
inline std::chrono::microseconds PoolSpin(int poll_us) {
  return poll_us < 0 ? ThreadPool::kDefaultSpin : std::chrono::microseconds(poll_us);
}

}  // namespace kvserve
