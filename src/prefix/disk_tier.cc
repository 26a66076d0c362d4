#include "prefix/disk_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "prefix/block_record.h"
#include "util/byte_size.h"
#include "util/log.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxDefaultCapacity = 64ull << 30;
constexpr const char* kSuffix = ".kvb";

std::string ErrnoText(int err) { return std::strerror(err); }

bool IsFullError(int err) { return err == ENOSPC || err == EDQUOT || err == EFBIG; }

// Writes all of `data` to fd; errno is set on failure.
bool WriteAll(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) {
      errno = EIO;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Reads the whole file into *out; false with errno set on failure.
bool ReadFile(const std::string& path, std::vector<uint8_t>* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return false;
  }
  out->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out->size()) {
    const ssize_t n = ::pread(fd, out->data() + done, out->size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      errno = err;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return true;
}

}  // namespace

DiskTier::DiskTier(const DiskTierConfig& config)
    : dir_(config.dir), capacity_bytes_(config.capacity_bytes) {}

Result<std::unique_ptr<DiskTier>> DiskTier::Open(const DiskTierConfig& config) {
  if (config.dir.empty()) return InvalidArgument("the disk tier needs a directory");
  std::error_code ec;
  fs::create_directories(config.dir, ec);
  if (!fs::is_directory(config.dir, ec)) {
    return IoError(fmt::format("cannot use {} as the KV disk tier: not a directory{}; pass "
                               "--kv-disk-path a writable directory",
                               config.dir, ec ? " (" + ec.message() + ")" : ""));
  }
  fs::create_directories(fs::path(config.dir) / "tmp", ec);
  const std::string probe = (fs::path(config.dir) / "tmp" / ".probe").string();
  const int fd = ::open(probe.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) {
    return IoError(fmt::format("cannot write in {} (the KV disk tier): {}; pass --kv-disk-path a "
                               "writable directory",
                               config.dir, ErrnoText(errno)));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  std::unique_ptr<DiskTier> tier(new DiskTier(config));
  if (tier->capacity_bytes_ == 0) {
    struct statvfs vfs {};
    uint64_t free_bytes = 0;
    if (::statvfs(config.dir.c_str(), &vfs) == 0) {
      free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    }
    tier->capacity_bytes_ = std::min(kMaxDefaultCapacity, free_bytes / 10);
  }
  KV_RETURN_IF_ERROR(tier->Rebuild());
  return tier;
}

std::string DiskTier::PathOf(const BlockKey& key) const {
  const std::string hex = key.Hex();
  return fmt::format("{}/{}/{}{}", dir_, hex.substr(0, 2), hex, kSuffix);
}

// NOTE (rebuild): headers only: each file's first kRecordHeaderBytes are read and checked
// against its name and size; the payload is checked when a request loads it. The LRU order is
// the files' modification times (a load touches nothing on disk, so after a restart the order
// is that of writing).
Status DiskTier::Rebuild() {
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(dir_) / "tmp", ec)) {
    fs::remove(e.path(), ec);  // a write that a crash interrupted
  }
  struct Found {
    BlockKey key;
    uint64_t bytes;
    fs::file_time_type mtime;
  };
  std::vector<Found> found;
  std::vector<uint8_t> header(kRecordHeaderBytes);
  for (const auto& sub : fs::directory_iterator(dir_, ec)) {
    const std::string subname = sub.path().filename().string();
    if (!sub.is_directory() || subname.size() != 2) continue;
    for (const auto& e : fs::directory_iterator(sub.path(), ec)) {
      const fs::path& p = e.path();
      if (p.extension() != kSuffix) continue;
      BlockKey key;
      bool ok = Digest256::FromHex(p.stem().string(), &key) && p.stem().string().substr(0, 2) == subname;
      uint64_t size = 0;
      if (ok) {
        const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
        struct stat st {};
        ok = fd >= 0 && ::fstat(fd, &st) == 0 &&
             ::pread(fd, header.data(), header.size(), 0) == static_cast<ssize_t>(header.size());
        if (fd >= 0) ::close(fd);
        size = static_cast<uint64_t>(st.st_size);
        if (ok) {
          auto h = ParseBlockRecordHeader(header);
          ok = h.ok() && h->key == key && size == BlockRecordBytes(h->layout);
        }
      }
      if (!ok) {
        fs::remove(p, ec);
        ++rebuild_.dropped;
        counters_.Error(TierError::kCorrupt);
        continue;
      }
      found.push_back(Found{key, size, e.last_write_time(ec)});
    }
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  {
    std::lock_guard lock(mu_);
    for (const Found& f : found) InsertLocked(f.key, f.bytes);
    rebuild_.files = static_cast<int64_t>(index_.size());
    PublishCounts();
  }
  rebuild_.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return Status::Ok();
}

void DiskTier::InsertLocked(const BlockKey& key, uint64_t bytes) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    lru_.splice(lru_.end(), lru_, it->second.lru);
  } else {
    lru_.push_back(key);
    index_.emplace(key, Entry{bytes, std::prev(lru_.end())});
    bytes_held_ += bytes;
  }
  while (bytes_held_ > capacity_bytes_ && !lru_.empty()) {
    const BlockKey victim = lru_.front();
    ::unlink(PathOf(victim).c_str());
    EraseLocked(victim);
  }
}

