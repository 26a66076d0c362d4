// EventSequencer: turns one replica's KV event messages (sequence number, msgpack payload) into
// BlockIndex updates, in sequence order, whatever the transport did to them.
//
// NOTE (the sequence rules; vLLM's publisher numbers its batches 0, 1, 2, ... and keeps the last
// `buffer_steps` of them for replay):
//   - the next number: applied;
//   - a later one (a gap: messages were dropped, or the router joined late): the missing batches
//     are asked of the replay callback and applied first. When the replay cannot give all of them
//     (no replay endpoint, no answer, or they left its buffer) the replica's blocks are cleared
//     (a resync: the index may miss blocks, never hold ones the replica dropped), then whatever
//     came is applied;
//   - an earlier one: a duplicate when it is a batch already applied (same number, same bytes;
//     the live stream overlapping a replay), skipped; otherwise the publisher started over (a
//     restarted replica), so the replica's blocks are cleared and the message starts the stream.
// A payload that does not decode is a resync too.
//
// Thread safety: one thread (the replica's subscriber) calls OnMessage, Sync and Resync; the
// counters may be read from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "router/block_index.h"

namespace kvserve::router {

struct SequencedBatch {
  uint64_t seq = 0;
  std::string payload;
};

struct EventCounters {
  std::atomic<uint64_t> batches{0};     // applied
  std::atomic<uint64_t> duplicates{0};  // skipped
  std::atomic<uint64_t> gaps{0};        // later numbers than expected
  std::atomic<uint64_t> replayed{0};    // batches applied from a replay
  std::atomic<uint64_t> resyncs{0};     // the replica's blocks cleared for lack of history
  std::atomic<uint64_t> restarts{0};    // the publisher started over
  std::atomic<uint64_t> decode_errors{0};
};

class EventSequencer {
 public:
  // The batches numbered `from` and on that the publisher still holds, in order; nullopt when
  // it cannot be asked (none configured) or did not answer.
  using Replay = std::function<std::optional<std::vector<SequencedBatch>>(uint64_t from)>;

  // `replay` may be empty (no replay endpoint).
  EventSequencer(int replica, BlockIndex* index, Replay replay);

  void OnMessage(uint64_t seq, std::string_view payload);
  // Fetches what the publisher still buffers (replay from the next number, or from 0 at the
  // start) and applies it: a router that starts after its replicas learns what they hold.
  void Sync();
  // Starts over: clears the replica's blocks, forgets the sequence, then Sync().
  void Resync();

  const EventCounters& counters() const { return counters_; }
  // The next number expected, nullopt before the first batch.
  std::optional<uint64_t> expected() const { return expected_; }

 private:
  void Apply(uint64_t seq, std::string_view payload);
  // Replays [from, until) (until = nullopt: everything). Returns whether it was complete.
  bool Fill(uint64_t from, std::optional<uint64_t> until);
  bool IsDuplicate(uint64_t seq, std::string_view payload) const;
  void Forget();

  const int replica_;
  BlockIndex* const index_;
  const Replay replay_;
  std::optional<uint64_t> expected_;
  // Digests of the most recent applied payloads by number, for IsDuplicate.
  std::unordered_map<uint64_t, size_t> recent_;
  std::deque<uint64_t> recent_order_;
  EventCounters counters_;
};

}  // namespace kvserve::router
