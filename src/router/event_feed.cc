#include "router/event_feed.h"

#include <atomic>
#include <chrono>
#include <iterator>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "util/log.h"

namespace kvserve::router {

namespace {

constexpr std::chrono::milliseconds kPollSlice{100};    // how soon Stop and resyncs are seen
constexpr std::chrono::milliseconds kReplayWait{1000};  // for each message of a replay
constexpr uint64_t kEndOfReplay = ~uint64_t{0};         // vLLM's -1 as 8 big-endian bytes

uint64_t ReadSeq(const zmq::message_t& m) {
  const auto* p = static_cast<const unsigned char*>(m.data());
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

void WriteSeq(uint64_t v, unsigned char out[8]) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<unsigned char>(v & 0xff);
    v >>= 8;
  }
}

// One replica's subscriber: its sockets live on its own thread.
class Subscriber {
 public:
  Subscriber(zmq::context_t* ctx, int replica, EventSource source, BlockIndex* index)
      : ctx_(ctx),
        replica_(replica),
        source_(std::move(source)),
        sequencer_(
            replica, index,
            source_.replay_endpoint.empty() ? EventSequencer::Replay()
                                            : [this](uint64_t from) { return Replay(from); }) {}

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  void RequestResync() { resync_.store(true); }
  const EventCounters& counters() const { return sequencer_.counters(); }

 private:
  void Run() {
    try {
      zmq::socket_t sub(*ctx_, zmq::socket_type::sub);
      sub.set(zmq::sockopt::linger, 0);
      sub.set(zmq::sockopt::rcvhwm, 0);  // never drop on our side; the publisher's HWM decides
      sub.set(zmq::sockopt::subscribe, source_.topic);
      sub.connect(source_.endpoint);
      sequencer_.Sync();
      std::vector<zmq::message_t> parts;
      while (!stop_.load()) {
        if (resync_.exchange(false)) sequencer_.Resync();
        zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, kPollSlice);
        if ((item.revents & ZMQ_POLLIN) == 0) continue;
        for (;;) {
          parts.clear();
          if (!zmq::recv_multipart(sub, std::back_inserter(parts), zmq::recv_flags::dontwait)) {
            break;
          }
          // [topic, seq, payload] as vLLM sends it; [seq, payload] from a publisher without topic.
          if (parts.size() < 2) continue;
          const zmq::message_t& seq = parts[parts.size() - 2];
          const zmq::message_t& payload = parts.back();
          if (seq.size() != 8) continue;
          sequencer_.OnMessage(ReadSeq(seq), payload.to_string_view());
        }
      }
    } catch (const zmq::error_t& e) {
      KV_LOG(Error, "replica {}: the KV event subscriber stopped: {}", replica_, e.what());
    }
  }

  std::optional<std::vector<SequencedBatch>> Replay(uint64_t from) {
    if (!dealer_) {
      dealer_.emplace(*ctx_, zmq::socket_type::dealer);
      dealer_->set(zmq::sockopt::linger, 0);
      dealer_->connect(source_.replay_endpoint);
    }
    unsigned char start[8];
    WriteSeq(from, start);
    // A DEALER speaks to vLLM's ROUTER as a REQ socket would: an empty delimiter first.
    dealer_->send(zmq::message_t(), zmq::send_flags::sndmore);
    dealer_->send(zmq::message_t(start, 8), zmq::send_flags::none);
    std::vector<SequencedBatch> out;
    std::vector<zmq::message_t> parts;
    for (;;) {
      zmq::pollitem_t item{dealer_->handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, kReplayWait);
      if ((item.revents & ZMQ_POLLIN) == 0 || stop_.load()) {
        // No answer: a later reply must not be taken for the next request's, so start afresh.
        dealer_.reset();
        return std::nullopt;
      }
      parts.clear();
      if (!zmq::recv_multipart(*dealer_, std::back_inserter(parts))) continue;
      size_t first = 0;
      while (first < parts.size() && parts[first].size() == 0) ++first;  // the delimiter
      if (parts.size() - first < 1 || parts[first].size() != 8) continue;
      const uint64_t seq = ReadSeq(parts[first]);
      if (seq == kEndOfReplay) return out;
      if (parts.size() - first < 2) continue;
      out.push_back({seq, parts[first + 1].to_string()});
    }
  }

  zmq::context_t* const ctx_;
  const int replica_;
  const EventSource source_;
  EventSequencer sequencer_;
  std::optional<zmq::socket_t> dealer_;  // the subscriber thread's only
  std::atomic<bool> stop_{false};
  std::atomic<bool> resync_{false};
  std::thread thread_;
};

}  // namespace

struct EventFeed::Impl {
  zmq::context_t ctx{1};
  std::vector<std::unique_ptr<Subscriber>> subscribers;  // [num_replicas], null without events
  bool started = false;
};

EventFeed::EventFeed(std::vector<EventSource> sources, BlockIndex* index)
    : impl_(std::make_unique<Impl>()) {
  for (size_t i = 0; i < sources.size(); ++i) {
    if (sources[i].endpoint.empty()) {
      impl_->subscribers.emplace_back();
    } else {
      impl_->subscribers.push_back(std::make_unique<Subscriber>(&impl_->ctx, static_cast<int>(i),
                                                                std::move(sources[i]), index));
    }
  }
}

EventFeed::~EventFeed() { Stop(); }

void EventFeed::Start() {
  if (impl_->started) return;
  impl_->started = true;
  for (auto& s : impl_->subscribers) {
    if (s) s->Start();
  }
}

void EventFeed::Stop() {
  for (auto& s : impl_->subscribers) {
    if (s) s->Stop();
  }
}

void EventFeed::RequestResync(int replica) {
  auto& s = impl_->subscribers.at(static_cast<size_t>(replica));
  if (s) s->RequestResync();
}

const EventCounters* EventFeed::counters(int replica) const {
  const auto& s = impl_->subscribers.at(static_cast<size_t>(replica));
  return s ? &s->counters() : nullptr;
}

}  // namespace kvserve::router