void DiskTier::EraseLocked(const BlockKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  bytes_held_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  index_.erase(it);
}

void DiskTier::PublishCounts() {
  counters_.entries.store(static_cast<int64_t>(index_.size()));
  counters_.bytes_held.store(static_cast<int64_t>(bytes_held_));
}

void DiskTier::LogOnce(std::atomic<bool>& flag, const std::string& message) {
  if (!flag.exchange(true)) KV_LOG(Error, "{}", message);
}

uint64_t DiskTier::capacity_bytes() const {
  std::lock_guard lock(mu_);
  return capacity_bytes_;
}

bool DiskTier::MayContain(const BlockKey& key) {
  std::lock_guard lock(mu_);
  return index_.count(key) != 0;
}

int DiskTier::GetRun(std::span<const BlockKey> keys, std::vector<std::vector<uint8_t>>* values) {
  if (values->size() < keys.size()) values->resize(keys.size());
  int got = 0;
  for (const BlockKey& key : keys) {
    {
      std::lock_guard lock(mu_);
      auto it = index_.find(key);
      if (it == index_.end()) break;
      lru_.splice(lru_.end(), lru_, it->second.lru);  // a use
    }
    std::vector<uint8_t>& v = (*values)[static_cast<size_t>(got)];
    if (!ReadFile(PathOf(key), &v)) {
      const int err = errno;
      if (err != ENOENT) {
        counters_.Error(TierError::kIo);
        LogOnce(logged_read_, fmt::format("kv disk tier: cannot read {}: {}", PathOf(key),
                                          ErrnoText(err)));
      }
      std::lock_guard lock(mu_);  // gone behind our back, or unreadable: forget it
      EraseLocked(key);
      PublishCounts();
      break;
    }
    counters_.blocks_read.fetch_add(1);
    counters_.bytes_read.fetch_add(static_cast<int64_t>(v.size()));
    ++got;
  }
  return got;
}

Status DiskTier::Put(const BlockKey& key, std::span<const uint8_t> value) {
  {
    std::lock_guard lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.end(), lru_, it->second.lru);
      return Status::Ok();
    }
  }
  const std::string final_path = PathOf(key);
  const std::string tmp = fmt::format("{}/tmp/{}.{}.{}", dir_, key.Hex(), ::getpid(),
                                      next_tmp_.fetch_add(1));
  const auto fail = [&](const char* what, int err) {
    ::unlink(tmp.c_str());
    counters_.Error(TierError::kIo);
    if (IsFullError(err)) {
      std::lock_guard lock(mu_);
      capacity_bytes_ = bytes_held_;  // evict our own oldest files from now on
      LogOnce(logged_full_, fmt::format("kv disk tier {}: {} ({}); capacity lowered to the {} "
                                        "it holds",
                                        dir_, what, ErrnoText(err), FormatByteSize(bytes_held_)));
    } else {
      LogOnce(logged_write_, fmt::format("kv disk tier {}: {} failed: {}", dir_, what,
                                         ErrnoText(err)));
    }
    return IoError(fmt::format("kv disk tier {}: {} failed: {}", dir_, what, ErrnoText(err)));
  };
  const int fd = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return fail("create", errno);
  if (!WriteAll(fd, value.data(), value.size())) {
    const int err = errno;
    ::close(fd);
    return fail("write", err);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return fail("fsync", err);
  }
  if (::close(fd) != 0) return fail("close", errno);
  std::error_code ec;
  fs::create_directories(fs::path(final_path).parent_path(), ec);
  {
    // Publishing and indexing under one lock: an eviction's unlink can never remove a file
    // that a concurrent Put of the same key has just published.
    std::lock_guard lock(mu_);
    if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      counters_.Error(TierError::kIo);
      LogOnce(logged_write_, fmt::format("kv disk tier {}: rename failed: {}", dir_,
                                         ErrnoText(err)));
      return IoError(fmt::format("kv disk tier {}: rename failed: {}", dir_, ErrnoText(err)));
    }
    InsertLocked(key, value.size());
    PublishCounts();
  }
  counters_.blocks_written.fetch_add(1);
  counters_.bytes_written.fetch_add(static_cast<int64_t>(value.size()));
  return Status::Ok();
}

void DiskTier::Remove(const BlockKey& key) {
  std::lock_guard lock(mu_);
  ::unlink(PathOf(key).c_str());
  EraseLocked(key);
  PublishCounts();
}

std::string DiskTier::Describe() {
  std::lock_guard lock(mu_);
  return fmt::format("disk tier {}: {} blocks, {} of {} (index rebuilt in {:.0f} ms{})", dir_,
                     index_.size(), FormatByteSize(bytes_held_), FormatByteSize(capacity_bytes_),
                     rebuild_.seconds * 1e3,
                     rebuild_.dropped ? fmt::format(", {} bad files dropped", rebuild_.dropped)
                                      : std::string());
}

}  // namespace kvserve
