#include "prefix/disk_tier.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <tuple>
#include <vector>

#include "prefix/block_record.h"
#include "util/byte_size.h"
#include "util/log.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxDefaultCapacityBytes = uint64_t{64} << 30;
constexpr std::string_view kSuffix = ".kvb";
constexpr size_t kKeyHexDigits = 64;

std::string ErrnoText(int err) { return std::generic_category().message(err); }

// No space left for the file: the disk, a quota, or a file size limit.
bool IsFullError(int err) { return err == ENOSPC || err == EDQUOT || err == EFBIG; }
bool IsDeniedError(int err) { return err == EACCES || err == EPERM || err == EROFS; }

bool IsLowerHexDigit(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// Writes all of `data` to `fd`, through short writes and EINTR. 0 or an errno value.
int WriteAll(int fd, std::span<const uint8_t> data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

// Reads exactly out.size() bytes of `fd` from `offset`, through short reads and EINTR. 0 or an
// errno value (EIO for an early end of file: the file shrank under us).
int ReadExactly(int fd, std::span<uint8_t> out, size_t offset = 0) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

// Reads the whole file at `path` into *out (resized; its capacity is reused). 0 or an errno.
int ReadWholeFile(const std::string& path, std::vector<uint8_t>* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  struct stat st {};
  int err = ::fstat(fd, &st) == 0 ? 0 : errno;
  if (err == 0) {
    out->resize(static_cast<size_t>(st.st_size));
    err = ReadExactly(fd, *out);
  }
  ::close(fd);
  return err;
}

// The entries of `dir`; none when it cannot be listed. Never throws.
std::vector<fs::directory_entry> ListDirectory(const fs::path& dir) {
  std::vector<fs::directory_entry> entries;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    entries.push_back(*it);
  }
  return entries;
}

// Makes `dir` usable by the tier: created (with its parents) if needed, a directory, writable
// (a probe file is created and removed), with an empty DIR/tmp (files of an earlier run that a
// crash interrupted are deleted).
Status PrepareDirectory(const fs::path& dir) {
  const auto unusable = [&](const std::string& why) {
    return FailedPrecondition(
        fmt::format("cannot use {} for the KV disk tier: {}; pass --kv-disk-path a writable "
                    "directory, or leave the flag out to run without a disk tier",
                    dir.string(), why));
  };
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    return unusable("it exists and is not a directory");
  }
  fs::create_directories(dir, ec);
  if (ec) return unusable(fmt::format("cannot create it ({})", ec.message()));
  const fs::path tmp = dir / "tmp";
  fs::create_directory(tmp, ec);
  if (ec || !fs::is_directory(tmp, ec)) {
    return unusable(fmt::format("cannot create the directory {}", tmp.string()));
  }
  for (const fs::directory_entry& e : ListDirectory(tmp)) fs::remove_all(e.path(), ec);
  const std::string probe = (tmp / ".probe").string();
  const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return unusable(fmt::format("cannot create a file in it ({})", ErrnoText(errno)));
  ::close(fd);
  if (::unlink(probe.c_str()) != 0) {
    return unusable(fmt::format("cannot remove a file in it ({})", ErrnoText(errno)));
  }
  return Status::Ok();
}

// 10% of the free space of dir's file system, at most kMaxDefaultCapacityBytes.
Result<uint64_t> DefaultCapacityBytes(const fs::path& dir) {
  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) {
    return IoError(fmt::format("cannot read the free space of {} ({}); pass --kv-disk-size",
                               dir.string(), ErrnoText(errno)));
  }
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  return std::min(kMaxDefaultCapacityBytes, free_bytes / 10);
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// What the rebuild learns of one good record file.
struct FoundRecord {
  BlockKey key;
  uint64_t bytes = 0;
  timespec mtime{};
  TierRecordInfo info;  // with tokens only when they were asked for
};

// Reads the token ids that follow a record's header `h` into info->tokens and checks the key
// chain.
Status ReadRecordTokens(int fd, const BlockRecordHeader& h, TierRecordInfo* info) {
  std::vector<uint8_t> bytes(static_cast<size_t>(h.layout.block_size) * sizeof(int32_t));
  if (const int err = ReadExactly(fd, bytes, kRecordHeaderBytes); err != 0) {
    return IoError(fmt::format("read: {}", ErrnoText(err)));
  }
  KV_ASSIGN_OR_RETURN(info->tokens, ParseBlockRecordTokens(h, bytes));
  return Status::Ok();
}

