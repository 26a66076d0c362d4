// DiskTier: the local disk tier of the KV cache. Block records (block_record.h) are files in a
// directory, bounded in bytes and evicted least recently used; an index in memory answers
// MayContain exactly. The directory survives restarts: Open rebuilds the index from the files'
// headers, so the first request after a restart already hits. The tier moves bytes only: the
// caller verifies each record it reads and calls Remove for a bad one.
//
// Layout: DIR/<first two hex digits of the key>/<64 hex digits of the key>.kvb; files being
// written live in DIR/tmp.
//
// Invariant: outside the mutex, the index holds exactly the files under their final names (as
// long as nothing else touches the directory): counters().entries and counters().bytes_held
// equal the index, and bytes held <= capacity after every Put.
//
// NOTE (atomic publish): a record is written to a new file in DIR/tmp (O_CREAT | O_EXCL, every
// byte, fsync, close) and only then renamed to its final name. rename(2) within one file system
// is atomic, and the data was made durable before it, so a reader (this process, or the next one
// after a crash or power loss) sees under a final name either no file or the whole record. A
// crash can leave only a file in DIR/tmp, which the next Open deletes. A file that is whole but
// wrong (a flipped bit, another layout) is caught by the header checks at rebuild and by the
// caller's verification of the whole record at load.
//
// NOTE (retention): Retain keeps a record until a deadline: eviction passes over retained
// records while unretained ones remain. The deadline is the file's modification time (set into
// the future), so it survives restarts with no format change: Rebuild reads a future mtime as a
// deadline, and the LRU order by mtime puts retained records last.
//
// NOTE (full disk): a write that fails for lack of space (ENOSPC, EDQUOT, or EFBIG from a file
// size limit) lowers the capacity to what the tier holds at that moment, so later writes evict
// the tier's own least recently used files instead of failing one after another. Every I/O
// failure is counted (TierError::kIo), returned, and logged once per kind, never per block.
//
// Thread safety: every method may be called from any thread, concurrently. The index is under a
// mutex. Reads of records and the writing of temporary files run outside it; publishing
// (rename), eviction and removal (unlink) run under it, so an eviction can never delete a file
// that a concurrent Put has just published, and the index and the files never disagree.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "prefix/kv_tier.h"

namespace kvserve {

struct DiskTierConfig {
  std::string dir;
  // 0 = default: 10% of the free space of dir's file system (statvfs), at most 64 GiB.
  uint64_t capacity_bytes = 0;
  // Open also reads each record's tokens and checks its key chain, and keeps what it found for
  // the first SetObserver (the KV event stream announces a restarted tier's records).
  bool keep_record_infos = false;
};

class DiskTier final : public KvTier {
 public:
  // Creates dir (and its parents) if needed, checks that it is a writable directory (creates and
  // removes a probe file), deletes temporary files of an earlier run and rebuilds the index from
  // the headers of the files there. An error naming the path and what to do when the directory
  // cannot be used.
  static Result<std::unique_ptr<DiskTier>> Open(const DiskTierConfig& config);

  struct RebuildStats {
    int64_t files = 0;    // records indexed (before eviction down to the capacity)
    int64_t dropped = 0;  // files deleted: unreadable, bad header, wrong name or size
    double seconds = 0;   // the whole rebuild
  };
  const RebuildStats& rebuild_stats() const { return rebuild_; }
  uint64_t capacity_bytes() const;
  const std::string& dir() const { return dir_; }

  std::string_view name() const override { return "disk"; }
  bool MayContain(const BlockKey& key) override;
  bool exact_contains() const override { return true; }
  int GetRun(std::span<const BlockKey> keys, std::vector<std::vector<uint8_t>>* values) override;
  Status Put(const BlockKey& key, std::span<const uint8_t> value) override;
  void Remove(const BlockKey& key) override;
  void Retain(const BlockKey& key, int64_t until_ms) override;
  std::string Describe() override;
  // Hands a new observer the records found by Open that are still held (with keep_record_infos),
  // then attaches it: both under the index lock, so no change falls between.
  void SetObserver(TierObserver* observer) override;
  int64_t num_retained();  // records whose deadline has not passed

 private:
  struct Entry {
    uint64_t bytes = 0;
    std::list<BlockKey>::iterator lru;  // position in lru_ (front = next to evict)
    int64_t retain_until = 0;           // ms since the epoch; 0 = not retained
  };
  // The kinds of failure that are logged once each.
  enum class LogKind { kFull, kDenied, kWrite, kRead, kRebuild };
  static constexpr int kNumLogKinds = 5;

  DiskTier(const DiskTierConfig& config, uint64_t capacity_bytes);
  void Rebuild();
  std::string PathOf(const BlockKey& key) const;
  std::string NewTempPath(const BlockKey& key);
  // Counts, logs and returns a failed step of Put; removes `tmp`.
  Status WriteFailed(const std::string& tmp, const char* step, int err);

  // REQUIRES: mu_ held (all of them).
  // Makes the entry the most recently used.
  void TouchLocked(Entry& entry);
  // Adds `key` as the most recently used entry, or makes an existing one so.
  void InsertLocked(const BlockKey& key, uint64_t bytes);
  // Unlinks least recently used files until bytes held <= capacity: unretained ones first, then
  // retained ones.
  void EvictLocked();
  // Sets the file's modification time to the entry's deadline.
  void StampLocked(const BlockKey& key, int64_t until_ms);
  // Both tell the observer of a change.
  void EraseLocked(const BlockKey& key);
  void PublishCountsLocked();

  void LogOnce(LogKind kind, const std::string& message);

  const std::string dir_;
  const bool keep_record_infos_;
  RebuildStats rebuild_;  // written by Open only
  std::vector<TierRecordInfo> rebuilt_infos_;  // guarded by mu_; until the first SetObserver
  mutable std::mutex mu_;
  uint64_t capacity_bytes_;                    // guarded by mu_
  uint64_t bytes_held_ = 0;                    // guarded by mu_
  std::unordered_map<BlockKey, Entry> index_;  // guarded by mu_
  std::list<BlockKey> lru_;                    // guarded by mu_; least recently used first
  std::atomic<uint64_t> next_tmp_{0};
  std::array<std::atomic<bool>, kNumLogKinds> logged_{};
};

}  // namespace kvserve
