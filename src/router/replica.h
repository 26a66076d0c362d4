// A replica of the fleet as the router sees it: its origin and event endpoints, whether it is in
// the pool, the requests in flight to it through this router, and a pool of kept-alive upstream
// connections (one http::Client each) that request threads borrow.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "http/client.h"
#include "kvserve/status.h"
#include "router/event_feed.h"

namespace kvserve::router {

// `--replica URL[,events=ENDPOINT][,replay=ENDPOINT][,topic=TOPIC]`.
struct ReplicaSpec {
  std::string origin;  // http://host:port
  EventSource events;
};

Result<ReplicaSpec> ParseReplicaSpec(std::string_view text);

class Replica {
 public:
  Replica(int index, ReplicaSpec spec, http::ClientOptions options, size_t max_idle_clients = 64);

  int index() const { return index_; }
  const ReplicaSpec& spec() const { return spec_; }
  const std::string& origin() const { return spec_.origin; }

  bool healthy() const { return healthy_.load(); }
  void set_healthy(bool healthy) { healthy_.store(healthy); }
  // Whether the replica refuses requests without a key (it then salts each tenant's blocks
  // with the tenant, which the router's prompt hashes must do too).
  bool requires_key() const { return requires_key_.load(); }
  void set_requires_key(bool requires_key) { requires_key_.store(requires_key); }
  // Requests routed here that have not finished.
  std::atomic<int64_t>& in_flight() { return in_flight_; }
  int64_t load() const { return in_flight_.load(); }

  // A client for one request: an idle kept-alive one when there is one.
  Result<std::unique_ptr<http::Client>> Acquire();
  // Gives a client back after its request (its connection is kept if still open).
  void Release(std::unique_ptr<http::Client> client);
  // Closes the idle connections (the replica left the pool; they are likely dead).
  void DropIdle();

 private:
  const int index_;
  const ReplicaSpec spec_;
  const http::ClientOptions options_;
  const size_t max_idle_;
  std::atomic<bool> healthy_{false};
  std::atomic<bool> requires_key_{false};
  std::atomic<int64_t> in_flight_{0};
  std::mutex mu_;
  std::vector<std::unique_ptr<http::Client>> idle_;
};

}  // namespace kvserve::router
