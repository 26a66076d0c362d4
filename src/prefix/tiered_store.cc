#include "prefix/tiered_store.h"

#include <fmt/format.h>

#include <chrono>

#include "prefix/block_record.h"
#include "util/check.h"
#include "util/log.h"

namespace kvserve {
namespace {

constexpr size_t kMaxHeldKeys = 1 << 16;  // per tier, for tiers without an exact index
constexpr size_t kMaxSpareBuffers = 64;

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Result<TierWritePolicy> ParseTierWritePolicy(std::string_view name) {
  if (name == "write-through") return TierWritePolicy::kWriteThrough;
  if (name == "write-back") return TierWritePolicy::kWriteBack;
  return InvalidArgument(
      fmt::format("unknown write policy '{}'; use write-through or write-back", name));
}

TieredStore::TieredStore(std::vector<std::unique_ptr<KvTier>> tiers,
                         const TieredStoreConfig& config, const KvStorage* kv)
    : tiers_(std::move(tiers)), config_(config), kv_(kv) {
  KV_CHECK(!tiers_.empty() && tiers_.size() <= 32, "a tiered store needs 1 to 32 tiers");
  held_.resize(tiers_.size());
  held_order_.resize(tiers_.size());
  const size_t record = BlockRecordBytes(kv_->layout());
  for (uint64_t b = 0; b + record <= config_.read_buffer_bytes; b += record) {
    read_buffers_.emplace_back(record);  // zero-filled: its pages are touched now
  }
  writer_ = std::thread([this] { WriterLoop(); });
  reader_ = std::thread([this] { ReaderLoop(); });
}

TieredStore::~TieredStore() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  write_cv_.notify_all();
  read_cv_.notify_all();
  writer_.join();
  reader_.join();
}

std::vector<uint8_t> TieredStore::TakeBuffer() {
  std::lock_guard lock(mu_);
  if (buffers_.empty()) return {};
  std::vector<uint8_t> b = std::move(buffers_.back());
  buffers_.pop_back();
  return b;
}

void TieredStore::GiveBuffer(std::vector<uint8_t> buffer) {
  std::lock_guard lock(mu_);
  if (buffers_.size() < kMaxSpareBuffers) buffers_.push_back(std::move(buffer));
}

void TieredStore::NoteHeld(int tier, const BlockKey& key) {
  // REQUIRES: mu_ held.
  if (tiers_[tier]->exact_contains()) return;
  if (!held_[tier].insert(key).second) return;
  held_order_[tier].push_back(key);
  if (held_order_[tier].size() > kMaxHeldKeys) {
    held_[tier].erase(held_order_[tier].front());
    held_order_[tier].pop_front();
  }
}

uint32_t TieredStore::TiersLacking(const BlockKey& key) {
  uint32_t mask = 0;
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < tiers_.size(); ++i) {
    const bool held =
        tiers_[i]->exact_contains() ? tiers_[i]->MayContain(key) : held_[i].count(key) != 0;
    if (!held) mask |= 1u << i;
  }
  return mask;
}

bool TieredStore::MayContain(const BlockKey& key) {
  for (const auto& t : tiers_) {
    if (t->MayContain(key)) return true;
  }
  return false;
}

void TieredStore::OnBlockInserted(const TreeBlock& b) {
  if (config_.write_policy == TierWritePolicy::kWriteThrough) Enqueue(b);
}

void TieredStore::OnBlockEvicted(const TreeBlock& b) {
  if (config_.write_policy == TierWritePolicy::kWriteBack) Enqueue(b);
}

// NOTE (engine thread cost): one copy of the block's bytes into a recycled buffer; the checksum
// and every byte of I/O happen on the writer thread. A write that does not fit the queue is
// dropped: the block stays in RAM and is simply not in the lower tiers.
void TieredStore::OnBlockRetained(const TreeBlock& b, int64_t until_ms) { Enqueue(b, until_ms); }

