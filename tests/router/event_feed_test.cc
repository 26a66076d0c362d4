// The subscriber threads against a publisher that speaks vLLM's wire protocol (a PUB socket for
// [topic, seq, payload] and a ROUTER answering replay requests), in process.
#include "router/event_feed.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

// libzmq is not built with ThreadSanitizer, so TSan cannot see the synchronisation inside it
// (its lock-free pipes between a socket's user and its I/O thread) and reports the file
// descriptors they hand over as races. Reports from inside libzmq are suppressed; the router's
// own code keeps every ZeroMQ socket on one thread.
extern "C" const char* __tsan_default_suppressions() { return "called_from_lib:libzmq.so\n"; }

namespace kvserve::router {
namespace event_feed_test {
namespace {

using nlohmann::json;

std::string Batch(uint64_t seq) {
  const json j =
      json::array({1.0,
                   json::array({json::array({"BlockStored", json::array({100 + seq}), nullptr,
                                             json::array({1, 2}), 2, nullptr, "GPU"})}),
                   0});
  const std::vector<uint8_t> bytes = json::to_msgpack(j);
  return std::string(bytes.begin(), bytes.end());
}

std::string Seq(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i, v >>= 8) out[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
  return out;
}

class FakePublisher {
 public:
  FakePublisher() : pub_(ctx_, zmq::socket_type::pub), router_(ctx_, zmq::socket_type::router) {
    pub_.set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::linger, 0);
    pub_.bind("tcp://127.0.0.1:*");
    router_.bind("tcp://127.0.0.1:*");
    thread_ = std::thread([this] { ServeReplays(); });
  }
  ~FakePublisher() {
    stop_.store(true);
    thread_.join();
  }

  std::string endpoint() { return pub_.get(zmq::sockopt::last_endpoint); }
  std::string replay_endpoint() { return router_.get(zmq::sockopt::last_endpoint); }

  // Buffers batch `seq` for replay and, if `send`, publishes it.
  void Publish(uint64_t seq, bool send) {
    std::string payload = Batch(seq);
    {
      std::lock_guard lock(mu_);
      buffer_[seq] = payload;
    }
    if (!send) return;
    std::lock_guard lock(pub_mu_);
    pub_.send(zmq::buffer(std::string("kv")), zmq::send_flags::sndmore);
    pub_.send(zmq::buffer(Seq(seq)), zmq::send_flags::sndmore);
    pub_.send(zmq::buffer(payload), zmq::send_flags::none);
  }

  int replays() const { return replays_.load(); }

 private:
  void ServeReplays() {
    while (!stop_.load()) {
      zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(20));
      if ((item.revents & ZMQ_POLLIN) == 0) continue;
      std::vector<zmq::message_t> parts;
      if (!zmq::recv_multipart(router_, std::back_inserter(parts)) || parts.size() != 3) continue;
      replays_.fetch_add(1);
      uint64_t start = 0;
      for (size_t i = 0; i < 8; ++i) {
        start = (start << 8) | static_cast<const unsigned char*>(parts[2].data())[i];
      }
      std::map<uint64_t, std::string> copy;
      {
        std::lock_guard lock(mu_);
        copy = buffer_;
      }
      // [identity, "", seq, payload] per batch, then [identity, "", -1, ""]. The frames' bytes
      // live in these strings while the buffers point at them.
      const std::string id = parts[0].to_string();
      const std::string empty;
      for (auto it = copy.lower_bound(start); it != copy.end(); ++it) {
        const std::string seq = Seq(it->first);
        std::array<zmq::const_buffer, 4> reply = {zmq::buffer(id), zmq::buffer(empty),
                                                  zmq::buffer(seq), zmq::buffer(it->second)};
        zmq::send_multipart(router_, reply);
      }
      const std::string last = Seq(~uint64_t{0});
      std::array<zmq::const_buffer, 4> end = {zmq::buffer(id), zmq::buffer(empty),
                                              zmq::buffer(last), zmq::buffer(empty)};
      zmq::send_multipart(router_, end);
    }
  }

  zmq::context_t ctx_{1};
  zmq::socket_t pub_;
  zmq::socket_t router_;  // used by the replay thread only (after construction)
  std::mutex pub_mu_;
  std::mutex mu_;
  std::map<uint64_t, std::string> buffer_;
  std::atomic<int> replays_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Polls `done` until it holds; the deadline only bounds a hang.
template <typename Done, typename Nudge>
bool Eventually(Done done, Nudge nudge) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    nudge();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

bool Holds(const BlockIndex& index, uint64_t hash) {
  return index.MatchPrefix(0, std::vector<uint64_t>{hash}) == 1;
}

TEST(EventFeedTest, LearnsTheBufferAtStartThenFollowsTheStreamAndFillsAGap) {
  FakePublisher pub;
  for (uint64_t s = 0; s < 3; ++s) pub.Publish(s, /*send=*/false);  // before the router came
  BlockIndex index(BlockIndexConfig{1, 0, std::chrono::milliseconds(1000), {}});
  EventFeed feed({EventSource{pub.endpoint(), pub.replay_endpoint(), "kv"}}, &index);
  feed.Start();
  ASSERT_TRUE(Eventually([&] { return Holds(index, 102); }, [] {}));
  EXPECT_EQ(index.NumStoredBlocks(0), 3u);
  EXPECT_EQ(index.block_size(), 2);

  pub.Publish(3, /*send=*/false);  // lost on the way: only the replay buffer has it
  // Batch 4 is sent until the subscriber has it (its subscription may take a moment to reach
  // the publisher; repeats are duplicates and skipped).
  ASSERT_TRUE(Eventually([&] { return Holds(index, 104); }, [&] { pub.Publish(4, true); }));
  EXPECT_TRUE(Holds(index, 103));
  const EventCounters* c = feed.counters(0);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->gaps.load(), 1u);
  EXPECT_EQ(c->replayed.load(), 4u);  // 0, 1, 2 at start and 3 for the gap
  EXPECT_EQ(c->resyncs.load(), 0u);
  EXPECT_EQ(pub.replays(), 2);

  feed.RequestResync(0);
  ASSERT_TRUE(Eventually([&] { return pub.replays() == 3; }, [] {}));
  ASSERT_TRUE(Eventually([&] { return index.NumStoredBlocks(0) == 5; }, [] {}));
  feed.Stop();
}

TEST(EventFeedTest, AReplicaWithoutEventsHasNoSubscriber) {
  BlockIndex index(BlockIndexConfig{2, 0, std::chrono::milliseconds(1000), {}});
  EventFeed feed({EventSource{}, EventSource{}}, &index);
  feed.Start();
  EXPECT_EQ(feed.counters(0), nullptr);
  feed.Stop();
}

}  // namespace
}  // namespace event_feed_test
}  // namespace kvserve::router
