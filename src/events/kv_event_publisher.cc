// KvEventPublisher (kv_event_publisher.h): the engine thread's records, the publisher thread's
// events, the PUB and replay sockets.
#include "events/kv_event_publisher.h"

#include <fmt/format.h>
#include <pthread.h>

#include <chrono>
#include <zmq.hpp>

#include "util/check.h"
#include "util/log.h"

namespace kvserve {
namespace {

// How often the publisher thread looks at the replay socket while no batch arrives.
constexpr auto kReplayPoll = std::chrono::milliseconds(20);
// How long the publisher thread lets batches gather after the first one arrives. Each wake-up of
// it (and of ZeroMQ's I/O thread) costs far more than a batch's hashing and encoding, and a busy
// engine ends a batch every few milliseconds; in bursts, a batch waits at most this long.
constexpr auto kGather = std::chrono::milliseconds(20);
// Queued messages a closing socket may still send.
constexpr int kLingerMs = 200;
constexpr size_t kMaxSalts = 65536;

void PutSeq(uint64_t seq, uint8_t out[8]) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(seq >> (8 * (7 - i)));
}

// vLLM's rule: bind what looks like a local address to offer, connect to anything else.
bool ShouldBind(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct KvEventPublisher::Sockets {
  zmq::context_t ctx{1};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  std::unique_ptr<zmq::socket_t> replay;
};

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Create(const KvEventsConfig& config,
                                                                   int block_size) {
  KV_CHECK(config.enabled, "a publisher for a disabled event stream");
  KV_CHECK(block_size >= 1, "block size {}", block_size);
  auto s = std::make_unique<Sockets>();
  try {
    s->pub.set(zmq::sockopt::sndhwm, config.hwm);
    s->pub.set(zmq::sockopt::linger, kLingerMs);
    if (ShouldBind(config.endpoint)) {
      s->pub.bind(config.endpoint);
    } else {
      s->pub.connect(config.endpoint);
    }
  } catch (const zmq::error_t& e) {
    return InvalidArgument(fmt::format("kv events: cannot {} the endpoint {}: {}",
                                       ShouldBind(config.endpoint) ? "bind" : "connect to",
                                       config.endpoint, e.what()));
  }
  if (config.replay_endpoint) {
    try {
      s->replay = std::make_unique<zmq::socket_t>(s->ctx, zmq::socket_type::router);
      s->replay->set(zmq::sockopt::sndhwm, 0);  // a replay of every kept batch is not cut short
      s->replay->set(zmq::sockopt::linger, 0);
      s->replay->bind(*config.replay_endpoint);
    } catch (const zmq::error_t& e) {
      return InvalidArgument(fmt::format("kv events: cannot bind the replay endpoint {}: {}",
                                         *config.replay_endpoint, e.what()));
    }
  }
  return std::unique_ptr<KvEventPublisher>(new KvEventPublisher(config, block_size, std::move(s)));
}

KvEventPublisher::KvEventPublisher(const KvEventsConfig& config, int block_size,
                                   std::unique_ptr<Sockets> sockets)
    : config_(config),
      block_size_(block_size),
      none_hash_(VllmNoneHash(config.hash_seed)),
      sockets_(std::move(sockets)) {
  endpoint_ = ShouldBind(config_.endpoint) ? sockets_->pub.get(zmq::sockopt::last_endpoint)
                                           : config_.endpoint;
  if (sockets_->replay) replay_endpoint_ = sockets_->replay->get(zmq::sockopt::last_endpoint);
  // The RAM cache starts empty: say so first, so that a subscriber replaying from 0 (or one that
  // knew this replica before a restart) starts from an empty view.
  Batch first;
  first.ts = NowSeconds();
  first.cleared = true;
  queue_.push_back(std::move(first));
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "kv-events");  // for top -H, perf and debuggers
    Loop();
  });
}

