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

// Medium names by Medium index (kRam, kDisk, kRedis).
constexpr const char* kMediumNames[] = {kMediumGpu, kMediumDisk, kMediumRedis};

// The medium of a lower tier by its KvTier::name(); -1 for a tier that is not announced.
int MediumOfTier(std::string_view tier) {
  if (tier == "disk") return 1;
  if (tier == "redis") return 2;
  return -1;
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

void KvEventPublisher::OnBlockInserted(const TreeBlock& b) { Append(Record::Kind::kStored, b); }

void KvEventPublisher::OnTierWriteQueued(const TreeBlock& b) {
  Append(Record::Kind::kPinned, b);
  pins_recorded_.fetch_add(1);
}

void KvEventPublisher::Append(Record::Kind kind, const TreeBlock& b) {
  Record r{kind,
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

void KvEventPublisher::OnTierWriteDone(const BlockKey& key) {
  PushTierReport(TierReport{TierReport::Kind::kWriteDone, 0, key, pins_recorded_.load(), {}, {}});
}

void KvEventPublisher::OnTierStored(std::string_view tier, const BlockKey& key) {
  const int medium = MediumOfTier(tier);
  if (medium < 0) return;
  PushTierReport(TierReport{TierReport::Kind::kStored, medium, key, pins_recorded_.load(), {}, {}});
}

void KvEventPublisher::OnTierRemoved(std::string_view tier, const BlockKey& key) {
  const int medium = MediumOfTier(tier);
  if (medium < 0) return;
  PushTierReport(TierReport{TierReport::Kind::kRemoved, medium, key, 0, {}, {}});
}

// Called by the thread attaching the tiers (the engine thread), so unsalted_root_ is its own.
void KvEventPublisher::OnTierSnapshot(std::string_view tier, std::vector<TierRecordInfo> records) {
  const int medium = MediumOfTier(tier);
  if (medium < 0 || records.empty()) return;
  PushTierReport(
      TierReport{TierReport::Kind::kSnapshot, medium, {}, 0, std::move(records), unsalted_root_});
}

void KvEventPublisher::PushTierReport(TierReport&& report) {
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    wake = waiting_ && !tier_blocked_;
    tier_queue_.push_back(std::move(report));
  }
  if (wake) work_cv_.notify_one();
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
        if (r.kind != Record::Kind::kRemoved) r.token_offset += offset;
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
  idle_cv_.wait(lock, [&] {
    return queue_.empty() && !busy_ &&
           (tier_blocked_ || (tier_queue_.empty() && tier_pending_ == 0));
  });
  --flushing_;
}

KvEventStats KvEventPublisher::stats() const {
  KvEventStats s;
  s.batches = batches_.load();
  s.stored_blocks = stored_blocks_.load();
  s.removed_blocks = removed_blocks_.load();
  s.replay_requests = replay_requests_.load();
  s.unknown_blocks = unknown_blocks_.load();
  s.tier_stored_blocks = tier_stored_blocks_.load();
  s.tier_removed_blocks = tier_removed_blocks_.load();
  s.unnamed_tier_blocks = unnamed_tier_blocks_.load();
  {
    std::lock_guard lock(mu_);
    s.merged_batches = merged_batches_;
  }
  return s;
}

void KvEventPublisher::Loop() {
  std::vector<Batch> work;
  std::vector<KvEvent> tier_events;
  for (;;) {
    bool last = false;
    {
      std::unique_lock lock(mu_);
      for (Batch& b : work) {  // give the sent batches' buffers back
        b.Clear();
        if (spare_.size() < 4) spare_.push_back(std::move(b));
      }
      work.clear();
      busy_ = false;
      idle_cv_.notify_all();
      // Tier reports wake the thread unless the front one waits for an engine batch.
      const auto has_work = [&] {
        return !queue_.empty() || (!tier_queue_.empty() && !tier_blocked_);
      };
      const auto ready = [&] { return stop_ || has_work(); };
      waiting_ = true;
      if (sockets_->replay) {
        work_cv_.wait_for(lock, kReplayPoll, ready);
      } else {
        work_cv_.wait(lock, ready);
      }
      waiting_ = false;
      if (has_work() && !stop_ && flushing_ == 0) {  // let the next steps' batches join
        work_cv_.wait_for(lock, kGather, [&] { return stop_ || flushing_ > 0; });
      }
      last = queue_.empty() && stop_;
      while (!queue_.empty()) {
        work.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      if (!work.empty()) tier_blocked_ = false;  // the batches may hold what the front waits for
      while (!tier_queue_.empty()) {
        tier_work_.push_back(std::move(tier_queue_.front()));
        tier_queue_.pop_front();
      }
      tier_pending_ = tier_work_.size();
      busy_ = !work.empty() || (!tier_work_.empty() && !tier_blocked_);
    }
    for (const Batch& b : work) SendBatch(b);
    if (!tier_work_.empty() && (!tier_blocked_ || last)) {
      // tier_blocked_ is only written by this thread: reading it without the lock is safe.
      const bool done = BuildTierEvents(/*final=*/last, &tier_events);
      Send(NowSeconds(), tier_events);
      std::lock_guard lock(mu_);
      tier_blocked_ = !done;
      tier_pending_ = tier_work_.size();
    }
    if (last) break;
    if (sockets_->replay) ServiceReplay();
  }
  sockets_.reset();  // closes the sockets (lingering briefly) on the thread that used them
}

KvEventPublisher::Entry* KvEventPublisher::FindOrMakeEntry(const BlockKey& key,
                                                           const BlockKey& parent_key, bool first,
                                                           const std::string& salt,
                                                           std::span<const int32_t> tokens) {
  if (auto it = entries_.find(key); it != entries_.end()) return &it->second;
  Entry e;
  e.first = first;
  if (first) {
    e.parent = none_hash_;
    e.salt = salt;
  } else {
    auto p = entries_.find(parent_key);
    if (p == entries_.end()) return nullptr;
    e.parent = p->second.hash;
  }
  e.hash = VllmHashBlock(e.parent, tokens, e.salt);
  return &entries_.emplace(key, std::move(e)).first->second;
}

void KvEventPublisher::EmitStored(const Entry& e, int medium, std::span<const int32_t> tokens,
                                  std::vector<KvEvent>* events) {
  const char* name = kMediumNames[medium];
  // A block that continues the chain of the last BlockStored (of the same medium) joins it.
  BlockStoredEvent* stored =
      events->empty() ? nullptr : std::get_if<BlockStoredEvent>(&events->back());
  if (!stored || e.first || stored->medium != name || stored->block_hashes.back() != e.parent) {
    events->push_back(BlockStoredEvent{});
    stored = &std::get<BlockStoredEvent>(events->back());
    stored->block_size = block_size_;
    stored->medium = name;
    if (!e.first) stored->parent_block_hash = e.parent;
    stored->first_block_salt = e.first ? e.salt : std::string();
  }
  stored->block_hashes.push_back(e.hash);
  stored->token_ids.insert(stored->token_ids.end(), tokens.begin(), tokens.end());
  stored_blocks_.fetch_add(1);
  if (medium != kRam) tier_stored_blocks_.fetch_add(1);
}

void KvEventPublisher::EmitRemoved(const Entry& e, int medium, std::vector<KvEvent>* events) {
  const char* name = kMediumNames[medium];
  BlockRemovedEvent* removed =
      events->empty() ? nullptr : std::get_if<BlockRemovedEvent>(&events->back());
  if (!removed || removed->medium != name) {
    events->push_back(BlockRemovedEvent{});
    removed = &std::get<BlockRemovedEvent>(events->back());
    removed->medium = name;
  }
  removed->block_hashes.push_back(e.hash);
  removed_blocks_.fetch_add(1);
  if (medium != kRam) tier_removed_blocks_.fetch_add(1);
}

void KvEventPublisher::EraseIfUnused(std::unordered_map<BlockKey, Entry>::iterator it) {
  if (it->second.media == 0 && it->second.pins == 0) entries_.erase(it);
}

void KvEventPublisher::BuildEvents(const Batch& batch, std::vector<KvEvent>* events) {
  events->clear();
  if (batch.cleared) {
    entries_.clear();
    for (auto& keys : unnamed_) keys.clear();
    events->push_back(AllBlocksClearedEvent{});
  }
  const size_t bs = static_cast<size_t>(block_size_);
  for (const Record& r : batch.records) {
    if (r.kind == Record::Kind::kRemoved) {
      auto it = entries_.find(r.key);
      if (it == entries_.end() || !(it->second.media & (1u << kRam))) {
        unknown_blocks_.fetch_add(1);
        continue;
      }
      EmitRemoved(it->second, kRam, events);
      it->second.media &= static_cast<uint8_t>(~(1u << kRam));
      EraseIfUnused(it);
      continue;
    }
    const std::span<const int32_t> tokens(batch.tokens.data() + r.token_offset, bs);
    if (r.kind == Record::Kind::kPinned) ++pins_processed_;
    Entry* e = FindOrMakeEntry(r.key, r.parent_key, r.first, r.salt, tokens);
    if (e == nullptr) {
      unknown_blocks_.fetch_add(1);
      continue;
    }
    if (r.kind == Record::Kind::kPinned) {  // its tier reports will need the tokens
      ++e->pins;
      if (e->tokens.empty()) e->tokens.assign(tokens.begin(), tokens.end());
      continue;
    }
    if (e->media & (1u << kRam)) continue;  // never: the tree inserts a block once
    e->media |= 1u << kRam;
    EmitStored(*e, kRam, tokens, events);
    if (!unnamed_[kDisk].empty() || !unnamed_[kRedis].empty()) {
      NameWaitingRecords(r.key, *e, tokens, events);
    }
  }
}

void KvEventPublisher::NameWaitingRecords(const BlockKey& key, Entry& e,
                                          std::span<const int32_t> tokens,
                                          std::vector<KvEvent>* events) {
  for (int m = kDisk; m < kNumMedia; ++m) {
    if (unnamed_[m].erase(key) == 0 || (e.media & (1u << m))) continue;
    e.media |= static_cast<uint8_t>(1u << m);
    unnamed_tier_blocks_.fetch_sub(1);
    EmitStored(e, m, tokens, events);
  }
}

// NOTE (waiting): a stored or write-done report comes after its write was queued on the engine
// thread, but the kPinned record of that write may still sit in the open batch. Such a report
// (pins_processed_ below the pins recorded when it was made, and no tokens known for its key)
// waits, and every report behind it, so that one key's reports keep their order.
bool KvEventPublisher::BuildTierEvents(bool final, std::vector<KvEvent>* events) {
  events->clear();
  for (; !tier_work_.empty(); tier_work_.pop_front()) {
    const TierReport& r = tier_work_.front();
    const uint8_t bit = static_cast<uint8_t>(1u << r.medium);
    auto it = r.kind == TierReport::Kind::kSnapshot ? entries_.end() : entries_.find(r.key);
    switch (r.kind) {
      case TierReport::Kind::kStored: {
        if (it == entries_.end() || it->second.tokens.empty()) {
          if (pins_processed_ < r.pins_needed && !final) return false;
          unnamed_tier_blocks_.fetch_add(1);  // a write queued before the stream was attached
          break;
        }
        if (it->second.media & bit) break;
        it->second.media |= bit;
        EmitStored(it->second, r.medium, it->second.tokens, events);
        break;
      }
      case TierReport::Kind::kRemoved:
        if (unnamed_[r.medium].erase(r.key) > 0) {
          unnamed_tier_blocks_.fetch_sub(1);
        }
        if (it == entries_.end() || !(it->second.media & bit)) break;  // never announced
        EmitRemoved(it->second, r.medium, events);
        it->second.media &= static_cast<uint8_t>(~bit);
        EraseIfUnused(it);
        break;
      case TierReport::Kind::kWriteDone:
        if (it == entries_.end() || it->second.pins == 0) {
          if (pins_processed_ < r.pins_needed && !final) return false;
          break;
        }
        if (--it->second.pins == 0) it->second.tokens = {};
        EraseIfUnused(it);
        break;
      case TierReport::Kind::kSnapshot:
        BuildSnapshotEvents(r, events);
        break;
    }
  }
  return true;
}

// NOTE (a restarted tier's records): a record names its parent's key, its namespace's root key
// and its tokens, so its vLLM hash chains from its parent's (a record of the snapshot, named
// first, or a block already known) up to a first block. A first block can be named only in the
// unsalted namespace: a salted namespace's root key is a digest that does not give back its
// salt. Records that cannot be named are counted (unnamed_tier_blocks) and not announced.
void KvEventPublisher::BuildSnapshotEvents(const TierReport& report, std::vector<KvEvent>* events) {
  const std::vector<TierRecordInfo>& recs = report.records;
  const size_t n = recs.size();
  std::unordered_map<BlockKey, size_t> index;
  for (size_t i = 0; i < n; ++i) index.emplace(recs[i].key, i);
  enum : uint8_t { kUnseen, kNamed, kUnnamed, kOnPath };
  std::vector<uint8_t> state(n, kUnseen);
  std::vector<size_t> path;
  const uint8_t bit = static_cast<uint8_t>(1u << report.medium);
  for (size_t i = 0; i < n; ++i) {
    path.clear();  // from recs[i] up to the first record settled, first, or without parent record
    for (size_t cur = i; state[cur] == kUnseen;) {
      path.push_back(cur);
      state[cur] = kOnPath;
      const TierRecordInfo& r = recs[cur];
      if (r.parent_key == r.root_key) break;
      auto p = index.find(r.parent_key);
      if (p == index.end()) break;
      cur = p->second;
    }
    for (auto k = path.rbegin(); k != path.rend(); ++k) {  // top down: parents first
      const TierRecordInfo& r = recs[*k];
      const bool first = r.parent_key == r.root_key;
      bool nameable = !first || r.root_key == report.unsalted_root;
      if (!first) {
        auto p = index.find(r.parent_key);
        if (p != index.end()) nameable = state[p->second] == kNamed;  // kOnPath: a cycle
      }
      Entry* e =
          nameable ? FindOrMakeEntry(r.key, r.parent_key, first, std::string(), r.tokens) : nullptr;
      if (e == nullptr) {
        state[*k] = kUnnamed;
        if (unnamed_[report.medium].insert(r.key).second) unnamed_tier_blocks_.fetch_add(1);
        continue;
      }
      state[*k] = kNamed;
      if (e->media & bit) continue;
      e->media |= bit;
      EmitStored(*e, report.medium, r.tokens, events);
    }
  }
}

void KvEventPublisher::SendBatch(const Batch& batch) {
  BuildEvents(batch, &events_);
  Send(batch.ts, events_);
}

void KvEventPublisher::Send(double ts, const std::vector<KvEvent>& events) {
  if (events.empty()) return;  // nothing a subscriber could use (unknown blocks only)
  std::string payload;
  if (config_.buffer_steps > 0 && replay_.size() >= static_cast<size_t>(config_.buffer_steps)) {
    payload = std::move(replay_.front().second);  // reuse the oldest kept batch's buffer
    replay_.pop_front();
  }
  payload.clear();
  EncodeKvEventBatch(ts, events, /*data_parallel_rank=*/0, config_.hash_form, &payload);
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
