// ThreadPool: a fixed set of persistent worker threads for data-parallel kernels.
//
// Contract: one caller at a time submits a job with Run() or ParallelFor(); the calling thread
// takes part as worker 0 and the call returns only when every worker has finished, so a job may
// capture stack references. Run() itself allocates nothing (std::function_ref-style callback).
// Not reentrant: a job must not call back into the same pool.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace kvserve {

class ThreadPool {
 public:
  // num_threads counts the caller: ThreadPool(1) runs everything on the caller.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(thread_index, num_threads) once on each thread, thread_index in [0, num_threads).
  template <typename Fn>
  void Run(Fn&& fn) {
    RunImpl(&Trampoline<Fn>, static_cast<void*>(&fn));
  }

  // Splits [0, n) into contiguous chunks, one per thread, and calls fn(begin, end) for each
  // non-empty chunk. `grain` rounds chunk boundaries to multiples of it.
  template <typename Fn>
  void ParallelFor(int64_t n, Fn&& fn, int64_t grain = 1) {
    if (n <= 0) return;
    Run([&](int t, int nt) {
      const int64_t units = (n + grain - 1) / grain;
      const int64_t begin = std::min(n, units * t / nt * grain);
      const int64_t end = std::min(n, units * (t + 1) / nt * grain);
      if (begin < end) fn(begin, end);
    });
  }

  // Default thread count: the number of hardware threads, at least 1.
  static int DefaultThreads();

 private:
  using Callback = void (*)(void* ctx, int thread_index, int num_threads);
  template <typename Fn>
  static void Trampoline(void* ctx, int t, int nt) {
    (*static_cast<std::remove_reference_t<Fn>*>(ctx))(t, nt);
  }
  void RunImpl(Callback cb, void* ctx);
  void WorkerLoop(int index);

  const int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;  // guarded by mu_; bumped per job
  bool stop_ = false;        // guarded by mu_
  Callback cb_ = nullptr;
  void* ctx_ = nullptr;
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> spin_generation_{0};
};

}  // namespace kvserve
