#include "router/event_sequencer.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

namespace kvserve::router {
namespace event_sequencer_test {
namespace {

using nlohmann::json;

// Batch `seq` of a fake publisher stores one block whose hash is 100 + seq (distinct payloads).
std::string Batch(uint64_t seq, double ts = 1.0) {
  const json j =
      json::array({ts,
                   json::array({json::array({"BlockStored", json::array({100 + seq}), nullptr,
                                             json::array({1, 2}), 2, nullptr, "GPU"})}),
                   0});
  const std::vector<uint8_t> bytes = json::to_msgpack(j);
  return std::string(bytes.begin(), bytes.end());
}

// A publisher's replay buffer: what it answers from `from` on. `calls` counts the asks.
struct FakeReplay {
  std::map<uint64_t, std::string> buffer;
  bool answers = true;
  int calls = 0;
  EventSequencer::Replay fn() {
    return [this](uint64_t from) -> std::optional<std::vector<SequencedBatch>> {
      ++calls;
      if (!answers) return std::nullopt;
      std::vector<SequencedBatch> out;
      for (auto it = buffer.lower_bound(from); it != buffer.end(); ++it) {
        out.push_back({it->first, it->second});
      }
      return out;
    };
  }
  void Publish(uint64_t first, uint64_t last) {
    for (uint64_t s = first; s <= last; ++s) buffer[s] = Batch(s);
  }
};

class EventSequencerTest : public ::testing::Test {
 protected:
  EventSequencerTest() : index_(BlockIndexConfig{1, 0, std::chrono::milliseconds(1000), {}}) {}

  // The hashes the index holds among 100..100+n.
  std::vector<uint64_t> Held(uint64_t n = 20) {
    std::vector<uint64_t> out;
    for (uint64_t h = 100; h < 100 + n; ++h) {
      if (index_.MatchPrefix(0, std::vector<uint64_t>{h}) == 1) out.push_back(h);
    }
    return out;
  }