// Checks the file `path`, named after `key`, by its header alone: the header must parse and hold
// `key`, and the file must have the size of a record of the header's layout. With `tokens`, also
// reads the block's token ids and checks that the key chains from the parent key over them.
// DataLoss when it does not, NotFound when it is gone, IoError when it cannot be read.
Status CheckRecordFile(const std::string& path, const BlockKey& key, bool tokens,
                       FoundRecord* found) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return err == ENOENT ? NotFound(path) : IoError(fmt::format("open: {}", ErrnoText(err)));
  }
  struct stat st {};
  std::array<uint8_t, kRecordHeaderBytes> header{};
  int err = ::fstat(fd, &st) == 0 ? 0 : errno;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (err == 0 && size >= header.size()) err = ReadExactly(fd, header);
  Status result = Status::Ok();
  if (err != 0) {
    result = IoError(fmt::format("read: {}", ErrnoText(err)));
  } else if (size < header.size()) {
    result = DataLoss(fmt::format("{} bytes: no whole header", size));
  } else if (auto h = ParseBlockRecordHeader(header); !h.ok()) {
    result = h.status();
  } else if (!(h->key == key)) {
    result = DataLoss("its header holds another key than its name");
  } else if (size != BlockRecordBytes(h->layout)) {
    result = DataLoss(fmt::format("{} bytes where a record of its layout has {}", size,
                                  BlockRecordBytes(h->layout)));
  } else {
    *found = FoundRecord{key, size, st.st_mtim, {key, h->parent_key, h->root_key, {}}};
    if (tokens) result = ReadRecordTokens(fd, *h, &found->info);
  }
  ::close(fd);
  return result;
}

}  // namespace

DiskTier::DiskTier(const DiskTierConfig& config, uint64_t capacity_bytes)
    : dir_(config.dir),
      keep_record_infos_(config.keep_record_infos),
      capacity_bytes_(capacity_bytes) {}

Result<std::unique_ptr<DiskTier>> DiskTier::Open(const DiskTierConfig& config) {
  if (config.dir.empty()) {
    return InvalidArgument("the KV disk tier needs a directory: pass --kv-disk-path");
  }
  KV_RETURN_IF_ERROR(PrepareDirectory(config.dir));
  uint64_t capacity_bytes = config.capacity_bytes;
  if (capacity_bytes == 0) {
    KV_ASSIGN_OR_RETURN(capacity_bytes, DefaultCapacityBytes(config.dir));
  }
  std::unique_ptr<DiskTier> tier(new DiskTier(config, capacity_bytes));
  tier->Rebuild();
  return tier;
}

std::string DiskTier::PathOf(const BlockKey& key) const {
  const std::string hex = key.Hex();
  return fmt::format("{}/{}/{}{}", dir_, std::string_view(hex).substr(0, 2), hex, kSuffix);
}

std::string DiskTier::NewTempPath(const BlockKey& key) {
  return fmt::format("{}/tmp/{}.{}.{}.tmp", dir_, key.Hex(), ::getpid(), next_tmp_.fetch_add(1));
}

