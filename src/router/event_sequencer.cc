#include "router/event_sequencer.h"

#include "util/log.h"

namespace kvserve::router {

namespace {

// How many applied batches IsDuplicate remembers: more than a replay overlaps the live stream.
constexpr size_t kRecentBatches = 8192;

size_t Digest(std::string_view payload) { return std::hash<std::string_view>{}(payload); }

}  // namespace

EventSequencer::EventSequencer(int replica, BlockIndex* index, Replay replay)
    : replica_(replica), index_(index), replay_(std::move(replay)) {}

void EventSequencer::Forget() {
  expected_.reset();
  recent_.clear();
  recent_order_.clear();
}

bool EventSequencer::IsDuplicate(uint64_t seq, std::string_view payload) const {
  auto it = recent_.find(seq);
  return it != recent_.end() && it->second == Digest(payload);
}

void EventSequencer::Apply(uint64_t seq, std::string_view payload) {
  expected_ = seq + 1;
  recent_[seq] = Digest(payload);
  recent_order_.push_back(seq);
  if (recent_order_.size() > kRecentBatches) {
    recent_.erase(recent_order_.front());
    recent_order_.pop_front();
  }
  Result<KvEventBatch> batch = DecodeKvEventBatch(payload);
  if (!batch.ok()) {
    counters_.decode_errors.fetch_add(1);
    counters_.resyncs.fetch_add(1);
    KV_LOG(Warning, "replica {}: KV event batch {} does not decode ({}); its blocks are cleared",
           replica_, seq, batch.status().message());
    index_->Clear(replica_);
    return;
  }
  index_->Apply(replica_, *batch);
  counters_.batches.fetch_add(1);
}

bool EventSequencer::Fill(uint64_t from, std::optional<uint64_t> until) {
  std::optional<std::vector<SequencedBatch>> got;
  if (replay_) got = replay_(from);
  bool complete = got.has_value();
  if (got) {
    // Complete when the batches run on from `from` without a hole up to `until` (or the end).
    uint64_t next = from;
    for (const SequencedBatch& b : *got) {
      if (until && b.seq >= *until) break;
      if (b.seq < next) continue;
      if (b.seq != next) complete = false;
      next = b.seq + 1;
    }
    if (until && next != *until) complete = false;
  }
  const bool knew_something = expected_.has_value() || from > 0;
  if (!complete && knew_something) {
    counters_.resyncs.fetch_add(1);
    index_->Clear(replica_);
  }
  if (got) {
    for (const SequencedBatch& b : *got) {
      if (until && b.seq >= *until) break;
      if (expected_ && b.seq < *expected_) continue;
      Apply(b.seq, b.payload);
      counters_.replayed.fetch_add(1);
    }
  }
  return complete;
}

void EventSequencer::OnMessage(uint64_t seq, std::string_view payload) {
  if (expected_ && seq < *expected_) {
    if (IsDuplicate(seq, payload)) {
      counters_.duplicates.fetch_add(1);
      return;
    }
    counters_.restarts.fetch_add(1);
    index_->Clear(replica_);
    Forget();
  }
  const uint64_t want = expected_.value_or(0);
  if (seq > want) {
    if (expected_) counters_.gaps.fetch_add(1);
    Fill(want, seq);
  }
  Apply(seq, payload);
}

void EventSequencer::Sync() {
  if (!replay_) return;
  Fill(expected_.value_or(0), std::nullopt);
}

void EventSequencer::Resync() {
  counters_.resyncs.fetch_add(1);
  index_->Clear(replica_);
  Forget();
  Sync();
}

}  // namespace kvserve::router