  BlockIndex index_;
  FakeReplay replay_;
};

TEST_F(EventSequencerTest, BatchesInOrderAreApplied) {
  EventSequencer s(0, &index_, replay_.fn());
  for (uint64_t seq = 0; seq < 3; ++seq) s.OnMessage(seq, Batch(seq));
  EXPECT_EQ(Held(), (std::vector<uint64_t>{100, 101, 102}));
  EXPECT_EQ(s.expected(), 3u);
  EXPECT_EQ(s.counters().batches.load(), 3u);
  EXPECT_EQ(replay_.calls, 0);
}

TEST_F(EventSequencerTest, AGapIsFilledFromTheReplayBeforeTheNewBatch) {
  replay_.Publish(0, 5);
  EventSequencer s(0, &index_, replay_.fn());
  s.OnMessage(0, Batch(0));
  s.OnMessage(1, Batch(1));
  s.OnMessage(4, Batch(4));  // 2 and 3 were dropped
  EXPECT_EQ(Held(), (std::vector<uint64_t>{100, 101, 102, 103, 104}));
  EXPECT_EQ(s.counters().gaps.load(), 1u);
  EXPECT_EQ(s.counters().replayed.load(), 2u);  // 2 and 3 only: 4 and 5 come live
  EXPECT_EQ(s.counters().resyncs.load(), 0u);
  EXPECT_EQ(s.expected(), 5u);
}

TEST_F(EventSequencerTest, AGapTheReplayCannotFillClearsTheReplicaFirst) {
  replay_.Publish(3, 5);  // 2 has left the publisher's buffer
  EventSequencer s(0, &index_, replay_.fn());
  s.OnMessage(0, Batch(0));
  s.OnMessage(1, Batch(1));
  s.OnMessage(4, Batch(4));
  EXPECT_EQ(Held(), (std::vector<uint64_t>{103, 104}));  // what came after the hole
  EXPECT_EQ(s.counters().resyncs.load(), 1u);
}

TEST_F(EventSequencerTest, AGapWithoutAReplayEndpointClearsTheReplica) {
  EventSequencer s(0, &index_, EventSequencer::Replay());
  s.OnMessage(0, Batch(0));
  s.OnMessage(2, Batch(2));
  EXPECT_EQ(Held(), (std::vector<uint64_t>{102}));
  EXPECT_EQ(s.counters().resyncs.load(), 1u);
}

TEST_F(EventSequencerTest, AReplayThatDoesNotAnswerClearsTheReplica) {
  replay_.answers = false;
  EventSequencer s(0, &index_, replay_.fn());
  s.OnMessage(0, Batch(0));
  s.OnMessage(2, Batch(2));
  EXPECT_EQ(Held(), (std::vector<uint64_t>{102}));
  EXPECT_EQ(replay_.calls, 1);
}

TEST_F(EventSequencerTest, ALateJoinerReplaysTheBufferFromZero) {
  replay_.Publish(0, 6);
  EventSequencer s(0, &index_, replay_.fn());
  s.OnMessage(5, Batch(5));  // the first message this subscriber sees
  EXPECT_EQ(Held(), (std::vector<uint64_t>{100, 101, 102, 103, 104, 105}));
  EXPECT_EQ(s.counters().gaps.load(), 0u);  // joining late is not a gap
  EXPECT_EQ(s.counters().resyncs.load(), 0u);
}

TEST_F(EventSequencerTest, SyncAppliesTheBufferAndTheLiveOverlapIsSkipped) {
  replay_.Publish(0, 3);
  EventSequencer s(0, &index_, replay_.fn());
  s.Sync();
  EXPECT_EQ(s.expected(), 4u);
  s.OnMessage(2, Batch(2));  // sent live while the replay ran
  s.OnMessage(3, Batch(3));
  s.OnMessage(4, Batch(4));
  EXPECT_EQ(s.counters().duplicates.load(), 2u);
  EXPECT_EQ(s.counters().restarts.load(), 0u);
  EXPECT_EQ(Held(), (std::vector<uint64_t>{100, 101, 102, 103, 104}));
}

TEST_F(EventSequencerTest, AnEarlierNumberWithOtherBytesIsARestart) {
  EventSequencer s(0, &index_, replay_.fn());
  for (uint64_t seq = 0; seq < 4; ++seq) s.OnMessage(seq, Batch(seq));
  // The replica restarted: its publisher numbers from 0 again, with new batches.
  const json j = json::array({9.0,
                              json::array({json::array({"BlockStored", json::array({150u}), nullptr,
                                                        json::array({1, 2}), 2, nullptr, "GPU"})}),
                              0});
  const std::vector<uint8_t> bytes = json::to_msgpack(j);
  s.OnMessage(0, std::string(bytes.begin(), bytes.end()));
  EXPECT_EQ(s.counters().restarts.load(), 1u);
  EXPECT_EQ(Held(60), (std::vector<uint64_t>{150}));
  EXPECT_EQ(s.expected(), 1u);
}

TEST_F(EventSequencerTest, APayloadThatDoesNotDecodeClearsTheReplica) {
  EventSequencer s(0, &index_, replay_.fn());
  s.OnMessage(0, Batch(0));
  s.OnMessage(1, "\xc1");
  EXPECT_TRUE(Held().empty());
  EXPECT_EQ(s.counters().decode_errors.load(), 1u);
  EXPECT_EQ(s.expected(), 2u);
  s.OnMessage(2, Batch(2));
  EXPECT_EQ(Held(), (std::vector<uint64_t>{102}));
}

TEST_F(EventSequencerTest, ResyncStartsOverFromTheBuffer) {
  replay_.Publish(0, 2);
  EventSequencer s(0, &index_, replay_.fn());
  s.OnMessage(0, Batch(0));
  replay_.buffer.erase(0);  // the buffer moved on
  s.Resync();
  EXPECT_EQ(Held(), (std::vector<uint64_t>{101, 102}));
  EXPECT_EQ(s.expected(), 3u);
}

}  // namespace
}  // namespace event_sequencer_test
}  // namespace kvserve::router
