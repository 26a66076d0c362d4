// The router's own Prometheus metrics, under the `kvserve_router:` prefix (docs/router.md lists
// them). Counters are atomics bumped by request threads; Render takes the live per-replica state
// (health, load, blocks, event counters) from its caller.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "router/event_sequencer.h"
#include "router/policy.h"
#include "router/request_info.h"

namespace kvserve::router {

struct ReplicaState {
  bool healthy = false;
  int64_t in_flight = 0;
  size_t stored_blocks = 0;
  size_t blocks = 0;                      // stored + pending
  const EventCounters* events = nullptr;  // null without an event endpoint
};

class RouterMetrics {
 public:
  RouterMetrics(std::vector<std::string> replica_names, PolicyKind policy);

  // A generation request sent to `replica` by `rule`.
  void Routed(int replica, Rule rule);
  // Any other request (tokenize, models) sent to `replica`.
  void RoutedOther(int replica);
  // A request to `replica` failed before anything reached the client (it is tried elsewhere).
  void UpstreamError(int replica);
  void Retry(int replica);
  // A request that broke off after its head reached the client.
  void BrokeOff(int replica);
  // No replica could serve a request.
  void Failed();
  void TokenizeError();
  // The router's prediction for a request beside what the replica reported.
  void Usage(int replica, int64_t predicted_cached_tokens, const ReportedUsage& reported);

  std::string Render(const std::vector<ReplicaState>& replicas) const;

 private:
  struct PerReplica {
    std::array<std::atomic<uint64_t>, kNumRules> routed{};
    std::atomic<uint64_t> routed_other{0};
    std::atomic<uint64_t> upstream_errors{0};
    std::atomic<uint64_t> retries{0};
    std::atomic<uint64_t> broke_off{0};
    std::atomic<uint64_t> usage_reports{0};
    std::atomic<uint64_t> predicted_cached{0};
    std::atomic<uint64_t> reported_cached{0};
    std::atomic<uint64_t> reported_prompt{0};
  };
  const std::vector<std::string> names_;
  const PolicyKind policy_;
  std::unique_ptr<PerReplica[]> per_;  // [num_replicas]
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> tokenize_errors_{0};
};

}  // namespace kvserve::router