KvEventPublisher::~KvEventPublisher() {
  EndStep();
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void KvEventPublisher::OnBlockInserted(const TreeBlock& b) {
  Record r{Record::Kind::kStored,
           b.parent_key == b.root_key,
           static_cast<uint32_t>(open_.tokens.size()),
           b.key,
           b.parent_key,
           {}};
  if (r.first && !salts_.empty()) {
    if (auto it = salts_.find(b.root_key); it != salts_.end()) {
      it->second.last_use = ++salt_serial_;
      r.salt = it->second.salt;
    }
  }
  KV_CHECK_EQ(b.tokens.size(), static_cast<size_t>(block_size_));
  open_.tokens.insert(open_.tokens.end(), b.tokens.begin(), b.tokens.end());
  open_.records.push_back(std::move(r));
}

void KvEventPublisher::OnBlockEvicted(const TreeBlock& b) {
  open_.records.push_back(Record{Record::Kind::kRemoved, false, 0, b.key, b.parent_key, {}});
}

void KvEventPublisher::SetNamespaceSalt(const BlockKey& root_key, const std::string& salt) {
  if (salt.empty()) return;
  SaltEntry& e = salts_[root_key];
  e.salt = salt;
  e.last_use = ++salt_serial_;
  if (salts_.size() > kMaxSalts) {  // forget the older half
    const uint64_t cut = salt_serial_ - kMaxSalts / 2;
    std::erase_if(salts_, [cut](const auto& entry) { return entry.second.last_use < cut; });
  }
}

void KvEventPublisher::EndStep() {
  if (open_.records.empty()) return;
  open_.ts = NowSeconds();
  Handover(std::move(open_));
}

void KvEventPublisher::Handover(Batch&& batch) {
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    wake = waiting_;  // not while it gathers or sends: it looks at the queue next anyway
    if (queue_.size() >= static_cast<size_t>(config_.max_queue_size)) {
      // The thread is far behind: join the last queued batch (it is not being sent yet).
      Batch& last = queue_.back();
      const uint32_t offset = static_cast<uint32_t>(last.tokens.size());
      for (Record& r : batch.records) {
        if (r.kind == Record::Kind::kStored) r.token_offset += offset;
        last.records.push_back(std::move(r));
      }
      last.tokens.insert(last.tokens.end(), batch.tokens.begin(), batch.tokens.end());
      ++merged_batches_;
      batch.Clear();
    } else {
      queue_.push_back(std::move(batch));
      batch = Batch{};
      if (!spare_.empty()) {  // the open batch takes a sent one's buffers
        batch = std::move(spare_.back());
        spare_.pop_back();
      }
    }
  }
  if (wake) work_cv_.notify_one();
}

void KvEventPublisher::Flush() {
  std::unique_lock lock(mu_);
  ++flushing_;  // ends the gathering now
  work_cv_.notify_all();
  idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  --flushing_;
}

KvEventStats KvEventPublisher::stats() const {
  KvEventStats s;
  s.batches = batches_.load();
  s.stored_blocks = stored_blocks_.load();
  s.removed_blocks = removed_blocks_.load();
  s.replay_requests = replay_requests_.load();
  s.unknown_blocks = unknown_blocks_.load();
  {
    std::lock_guard lock(mu_);
    s.merged_batches = merged_batches_;
  }
  return s;
}

void KvEventPublisher::Loop() {
  std::vector<Batch> work;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      for (Batch& b : work) {  // give the sent batches' buffers back
        b.Clear();
        if (spare_.size() < 4) spare_.push_back(std::move(b));
      }
      work.clear();
      busy_ = false;
      if (queue_.empty()) idle_cv_.notify_all();
      const auto ready = [&] { return stop_ || !queue_.empty(); };
      waiting_ = true;
      if (sockets_->replay) {
        work_cv_.wait_for(lock, kReplayPoll, ready);
      } else {
        work_cv_.wait(lock, ready);
      }
      waiting_ = false;
      if (!queue_.empty() && !stop_ && flushing_ == 0) {  // let the next steps' batches join
        work_cv_.wait_for(lock, kGather, [&] { return stop_ || flushing_ > 0; });
      }
      if (queue_.empty() && stop_) break;
      while (!queue_.empty()) {
        work.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      busy_ = !work.empty();
    }
    for (const Batch& b : work) Send(b);
    if (sockets_->replay) ServiceReplay();
  }
  sockets_.reset();  // closes the sockets (lingering briefly) on the thread that used them
}