// NOTE (rebuild): headers only. Each record file's first kRecordHeaderBytes bytes are read and
// checked against its name and its size; the rest is checked by the caller when a request loads
// it. A file that fails is deleted (it could never be served). The LRU order is the files'
// modification times, oldest first: a read changes nothing on disk, so after a restart the order
// is that of writing. Then the oldest files are evicted down to the capacity (which may be lower
// than in the previous run).
void DiskTier::Rebuild() {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<FoundRecord> found;
  for (const fs::directory_entry& sub : ListDirectory(dir_)) {
    const std::string sub_name = sub.path().filename().string();
    std::error_code ec;
    if (sub_name.size() != 2 || !IsLowerHexDigit(sub_name[0]) || !IsLowerHexDigit(sub_name[1]) ||
        !sub.is_directory(ec)) {
      continue;
    }
    for (const fs::directory_entry& e : ListDirectory(sub.path())) {
      const std::string file_name = e.path().filename().string();
      BlockKey key;
      if (file_name.size() != kKeyHexDigits + kSuffix.size() || !file_name.ends_with(kSuffix) ||
          !Digest256::FromHex(std::string_view(file_name).substr(0, kKeyHexDigits), &key)) {
        continue;  // not named as a record: not ours
      }
      const std::string path = e.path().string();
      const std::string hex = key.Hex();  // lowercase, as PathOf names files
      const bool in_place = file_name.starts_with(hex) && sub_name == hex.substr(0, 2);
      FoundRecord record;
      const Status st = in_place ? CheckRecordFile(path, key, keep_record_infos_, &record)
                                 : DataLoss("a record file out of its place");
      if (st.ok()) {
        found.push_back(record);
        continue;
      }
      if (st.code() == StatusCode::kNotFound) continue;  // deleted while we listed
      ::unlink(path.c_str());
      ++rebuild_.dropped;
      counters_.Error(st.code() == StatusCode::kIoError ? TierError::kIo : TierError::kCorrupt);
      LogOnce(LogKind::kRebuild, fmt::format("kv disk tier {}: deleted {}: {} (further bad files "
                                             "are counted, not logged)",
                                             dir_, path, st.message()));
    }
  }
  std::sort(found.begin(), found.end(), [](const FoundRecord& a, const FoundRecord& b) {
    return std::tie(a.mtime.tv_sec, a.mtime.tv_nsec, a.key.bytes) <
           std::tie(b.mtime.tv_sec, b.mtime.tv_nsec, b.key.bytes);
  });
  {
    std::lock_guard lock(mu_);
    const int64_t now = NowMs();
    for (const FoundRecord& f : found) {
      InsertLocked(f.key, f.bytes);
      const int64_t mtime_ms =
          static_cast<int64_t>(f.mtime.tv_sec) * 1000 + f.mtime.tv_nsec / 1000000;
      if (mtime_ms > now) index_.at(f.key).retain_until = mtime_ms;  // a deadline (Retain)
    }
    EvictLocked();
    PublishCountsLocked();
    if (keep_record_infos_) {  // the records still held, oldest first
      for (FoundRecord& f : found) {
        if (index_.contains(f.key)) rebuilt_infos_.push_back(std::move(f.info));
      }
    }
  }
  rebuild_.files = static_cast<int64_t>(found.size());
  rebuild_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void DiskTier::TouchLocked(Entry& entry) { lru_.splice(lru_.end(), lru_, entry.lru); }

void DiskTier::InsertLocked(const BlockKey& key, uint64_t bytes) {
  auto [it, inserted] = index_.try_emplace(key);
  if (inserted) {
    it->second.lru = lru_.insert(lru_.end(), key);
    NotifyStored(key);
  } else {  // its file was replaced by an equal one: only the size is taken again
    TouchLocked(it->second);
    bytes_held_ -= it->second.bytes;
  }
  it->second.bytes = bytes;
  bytes_held_ += bytes;
}

void DiskTier::EvictLocked() {
  if (bytes_held_ <= capacity_bytes_) return;
  const int64_t now = NowMs();
  for (auto it = lru_.begin(); bytes_held_ > capacity_bytes_ && it != lru_.end();) {
    const BlockKey victim = *it++;
    if (index_.at(victim).retain_until > now) continue;
    ::unlink(PathOf(victim).c_str());
    EraseLocked(victim);
  }
  while (bytes_held_ > capacity_bytes_ && !lru_.empty()) {
    const BlockKey victim = lru_.front();
    ::unlink(PathOf(victim).c_str());
    EraseLocked(victim);
  }
}

void DiskTier::StampLocked(const BlockKey& key, int64_t until_ms) {
  timespec times[2];
  times[0].tv_sec = 0;
  times[0].tv_nsec = UTIME_OMIT;  // access time
  times[1].tv_sec = static_cast<time_t>(until_ms / 1000);
  times[1].tv_nsec = static_cast<long>(until_ms % 1000) * 1000000;
  ::utimensat(AT_FDCWD, PathOf(key).c_str(), times, 0);  // best effort: RAM knows the deadline
}

void DiskTier::Retain(const BlockKey& key, int64_t until_ms) {
  std::lock_guard lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end() || until_ms <= it->second.retain_until) return;
  it->second.retain_until = until_ms;
  StampLocked(key, until_ms);
}

int64_t DiskTier::num_retained() {
  const int64_t now = NowMs();
  std::lock_guard lock(mu_);
  int64_t n = 0;
  for (const auto& [key, e] : index_) n += e.retain_until > now;
  return n;
}

void DiskTier::EraseLocked(const BlockKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  bytes_held_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
  NotifyRemoved(key);
}

void DiskTier::SetObserver(TierObserver* observer) {
  std::lock_guard lock(mu_);
  if (observer && !rebuilt_infos_.empty()) {
    std::erase_if(rebuilt_infos_, [&](const TierRecordInfo& r) { return !index_.contains(r.key); });
    observer->OnTierSnapshot(name(), std::move(rebuilt_infos_));
  }
  rebuilt_infos_ = {};
  KvTier::SetObserver(observer);
}

void DiskTier::PublishCountsLocked() {
  counters_.entries.store(static_cast<int64_t>(index_.size()));
  counters_.bytes_held.store(static_cast<int64_t>(bytes_held_));
}

void DiskTier::LogOnce(LogKind kind, const std::string& message) {
  if (logged_[static_cast<size_t>(kind)].exchange(true)) return;
  if (kind == LogKind::kRebuild) {
    KV_LOG(Warning, "{}", message);
  } else {
    KV_LOG(Error, "{}", message);
  }
}

uint64_t DiskTier::capacity_bytes() const {
  std::lock_guard lock(mu_);
  return capacity_bytes_;
}

