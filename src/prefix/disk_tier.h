// DiskTier: the local disk tier of the KV cache. Block records (block_record.h) are files in a
// directory, bounded in bytes and evicted least recently used; an index in memory answers
// MayContain exactly. The directory survives restarts: Open rebuilds the index from the files'
// headers, so the first request after a restart already hits.
//
// Layout: DIR/<first two hex digits of the key>/<64 hex digits>.kvb; temporary files in DIR/tmp.
//
// NOTE (atomic publish): a record is written to a new file in DIR/tmp, fsync'ed, and renamed to
// its final name. rename(2) is atomic within a file system, so a reader (this process or the
// next one) sees either no file or the whole fsync'ed one; a crash leaves at most a file in
// DIR/tmp, which the next Open deletes. A file that is whole but wrong (a flipped bit, another
// layout) is caught by the checks of the header at rebuild and of the whole record at load.
//
// NOTE (full disk): a write that fails for lack of space (ENOSPC, EDQUOT, EFBIG) lowers the
// capacity to what the tier holds now, so later writes evict the tier's own oldest files
// instead of failing; any I/O error is counted (kIo) and logged once per kind.
//
// Thread safety: every method may be called from any thread. The index is under a mutex; reads
// and the writing of temporary files run outside it, while publishing (rename), eviction and
// removal (unlink) run under it, so the index and the files never disagree.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "prefix/kv_tier.h"

namespace kvserve {

struct DiskTierConfig {
  std::string dir;
  uint64_t capacity_bytes = 0;  // 0 = 10% of the free space of dir's file system, at most 64 GiB
};

class DiskTier final : public KvTier {
 public:
  // Creates dir if needed, checks that it is a writable directory, deletes temporary files of an
  // earlier run and rebuilds the index from the headers of the files there. An error naming the
  // path and what to do when the directory cannot be used.
  static Result<std::unique_ptr<DiskTier>> Open(const DiskTierConfig& config);

  struct RebuildStats {
    int64_t files = 0;    // records indexed
    int64_t dropped = 0;  // files deleted: bad header, wrong name or size
    double seconds = 0;
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
  std::string Describe() override;

 private:
  struct Entry {
    uint64_t bytes = 0;
    std::list<BlockKey>::iterator lru;  // position in lru_ (front = next to evict)
  };
  explicit DiskTier(const DiskTierConfig& config);
  Status Rebuild();
  std::string PathOf(const BlockKey& key) const;
  // REQUIRES: mu_ held. Adds or refreshes an entry, then evicts (unlinks) least recently used
  // files until the tier is within capacity.
  void InsertLocked(const BlockKey& key, uint64_t bytes);
  void EraseLocked(const BlockKey& key);
  void PublishCounts();  // REQUIRES: mu_ held
  void LogOnce(std::atomic<bool>& flag, const std::string& message);

  const std::string dir_;
  RebuildStats rebuild_;
  mutable std::mutex mu_;
  uint64_t capacity_bytes_;
  uint64_t bytes_held_ = 0;
  std::unordered_map<BlockKey, Entry> index_;
  std::list<BlockKey> lru_;
  std::atomic<uint64_t> next_tmp_{0};
  std::atomic<bool> logged_write_{false}, logged_full_{false}, logged_read_{false};
};

}  // namespace kvserve
