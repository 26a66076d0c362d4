#include "router/health.h"

namespace kvserve::router {

HealthChecker::HealthChecker(int num_replicas, Probe probe, OnChange on_change,
                             std::chrono::milliseconds interval)
    : probe_(std::move(probe)),
      on_change_(std::move(on_change)),
      interval_(interval),
      healthy_(new std::atomic<bool>[static_cast<size_t>(num_replicas)]),
      num_replicas_(num_replicas) {
  for (int i = 0; i < num_replicas; ++i) healthy_[static_cast<size_t>(i)].store(false);
}

HealthChecker::~HealthChecker() { Stop(); }

void HealthChecker::Set(int replica, bool healthy) {
  std::lock_guard lock(change_mu_);
  if (healthy_[static_cast<size_t>(replica)].exchange(healthy) == healthy) return;
  if (on_change_) on_change_(replica, healthy);
}

void HealthChecker::CheckAll() {
  for (int i = 0; i < num_replicas_; ++i) Set(i, probe_(i));
}

void HealthChecker::ReportFailure(int replica) { Set(replica, false); }

bool HealthChecker::healthy(int replica) const {
  return healthy_[static_cast<size_t>(replica)].load();
}

int HealthChecker::num_healthy() const {
  int n = 0;
  for (int i = 0; i < num_replicas_; ++i) n += healthy(i) ? 1 : 0;
  return n;
}

void HealthChecker::Start() {
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, interval_, [this] { return stop_; })) {
      lock.unlock();
      CheckAll();
      lock.lock();
    }
  });
}

void HealthChecker::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace kvserve::router
