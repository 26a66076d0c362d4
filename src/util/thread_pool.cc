#include "util/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVSERVE_PAUSE() _mm_pause()
#else
#define KVSERVE_PAUSE() ((void)0)
#endif

namespace kvserve {
namespace {
// NOTE: workers spin briefly on an atomic generation counter before sleeping on the condition
// variable. Decode steps submit many small jobs back to back (one per matmul), so waking a
// sleeping thread for each would cost more than the work itself.
constexpr int kSpinIterations = 200000;
}  // namespace

int ThreadPool::DefaultThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    ++generation_;
    spin_generation_.store(generation_, std::memory_order_release);
  }
  start_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::RunImpl(Callback cb, void* ctx) {
  if (num_threads_ == 1) {
    cb(ctx, 0, 1);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    cb_ = cb;
    ctx_ = ctx;
    pending_.store(num_threads_ - 1, std::memory_order_relaxed);
    ++generation_;
    spin_generation_.store(generation_, std::memory_order_release);
  }
  start_cv_.notify_all();
  cb(ctx, 0, num_threads_);
  // Wait for the workers: spin first, then sleep.
  for (int i = 0; i < kSpinIterations; ++i) {
    if (pending_.load(std::memory_order_acquire) == 0) return;
    KVSERVE_PAUSE();
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    Callback cb;
    void* ctx;
    bool have = false;
    for (int i = 0; i < kSpinIterations; ++i) {
      if (spin_generation_.load(std::memory_order_acquire) != seen) {
        have = true;
        break;
      }
      KVSERVE_PAUSE();
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!have) start_cv_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (stop_) return;
      cb = cb_;
      ctx = ctx_;
    }
    cb(ctx, index, num_threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

}  // namespace kvserve
