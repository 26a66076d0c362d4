// TieredStore: the lower tiers of the KV cache (disk, Redis) as the engine sees them. It owns the
// tiers and two I/O threads, so that no tier I/O ever runs on the engine thread:
//   - the writer thread stores block records (write-through: as blocks join the RAM tree;
//     write-back: as RAM evicts them). The engine thread only copies the block's bytes into a
//     record buffer and queues it; the queue is bounded in bytes, and a write that does not fit
//     is dropped and counted (`dropped_writes`), never waited for.
//   - the reader thread serves loads: given the chained keys of the blocks that follow a
//     request's RAM hit, it fetches the leading run that the tiers hold (disk first, then
//     Redis, block by block, stopping at the first block no tier holds), verifies each record
//     (block_record.h) and hands the verified records back. A record that fails verification is
//     counted as corrupt, deleted from its tier, and looked for in the next tier.
// The engine copies verified payloads into RAM blocks it allocates itself (TakeCompleted), so
// the I/O threads never touch KvStorage.
//
// With an observer (set_observer; the KV event stream), the store tells it of each write it
// queues (engine thread) and finishes (writer thread), and each tier tells it what it stores
// and drops (tier_observer.h).
//
// Thread safety: OnBlockInserted/OnBlockEvicted/StartLoad/TakeCompleted/set_observer are called
// by the engine thread; stats(), has_completed() and Flush() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "kv/kv_storage.h"
#include "prefix/block_listener.h"
#include "prefix/kv_tier.h"
#include "prefix/tier_observer.h"

namespace kvserve {

enum class TierWritePolicy { kWriteThrough, kWriteBack };
// "write-through" or "write-back"; InvalidArgument naming the choices otherwise.
Result<TierWritePolicy> ParseTierWritePolicy(std::string_view name);

struct TieredStoreConfig {
  TierWritePolicy write_policy = TierWritePolicy::kWriteThrough;
  uint64_t max_queued_write_bytes = 256ull << 20;  // records waiting for the writer thread
  // Record buffers for loads, allocated and touched at start and recycled: a fresh buffer's
  // page faults cost more than reading a record from the page cache (about 30x on a VM).
  uint64_t read_buffer_bytes = 64ull << 20;
};

// One finished load: the verified records of the leading blocks the tiers held.
struct TierLoad {
  uint64_t id = 0;
  std::vector<std::vector<uint8_t>> records;  // [num_blocks] verified block records
  std::vector<int> tier;                      // [num_blocks] index into tiers() it came from
  int num_blocks() const { return static_cast<int>(tier.size()); }
};

class TieredStore final : public BlockListener {
 public:
  // REQUIRES: kv outlives the store; tiers non-empty, in lookup order (fastest first).
  TieredStore(std::vector<std::unique_ptr<KvTier>> tiers, const TieredStoreConfig& config,
              const KvStorage* kv);
  ~TieredStore() override;  // finishes the queued writes, then joins the threads
  TieredStore(const TieredStore&) = delete;
  TieredStore& operator=(const TieredStore&) = delete;

  // BlockListener (engine thread): queue the block for the tiers that may lack it.
  void OnBlockInserted(const TreeBlock& b) override;
  void OnBlockEvicted(const TreeBlock& b) override;
  // Stores the block where a tier lacks it, and has every tier keep it until until_ms.
  void OnBlockRetained(const TreeBlock& b, int64_t until_ms) override;

  // Whether any tier may hold `key` (cheap; no I/O).
  bool MayContain(const BlockKey& key);
  // Starts loading the leading run of `keys`; `tokens` are their block_size tokens each,
  // concatenated (what the records must hold). Returns the load's id.
  uint64_t StartLoad(std::vector<BlockKey> keys, std::vector<TokenId> tokens);
  // Moves the finished loads into *out (appends).
  void TakeCompleted(std::vector<TierLoad>* out);
  // Gives a finished load's record buffers back for reuse (after the engine copied them).
  void Recycle(std::vector<std::vector<uint8_t>>&& records);
  bool has_completed() const { return num_completed_.load() > 0; }
  int num_loads_in_flight() const { return loads_in_flight_; }  // engine thread
  // Called on the reader thread after each finished load (wakes the engine thread). Once
  // set_on_load_done returns, the previous function is not running and will not run again.
  void set_on_load_done(std::function<void()> fn);
  // Blocks until a finished load is waiting to be taken, or `timeout` passes (tests).
  void WaitForLoad(std::chrono::milliseconds timeout);
  // Blocks until the write queue is empty and the writer idle (tests, shutdown).
  void Flush();
  // Attaches the observer of the tiers' contents (every tier's SetObserver, in order), or
  // detaches it (null). Once it returns, no call to the previous observer runs or will run.
  void set_observer(TierObserver* observer);

  const std::vector<std::unique_ptr<KvTier>>& tiers() const { return tiers_; }
  std::vector<TierStats> stats() const;
  const KvLayout& layout() const { return kv_->layout(); }

 private:
  struct WriteJob {
    BlockKey key;
    std::vector<uint8_t> record;  // unsealed; the writer seals it
    uint32_t tier_mask = 0;       // bit i: store in tiers_[i]
    int64_t retain_until = 0;     // then Retain in every tier (0 = no)
    bool observed = false;        // the observer was told of it (OnTierWriteQueued)
  };
  struct LoadJob {
    uint64_t id;
    std::vector<BlockKey> keys;
    std::vector<TokenId> tokens;
  };
  void Enqueue(const TreeBlock& b, int64_t retain_until = 0);
  // Tiers (bits) that may lack `key`.
  uint32_t TiersLacking(const BlockKey& key);
  void NoteHeld(int tier, const BlockKey& key);
  void WriterLoop();
  void ReaderLoop();
  TierLoad RunLoad(const LoadJob& job);
  std::vector<uint8_t> TakeBuffer();
  void GiveBuffer(std::vector<uint8_t> buffer);

  std::vector<std::unique_ptr<KvTier>> tiers_;
  const TieredStoreConfig config_;
  const KvStorage* kv_;
  std::mutex callback_mu_;  // guards on_load_done_ and its calls
  std::function<void()> on_load_done_;
  // Written by the engine thread under observer_mu_; read there without it (Enqueue) and by
  // the writer thread under it (OnTierWriteDone).
  std::mutex observer_mu_;
  TierObserver* observer_ = nullptr;

  std::mutex mu_;  // guards everything below up to the threads
  std::condition_variable write_cv_, read_cv_, done_cv_;
  std::deque<WriteJob> writes_;
  uint64_t queued_write_bytes_ = 0;
  bool writer_busy_ = false;
  std::deque<LoadJob> loads_;
  std::vector<TierLoad> completed_;
  std::vector<std::vector<uint8_t>> buffers_;       // recycled record buffers (writes)
  std::vector<std::vector<uint8_t>> read_buffers_;  // recycled record buffers (loads)
  // Keys recently stored in or loaded from tiers that cannot answer MayContain exactly
  // (a bounded FIFO per tier), so blocks loaded from Redis are not written back to it.
  std::vector<std::unordered_set<BlockKey>> held_;
  std::vector<std::deque<BlockKey>> held_order_;
  bool stop_ = false;

  std::atomic<int> num_completed_{0};
  int loads_in_flight_ = 0;  // engine thread
  uint64_t next_load_id_ = 1;
  std::thread writer_, reader_;
};

}  // namespace kvserve
