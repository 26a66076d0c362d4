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

// The job word's layout (see thread_pool.h).
constexpr uint64_t kClosed = uint64_t{1} << 31;
constexpr uint64_t kCountMask = kClosed - 1;
uint32_t GenerationOf(uint64_t word) { return static_cast<uint32_t>(word >> 32); }
uint64_t WordOf(uint32_t generation) { return uint64_t{generation} << 32; }

}  // namespace

int ThreadPool::DefaultThreads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int num_threads, std::chrono::microseconds spin)
    : num_threads_(std::max(1, num_threads)), spin_ns_(std::max<int64_t>(0, spin.count()) * 1000) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  job_.store(WordOf(GenerationOf(job_.load()) + 1) | kClosed);
  { std::lock_guard<std::mutex> lock(mu_); }
  start_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

template <typename Pred>
bool ThreadPool::Spin(Pred done) const {
  if (done()) return true;
  if (spin_ns_ == 0) return false;
  // NOTE: the clock is read every few dozen pauses; a pause costs from a few to ~150 cycles
  // depending on the CPU, so an iteration count would not be a time. After the first few
  // microseconds the spin also yields: where the thread shares its core (with its own partner or
  // another process) that lets the other run, and on a core of its own it returns at once. On a
  // 2-core machine with another process busy, yielding raised decode from 45-55% of quiet speed
  // to 60-70% (bench/contention_bench.py).
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::nanoseconds(spin_ns_);
  const auto yield_from = start + std::chrono::microseconds(5);
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      if (done()) return true;
      KVSERVE_PAUSE();
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return done();
    if (now >= yield_from) std::this_thread::yield();
  }
}

template <typename Pred>
void ThreadPool::WaitForWorkers(Pred done) {
  if (Spin(done)) return;
  std::unique_lock<std::mutex> lock(mu_);
  // Paired with the workers' leaving: either they see this flag and notify, or this sees them gone.
  caller_sleeping_.store(true);
  done_cv_.wait(lock, done);
  caller_sleeping_.store(false);
}

void ThreadPool::RunImpl(Callback cb, void* ctx, bool claimed) {
  if (num_threads_ == 1) {
    cb(ctx, 0, 1);
    return;
  }
  // No worker is inside a job here (the previous call waited for them), so these plain fields
  // are free to write; workers read them only after joining the published generation.
  cb_ = cb;
  ctx_ = ctx;
  claimed_ = claimed;
  finished_.store(0, std::memory_order_relaxed);
  job_.store(WordOf(GenerationOf(job_.load(std::memory_order_relaxed)) + 1));
  if (sleeping_workers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }  // a worker between its check and its wait
    start_cv_.notify_all();
  }
  cb(ctx, 0, num_threads_);
  if (claimed) {
    // All the work is claimed: close the job so that late workers skip it, then wait only for
    // the workers inside it.
    job_.fetch_or(kClosed);
    WaitForWorkers([this] { return (job_.load() & kCountMask) == 0; });
  } else {
    WaitForWorkers([this] { return finished_.load() == num_threads_ - 1; });
  }
}

void ThreadPool::WorkerLoop(int index) {
  uint32_t seen = 0;
  for (;;) {
    uint64_t word = 0;
    auto fresh = [&] {
      word = job_.load();
      return GenerationOf(word) != seen;
    };
    if (!Spin(fresh)) {
      std::unique_lock<std::mutex> lock(mu_);
      sleeping_workers_.fetch_add(1);
      start_cv_.wait(lock, fresh);
      sleeping_workers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    // Join the job unless it is closed; a failed exchange reloads the word (maybe a newer job).
    bool joined = false;
    while ((word & kClosed) == 0) {
      if (job_.compare_exchange_weak(word, word + 1)) {
        joined = true;
        break;
      }
    }
    seen = GenerationOf(word);
    if (!joined) continue;
    const bool claimed = claimed_;
    cb_(ctx_, index, num_threads_);
    job_.fetch_sub(1);
    if (!claimed) finished_.fetch_add(1);
    if (caller_sleeping_.load()) {
      { std::lock_guard<std::mutex> lock(mu_); }
      done_cv_.notify_one();
    }
  }
}

}  // namespace kvserve