bool DiskTier::MayContain(const BlockKey& key) {
  std::lock_guard lock(mu_);
  return index_.contains(key);
}

int DiskTier::GetRun(std::span<const BlockKey> keys, std::vector<std::vector<uint8_t>>* values) {
  int got = 0;
  for (const BlockKey& key : keys) {
    {
      std::lock_guard lock(mu_);
      auto it = index_.find(key);
      if (it == index_.end()) break;
      TouchLocked(it->second);  // a read is a use
    }
    if (values->size() <= static_cast<size_t>(got)) values->resize(static_cast<size_t>(got) + 1);
    std::vector<uint8_t>& value = (*values)[static_cast<size_t>(got)];
    const std::string path = PathOf(key);
    const int err = ReadWholeFile(path, &value);
    if (err == ENOENT) {
      // Deleted behind the tier's back: forget it, unless a concurrent Put has published it
      // again since (publishing holds the lock, so this check is exact).
      std::lock_guard lock(mu_);
      if (::access(path.c_str(), F_OK) != 0 && errno == ENOENT) {
        EraseLocked(key);
        PublishCountsLocked();
      }
      break;
    }
    if (err != 0) {
      counters_.Error(TierError::kIo);
      LogOnce(LogKind::kRead, fmt::format("kv disk tier {}: cannot read {}: {} (further read "
                                          "failures are counted, not logged)",
                                          dir_, path, ErrnoText(err)));
      break;
    }
    counters_.blocks_read.fetch_add(1);
    counters_.bytes_read.fetch_add(static_cast<int64_t>(value.size()));
    ++got;
  }
  return got;
}

Status DiskTier::Put(const BlockKey& key, std::span<const uint8_t> value) {
  {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      TouchLocked(it->second);  // equal keys hold equal bytes (block_key.h)
      return Status::Ok();
    }
  }
  const std::string tmp = NewTempPath(key);
  const int fd = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return WriteFailed(tmp, "create", errno);
  const char* step = "write";
  int err = WriteAll(fd, value);
  if (err == 0 && ::fsync(fd) != 0) {
    err = errno;
    step = "fsync";
  }
  if (::close(fd) != 0 && err == 0) {
    err = errno;
    step = "close";
  }
  if (err != 0) return WriteFailed(tmp, step, err);
  const std::string path = PathOf(key);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);  // a failure shows at rename
  {
    // Publish and index under one lock: an eviction or a Remove cannot unlink the file between
    // the two, and a reader that finds the file gone can tell (see GetRun).
    std::lock_guard lock(mu_);
    if (::rename(tmp.c_str(), path.c_str()) == 0) {
      InsertLocked(key, value.size());
      EvictLocked();
      PublishCountsLocked();
    } else {
      err = errno;
    }
  }
  if (err != 0) return WriteFailed(tmp, "rename", err);
  counters_.blocks_written.fetch_add(1);
  counters_.bytes_written.fetch_add(static_cast<int64_t>(value.size()));
  return Status::Ok();
}

Status DiskTier::WriteFailed(const std::string& tmp, const char* step, int err) {
  ::unlink(tmp.c_str());
  counters_.Error(TierError::kIo);
  const std::string what =
      fmt::format("kv disk tier {}: {} of a block file failed: {}", dir_, step, ErrnoText(err));
  if (IsFullError(err)) {
    uint64_t held_bytes = 0;
    {
      std::lock_guard lock(mu_);
      capacity_bytes_ = std::min(capacity_bytes_, bytes_held_);
      held_bytes = bytes_held_;
    }
    LogOnce(LogKind::kFull, fmt::format("{}; capacity lowered to the {} the tier holds: it evicts "
                                        "its oldest files from now on",
                                        what, FormatByteSize(held_bytes)));
  } else {
    LogOnce(IsDeniedError(err) ? LogKind::kDenied : LogKind::kWrite,
            fmt::format("{} (further failures of this kind are counted, not logged)", what));
  }
  return IoError(what);
}

void DiskTier::Remove(const BlockKey& key) {
  const std::string path = PathOf(key);
  std::lock_guard lock(mu_);
  ::unlink(path.c_str());
  EraseLocked(key);
  PublishCountsLocked();
}

std::string DiskTier::Describe() {
  std::lock_guard lock(mu_);
  return fmt::format("disk tier {}: {} blocks, {} of {} (index rebuilt in {:.0f} ms{})", dir_,
                     index_.size(), FormatByteSize(bytes_held_), FormatByteSize(capacity_bytes_),
                     rebuild_.seconds * 1e3,
                     rebuild_.dropped > 0 ? fmt::format(", {} bad files deleted", rebuild_.dropped)
                                          : std::string());
}

}  // namespace kvserve