void TieredStore::Enqueue(const TreeBlock& b, int64_t retain_until) {
  const uint32_t mask = TiersLacking(b.key);
  if (mask == 0 && retain_until == 0) return;
  if (mask == 0) {  // every tier has it: only the deadline goes to the writer
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      writes_.push_back(WriteJob{b.key, {}, 0, retain_until});
    }
    write_cv_.notify_one();
    return;
  }
  const size_t bytes = BlockRecordBytes(kv_->layout());
  {
    std::lock_guard lock(mu_);
    if (stop_ || queued_write_bytes_ + bytes > config_.max_queued_write_bytes) {
      for (size_t i = 0; i < tiers_.size(); ++i) {
        if (mask >> i & 1) tiers_[i]->counters().dropped_writes.fetch_add(1);
      }
      return;
    }
    queued_write_bytes_ += bytes;
  }
  WriteJob job{b.key, TakeBuffer(), mask, retain_until, observer_ != nullptr};
  EncodeUnsealedBlockRecord(b, *kv_, &job.record);
  if (job.observed) observer_->OnTierWriteQueued(b);  // engine thread: no lock needed to read
  {
    std::lock_guard lock(mu_);
    writes_.push_back(std::move(job));
  }
  write_cv_.notify_one();
}

void TieredStore::WriterLoop() {
  for (;;) {
    WriteJob job;
    {
      std::unique_lock lock(mu_);
      writer_busy_ = false;
      done_cv_.notify_all();
      write_cv_.wait(lock, [&] { return stop_ || !writes_.empty(); });
      if (writes_.empty()) return;  // stopping, and every queued write is done
      job = std::move(writes_.front());
      writes_.pop_front();
      writer_busy_ = true;
    }
    if (job.tier_mask != 0) SealBlockRecord(job.record);
    for (size_t i = 0; i < tiers_.size(); ++i) {
      if (!(job.tier_mask >> i & 1)) continue;
      if (tiers_[i]->Put(job.key, job.record).ok()) {
        std::lock_guard lock(mu_);
        NoteHeld(static_cast<int>(i), job.key);
      }
    }
    if (job.retain_until != 0) {
      for (const auto& tier : tiers_) tier->Retain(job.key, job.retain_until);
    }
    if (job.observed) {
      std::lock_guard lock(observer_mu_);
      if (observer_) observer_->OnTierWriteDone(job.key);
    }
    {
      std::lock_guard lock(mu_);
      queued_write_bytes_ -= job.record.size();
    }
    if (job.record.capacity() > 0) GiveBuffer(std::move(job.record));
  }
}

void TieredStore::set_observer(TierObserver* observer) {
  for (const auto& tier : tiers_) tier->SetObserver(observer);
  std::lock_guard lock(observer_mu_);
  observer_ = observer;
}

void TieredStore::Flush() {
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return writes_.empty() && !writer_busy_; });
}

uint64_t TieredStore::StartLoad(std::vector<BlockKey> keys, std::vector<TokenId> tokens) {
  KV_CHECK_EQ(tokens.size(), keys.size() * static_cast<size_t>(kv_->layout().block_size));
  const uint64_t id = next_load_id_++;
  {
    std::lock_guard lock(mu_);
    loads_.push_back(LoadJob{id, std::move(keys), std::move(tokens)});
  }
  ++loads_in_flight_;
  read_cv_.notify_one();
  return id;
}

void TieredStore::TakeCompleted(std::vector<TierLoad>* out) {
  std::lock_guard lock(mu_);
  loads_in_flight_ -= static_cast<int>(completed_.size());
  num_completed_.fetch_sub(static_cast<int>(completed_.size()));
  for (TierLoad& l : completed_) out->push_back(std::move(l));
  completed_.clear();
}

void TieredStore::Recycle(std::vector<std::vector<uint8_t>>&& records) {
  const size_t cap = config_.read_buffer_bytes / BlockRecordBytes(kv_->layout());
  std::lock_guard lock(mu_);
  const size_t record = BlockRecordBytes(kv_->layout());
  for (auto& r : records) {
    if (read_buffers_.size() >= cap) break;
    if (r.capacity() >= record) read_buffers_.push_back(std::move(r));
  }
  records.clear();
}

