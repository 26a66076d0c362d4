// HealthChecker: which replicas are in the pool. A round probes each replica (GET /health in
// the router); a replica that fails or refuses leaves the pool at once, and returns at the first
// round it passes. Request threads report failures too (a refused upstream connection), so a
// dead replica leaves before the next round. A thread runs a round every `interval`; tests call
// CheckAll() themselves instead and inject the probe.
//
// Thread safety: every method may be called from any thread; `on_change` runs on the thread that
// saw the change, never twice at once for one replica.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kvserve::router {

class HealthChecker {
 public:
  using Probe = std::function<bool(int replica)>;
  using OnChange = std::function<void(int replica, bool healthy)>;

  HealthChecker(int num_replicas, Probe probe, OnChange on_change,
                std::chrono::milliseconds interval);
  ~HealthChecker();
  HealthChecker(const HealthChecker&) = delete;
  HealthChecker& operator=(const HealthChecker&) = delete;

  // One round: every replica probed in turn.
  void CheckAll();
  // A request could not reach the replica: it leaves the pool until a round passes it.
  void ReportFailure(int replica);
  bool healthy(int replica) const;
  int num_healthy() const;

  void Start();
  void Stop();

 private:
  void Set(int replica, bool healthy);

  const Probe probe_;
  const OnChange on_change_;
  const std::chrono::milliseconds interval_;
  std::unique_ptr<std::atomic<bool>[]> healthy_;  // [num_replicas]
  const int num_replicas_;
  std::mutex change_mu_;  // serializes transitions and their on_change calls
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kvserve::router
