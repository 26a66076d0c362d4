// EventFeed: one subscriber thread per replica that publishes KV events. Each thread holds a
// ZeroMQ SUB socket connected to the replica's event endpoint (vLLM's multipart messages: topic,
// 8-byte big-endian sequence number, msgpack payload) and, when the replica has one, a DEALER
// socket to its replay endpoint (vLLM's ROUTER: send the first wanted number as 8 big-endian
// bytes; it answers each buffered batch from there as (number, payload) and ends with number
// -1). The thread hands messages to the replica's EventSequencer, which keeps the BlockIndex.
//
// Thread safety: Start/Stop from the owner; RequestResync and counters from any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "router/block_index.h"
#include "router/event_sequencer.h"

namespace kvserve::router {

struct EventSource {
  std::string endpoint;         // e.g. tcp://127.0.0.1:5557; empty = this replica has none
  std::string replay_endpoint;  // e.g. tcp://127.0.0.1:5558; empty = none
  std::string topic;            // the subscription prefix; empty = every message
};

class EventFeed {
 public:
  // sources[i] is replica i's.
  EventFeed(std::vector<EventSource> sources, BlockIndex* index);
  ~EventFeed();
  EventFeed(const EventFeed&) = delete;
  EventFeed& operator=(const EventFeed&) = delete;

  void Start();
  void Stop();
  // The replica's thread clears its blocks and fetches the publisher's buffer again (the replica
  // came back into the pool: it may have restarted).
  void RequestResync(int replica);
  // Null for a replica without an event endpoint.
  const EventCounters* counters(int replica) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::router