void TieredStore::WaitForLoad(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  done_cv_.wait_for(lock, timeout, [&] { return !completed_.empty(); });
}

void TieredStore::ReaderLoop() {
  for (;;) {
    LoadJob job;
    {
      std::unique_lock lock(mu_);
      read_cv_.wait(lock, [&] { return stop_ || !loads_.empty(); });
      if (stop_) return;
      job = std::move(loads_.front());
      loads_.pop_front();
    }
    TierLoad done = RunLoad(job);
    {
      std::lock_guard lock(mu_);
      completed_.push_back(std::move(done));
      num_completed_.fetch_add(1);
    }
    done_cv_.notify_all();
    std::lock_guard lock(callback_mu_);
    if (on_load_done_) on_load_done_();
  }
}

void TieredStore::set_on_load_done(std::function<void()> fn) {
  std::lock_guard lock(callback_mu_);
  on_load_done_ = std::move(fn);
}

// NOTE (a load): block i is looked for in each tier in order; a tier that holds it returns the
// whole run of following blocks it holds (one pipelined round trip for Redis). Every record is
// verified before it counts; the first one that fails is deleted from its tier, counted as
// corrupt, and block i is looked for in the next tier. The load ends at the first block no tier
// can give, so what comes back is always a chain that extends the request's RAM hit.
TierLoad TieredStore::RunLoad(const LoadJob& job) {
  const KvLayout& layout = kv_->layout();
  const size_t bs = static_cast<size_t>(layout.block_size);
  const size_t n = job.keys.size();
  TierLoad out;
  out.id = job.id;
  std::vector<bool> asked(tiers_.size(), false);
  std::vector<std::vector<uint8_t>> values;
  {
    std::lock_guard lock(mu_);
    while (values.size() < n && !read_buffers_.empty()) {
      values.push_back(std::move(read_buffers_.back()));
      read_buffers_.pop_back();
    }
  }
  size_t i = 0;
  while (i < n) {
    bool progressed = false;
    for (size_t t = 0; t < tiers_.size() && !progressed; ++t) {
      KvTier& tier = *tiers_[t];
      if (!tier.MayContain(job.keys[i])) continue;
      if (!asked[t]) {
        asked[t] = true;
        tier.counters().query_blocks.fetch_add(static_cast<int64_t>(n - i));
      }
      const auto t0 = std::chrono::steady_clock::now();
      const std::span<const BlockKey> rest(job.keys.data() + i, n - i);
      const int got = tier.GetRun(rest, &values);
      int good = 0;
      for (; good < got; ++good) {
        const size_t b = i + static_cast<size_t>(good);
        const std::span<const TokenId> tokens(job.tokens.data() + b * bs, bs);
        auto payload =
            VerifyBlockRecord(values[static_cast<size_t>(good)], job.keys[b], tokens, layout);
        if (!payload.ok()) {
          KV_LOG(Warning, "kv {} tier: dropped block {}: {}", tier.name(), job.keys[b].Hex(),
                 payload.status().message());
          tier.counters().Error(TierError::kCorrupt);
          tier.Remove(job.keys[b]);
          break;
        }
      }
      if (got > 0) tier.counters().ObserveLoadSeconds(SecondsSince(t0));
      if (good == 0) continue;
      tier.counters().hit_blocks.fetch_add(good);
      {
        std::lock_guard lock(mu_);
        for (int k = 0; k < good; ++k) NoteHeld(static_cast<int>(t), job.keys[i + k]);
      }
      for (int k = 0; k < good; ++k) {
        out.records.push_back(std::move(values[static_cast<size_t>(k)]));
        out.tier.push_back(static_cast<int>(t));
      }
      values.erase(values.begin(), values.begin() + good);  // unused buffers first again
      i += static_cast<size_t>(good);
      progressed = true;
    }
    if (!progressed) break;
  }
  Recycle(std::move(values));  // the buffers this load did not use
  return out;
}

std::vector<TierStats> TieredStore::stats() const {
  std::vector<TierStats> s;
  for (const auto& t : tiers_) s.push_back(t->stats());
  return s;
}

}  // namespace kvserve