void KvEventPublisher::BuildEvents(const Batch& batch, std::vector<KvEvent>* events) {
  events->clear();
  if (batch.cleared) {
    hashes_.clear();
    events->push_back(AllBlocksClearedEvent{});
  }
  const size_t bs = static_cast<size_t>(block_size_);
  for (const Record& r : batch.records) {
    if (r.kind == Record::Kind::kRemoved) {
      auto it = hashes_.find(r.key);
      if (it == hashes_.end()) {
        unknown_blocks_.fetch_add(1);
        continue;
      }
      if (events->empty() || !std::holds_alternative<BlockRemovedEvent>(events->back())) {
        events->push_back(BlockRemovedEvent{});
      }
      std::get<BlockRemovedEvent>(events->back()).block_hashes.push_back(it->second);
      hashes_.erase(it);
      removed_blocks_.fetch_add(1);
      continue;
    }
    const VllmBlockHash* parent = &none_hash_;
    if (!r.first) {
      auto it = hashes_.find(r.parent_key);
      if (it == hashes_.end()) {
        unknown_blocks_.fetch_add(1);
        continue;
      }
      parent = &it->second;
    }
    const std::span<const int32_t> tokens(batch.tokens.data() + r.token_offset, bs);
    const VllmBlockHash h = VllmHashBlock(*parent, tokens, r.first ? r.salt : std::string());
    // A block that continues the chain of the last BlockStored joins it.
    BlockStoredEvent* stored =
        events->empty() ? nullptr : std::get_if<BlockStoredEvent>(&events->back());
    if (!stored || r.first || stored->block_hashes.back() != *parent) {
      events->push_back(BlockStoredEvent{});
      stored = &std::get<BlockStoredEvent>(events->back());
      stored->block_size = block_size_;
      if (!r.first) stored->parent_block_hash = *parent;
      stored->first_block_salt = r.first ? r.salt : std::string();
    }
    stored->block_hashes.push_back(h);
    stored->token_ids.insert(stored->token_ids.end(), tokens.begin(), tokens.end());
    hashes_[r.key] = h;
    stored_blocks_.fetch_add(1);
  }
}

void KvEventPublisher::Send(const Batch& batch) {
  BuildEvents(batch, &events_);
  if (events_.empty()) return;  // nothing a subscriber could use (unknown blocks only)
  std::string payload;
  if (config_.buffer_steps > 0 && replay_.size() >= static_cast<size_t>(config_.buffer_steps)) {
    payload = std::move(replay_.front().second);  // reuse the oldest kept batch's buffer
    replay_.pop_front();
  }
  payload.clear();
  EncodeKvEventBatch(batch.ts, events_, /*data_parallel_rank=*/0, config_.hash_form, &payload);
  const uint64_t seq = next_seq_++;
  uint8_t seq_bytes[8];
  PutSeq(seq, seq_bytes);
  try {
    zmq::socket_t& pub = sockets_->pub;
    pub.send(zmq::buffer(config_.topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    pub.send(zmq::buffer(seq_bytes, 8), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {  // the batch stays in the replay buffer
    KV_LOG(Warning, "kv events: sending batch {} failed: {}", seq, e.what());
  }
  if (config_.buffer_steps > 0) replay_.emplace_back(seq, std::move(payload));
  batches_.fetch_add(1);
}

void KvEventPublisher::ServiceReplay() {
  zmq::socket_t& router = *sockets_->replay;
  for (;;) {
    std::vector<zmq::message_t> frames;
    try {
      zmq::message_t frame;
      if (!router.recv(frame, zmq::recv_flags::dontwait)) return;
      frames.push_back(std::move(frame));
      while (frames.back().more()) {
        zmq::message_t next;
        (void)router.recv(next, zmq::recv_flags::none);
        frames.push_back(std::move(next));
      }
    } catch (const zmq::error_t& e) {
      KV_LOG(Warning, "kv events: replay request failed: {}", e.what());
      return;
    }
    // [identity, "", start seq]; anything else is ignored, as vLLM does.
    if (frames.size() != 3 || frames[2].size() == 0 || frames[2].size() > 8) continue;
    uint64_t start = 0;
    const auto* p = static_cast<const uint8_t*>(frames[2].data());
    for (size_t i = 0; i < frames[2].size(); ++i) start = (start << 8) | p[i];
    try {
      uint8_t seq_bytes[8];
      for (const auto& [seq, payload] : replay_) {
        if (seq < start) continue;
        PutSeq(seq, seq_bytes);
        router.send(zmq::buffer(frames[0].data(), frames[0].size()), zmq::send_flags::sndmore);
        router.send(zmq::message_t(), zmq::send_flags::sndmore);
        router.send(zmq::buffer(seq_bytes, 8), zmq::send_flags::sndmore);
        router.send(zmq::buffer(payload), zmq::send_flags::none);
      }
      PutSeq(~uint64_t{0}, seq_bytes);  // -1: the end of the replay
      router.send(zmq::buffer(frames[0].data(), frames[0].size()), zmq::send_flags::sndmore);
      router.send(zmq::message_t(), zmq::send_flags::sndmore);
      router.send(zmq::buffer(seq_bytes, 8), zmq::send_flags::sndmore);
      router.send(zmq::message_t(), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      KV_LOG(Warning, "kv events: replay answer failed: {}", e.what());
    }
    replay_requests_.fetch_add(1);
  }
}

}  // namespace kvserve
