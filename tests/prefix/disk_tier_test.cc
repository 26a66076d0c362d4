// DiskTier: files in a directory, LRU by bytes, an index rebuilt from headers at Open, atomic
// publish, and every failure a counted error rather than a crash or a half file.
#include "prefix/disk_tier.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "prefix/block_record.h"

namespace kvserve {
namespace {
// The test executables are unity builds: this file's helpers stay apart from its neighbours'.
namespace disk_tier_test {

namespace fs = std::filesystem;

KvLayout SmallLayout() { return KvLayout{2, 2, 8, 4, KvDtype::kF16, KvDtype::kF16}; }

int64_t Errors(const KvTier& tier, TierError kind) {
  return tier.stats().errors[static_cast<size_t>(kind)];
}

// Lowers the file size limit of the process (so that writes past it fail with EFBIG, as on a
// full disk) with SIGXFSZ ignored; restores both when it goes out of scope.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &old_);
    rlimit lowered = old_;
    lowered.rlim_cur = bytes;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &lowered) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  sighandler_t old_handler_ = SIG_DFL;
  bool ok_ = false;
};

class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           fmt::format("kvserve-disk-tier-{}-{}-{}", ::getpid(), counter.fetch_add(1),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Record i: a real block record of block i of a chain (so the rebuild's header checks pass),
  // with payload bytes all equal to i.
  std::vector<uint8_t> Record(int i, BlockKey* key) {
    const std::vector<TokenId> tokens{i, i + 1, i + 2, i + 3};
    const BlockKey root = RootKey(CacheNamespace{});
    *key = ChainKey(root, tokens);
    const std::vector<uint8_t> payload(SmallLayout().bytes_per_block(), static_cast<uint8_t>(i));
    kv_.WriteBlock(BlockId(0), payload.data());
    std::vector<uint8_t> record;
    EncodeBlockRecord(TreeBlock{*key, root, root, tokens, BlockId(0)}, kv_, &record);
    return record;
  }
  // Records 0..n-1 and their keys.
  void Records(int n, std::vector<BlockKey>* keys, std::vector<std::vector<uint8_t>>* records) {
    keys->resize(static_cast<size_t>(n));
    records->resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) (*records)[i] = Record(i, &(*keys)[i]);
  }
  // Makes records 0..total-1, writes 0..n-1 through a tier that is then closed, and ages their
  // files: record i was written n - i hours ago (set explicitly; no sleeping).
  void WriteAndClose(int n, int total, std::vector<BlockKey>* keys,
                     std::vector<std::vector<uint8_t>>* records) {
    Records(total, keys, records);
    auto tier = Open();
    ASSERT_NE(tier, nullptr);
    for (int i = 0; i < n; ++i) ASSERT_TRUE(tier->Put((*keys)[i], (*records)[i]).ok());
    tier.reset();
    const auto now = fs::file_time_type::clock::now();
    for (int i = 0; i < n; ++i) {
      fs::last_write_time(PathOf((*keys)[i]), now - std::chrono::hours(n - i));
    }
  }
  std::unique_ptr<DiskTier> Open(uint64_t capacity_bytes = 1 << 20) {
    auto tier = DiskTier::Open(DiskTierConfig{dir_.string(), capacity_bytes});
    EXPECT_TRUE(tier.ok()) << tier.status().ToString();
    return tier.ok() ? std::move(tier).value() : nullptr;
  }
  // The record files under their final names.
  std::vector<fs::path> Files() const {
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      if (e.is_regular_file() && e.path().extension() == ".kvb") files.push_back(e.path());
    }
    return files;
  }
  fs::path PathOf(const BlockKey& key) const {
    return dir_ / key.Hex().substr(0, 2) / (key.Hex() + ".kvb");
  }
  static void ExpectConsistent(const DiskTier& tier, size_t entries, uint64_t bytes_held) {
    const TierStats s = tier.stats();
    EXPECT_EQ(s.entries, static_cast<int64_t>(entries));
    EXPECT_EQ(s.bytes_held, static_cast<int64_t>(bytes_held));
  }

  fs::path dir_;
  KvStorage kv_{SmallLayout(), 1};
  const uint64_t record_bytes_ = BlockRecordBytes(SmallLayout());
};

TEST_F(DiskTierTest, PutThenGetRunReturnsTheBytesAndRemoveDeletesTheFile) {
  auto tier = Open();
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->name(), "disk");
  EXPECT_TRUE(tier->exact_contains());
  std::vector<BlockKey> k;
  std::vector<std::vector<uint8_t>> r;
  Records(2, &k, &r);
  ASSERT_TRUE(tier->Put(k[0], r[0]).ok());
  ASSERT_TRUE(tier->Put(k[1], r[1]).ok());
  EXPECT_TRUE(fs::exists(PathOf(k[0])));
  EXPECT_EQ(fs::file_size(PathOf(k[0])), record_bytes_);
  EXPECT_TRUE(fs::is_empty(dir_ / "tmp"));
  EXPECT_TRUE(tier->MayContain(k[0]));
  ExpectConsistent(*tier, 2, 2 * record_bytes_);

  std::vector<std::vector<uint8_t>> values;
  ASSERT_EQ(tier->GetRun(k, &values), 2);
  ASSERT_GE(values.size(), 2u);
  EXPECT_EQ(values[0], r[0]);
  EXPECT_EQ(values[1], r[1]);

  tier->Remove(k[0]);
  tier->Remove(k[0]);  // a missing key is fine
  EXPECT_FALSE(tier->MayContain(k[0]));
  EXPECT_FALSE(fs::exists(PathOf(k[0])));
  ExpectConsistent(*tier, 1, record_bytes_);
  const TierStats s = tier->stats();
  EXPECT_EQ(s.name, "disk");
  EXPECT_EQ(s.blocks_written, 2);
  EXPECT_EQ(s.bytes_written, static_cast<int64_t>(2 * record_bytes_));
  EXPECT_EQ(s.blocks_read, 2);
  EXPECT_EQ(s.bytes_read, static_cast<int64_t>(2 * record_bytes_));
  EXPECT_EQ(s.errors, (std::array<int64_t, kNumTierErrors>{}));
  const std::string line = tier->Describe();
  EXPECT_EQ(line.rfind(fmt::format("disk tier {}: 1 blocks, 688 B of 1.0 MiB (index rebuilt in ",
                                   dir_.string()),
                       0),
            0u)
      << line;
}

TEST_F(DiskTierTest, GetRunStopsAtTheFirstKeyItDoesNotHold) {
  auto tier = Open();
  ASSERT_NE(tier, nullptr);
  std::vector<BlockKey> k;
  std::vector<std::vector<uint8_t>> r;
  Records(3, &k, &r);
  ASSERT_TRUE(tier->Put(k[0], r[0]).ok());
  ASSERT_TRUE(tier->Put(k[2], r[2]).ok());
  std::vector<std::vector<uint8_t>> values;
  EXPECT_EQ(tier->GetRun(k, &values), 1);  // k0, then k1 is missing: k2 is not read
  EXPECT_EQ(values[0], r[0]);
  EXPECT_EQ(tier->GetRun(std::vector<BlockKey>{k[1], k[0]}, &values), 0);
  EXPECT_EQ(tier->GetRun(std::span<const BlockKey>(), &values), 0);
  EXPECT_EQ(tier->stats().blocks_read, 1);
  EXPECT_FALSE(tier->MayContain(k[1]));
}

TEST_F(DiskTierTest, EvictsTheLeastRecentlyUsedBeyondCapacity) {
  auto tier = Open(3 * record_bytes_);
  ASSERT_NE(tier, nullptr);
  std::vector<BlockKey> k;
  std::vector<std::vector<uint8_t>> r;
  Records(5, &k, &r);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(tier->Put(k[i], r[i]).ok());
  std::vector<std::vector<uint8_t>> values;
  ASSERT_EQ(tier->GetRun(std::vector<BlockKey>{k[0]}, &values), 1);  // k0 is now the newest
  ASSERT_TRUE(tier->Put(k[3], r[3]).ok());                           // evicts k1
  EXPECT_TRUE(tier->MayContain(k[0]));
  EXPECT_FALSE(tier->MayContain(k[1]));
  EXPECT_FALSE(fs::exists(PathOf(k[1])));
  ASSERT_TRUE(tier->Put(k[4], r[4]).ok());  // evicts k2
  EXPECT_FALSE(tier->MayContain(k[2]));
  EXPECT_FALSE(fs::exists(PathOf(k[2])));
  for (int i : {0, 3, 4}) EXPECT_TRUE(tier->MayContain(k[i])) << i;
  EXPECT_EQ(Files().size(), 3u);
  ExpectConsistent(*tier, 3, 3 * record_bytes_);
}

TEST_F(DiskTierTest, PutOfAHeldKeyOnlyRefreshesItsRecency) {
  auto tier = Open(3 * record_bytes_);
  ASSERT_NE(tier, nullptr);
  std::vector<BlockKey> k;
  std::vector<std::vector<uint8_t>> r;
  Records(4, &k, &r);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(tier->Put(k[i], r[i]).ok());
  ASSERT_TRUE(tier->Put(k[0], r[0]).ok());  // k0 is now the newest; nothing is written
  EXPECT_EQ(tier->stats().blocks_written, 3);
  ExpectConsistent(*tier, 3, 3 * record_bytes_);
  ASSERT_TRUE(tier->Put(k[3], r[3]).ok());  // evicts k1, the least recently used
  EXPECT_TRUE(tier->MayContain(k[0]));
  EXPECT_FALSE(tier->MayContain(k[1]));
  EXPECT_TRUE(tier->MayContain(k[2]));
}

TEST_F(DiskTierTest, ReopeningRebuildsTheIndexInModificationTimeOrder) {
  std::vector<BlockKey> k;
  std::vector<std::vector<uint8_t>> r;
  WriteAndClose(3, 5, &k, &r);
  // Oldest first: k2, k0, k1.
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(PathOf(k[2]), now - std::chrono::hours(3));
  fs::last_write_time(PathOf(k[0]), now - std::chrono::hours(2));
  fs::last_write_time(PathOf(k[1]), now - std::chrono::hours(1));
  // The same directory, spelt with a trailing slash.
  auto opened = DiskTier::Open(DiskTierConfig{dir_.string() + "/", 3 * record_bytes_});
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<DiskTier> tier = std::move(opened).value();
  EXPECT_EQ(tier->rebuild_stats().files, 3);
  EXPECT_EQ(tier->rebuild_stats().dropped, 0);
  EXPECT_GE(tier->rebuild_stats().seconds, 0.0);
  ExpectConsistent(*tier, 3, 3 * record_bytes_);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(tier->MayContain(k[i])) << i;
  EXPECT_EQ(tier->Describe().find(fmt::format("disk tier {}/: 3 blocks", dir_.string())), 0u)
      << tier->Describe();

  ASSERT_TRUE(tier->Put(k[3], r[3]).ok());  // evicts the oldest file: k2
  EXPECT_FALSE(tier->MayContain(k[2]));
  EXPECT_TRUE(tier->MayContain(k[0]));
  ASSERT_TRUE(tier->Put(k[4], r[4]).ok());  // then k0
  EXPECT_FALSE(tier->MayContain(k[0]));
  EXPECT_TRUE(tier->MayContain(k[1]));
  std::vector<std::vector<uint8_t>> values;
  ASSERT_EQ(tier->GetRun(std::vector<BlockKey>{k[1], k[3], k[4]}, &values), 3);
  EXPECT_EQ(values[0], r[1]);
  EXPECT_EQ(values[1], r[3]);
  EXPECT_EQ(values[2], r[4]);
  EXPECT_EQ(Files().size(), 3u);
}

// Retention: a retained record outlives unretained ones, also across a restart (its deadline
// is the file's modification time); an expired or absent deadline is ordinary LRU again.
TEST_F(DiskTierTest, RetainedRecordsAreEvictedLastAndKeepTheirDeadlineAcrossARestart) {
  std::vector<BlockKey> k;
  std::vector<std::vector<uint8_t>> r;
  Records(6, &k, &r);
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const int64_t until = now_ms + 3600 * 1000;
  {
    auto tier = Open(3 * record_bytes_);
    ASSERT_NE(tier, nullptr);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(tier->Put(k[i], r[i]).ok());
    tier->Retain(k[0], until);  // the least recently used, but retained
    tier->Retain(k[5], until);  // not held: nothing happens
    EXPECT_EQ(tier->num_retained(), 1);
    ASSERT_TRUE(tier->Put(k[3], r[3]).ok());  // evicts k1, not k0
    EXPECT_TRUE(tier->MayContain(k[0]));
    EXPECT_FALSE(tier->MayContain(k[1]));
    const auto mtime = fs::last_write_time(PathOf(k[0]));
    EXPECT_GT(mtime, fs::file_time_type::clock::now() + std::chrono::minutes(59));
  }
  auto tier = Open(3 * record_bytes_);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->num_retained(), 1);
  ASSERT_TRUE(tier->Put(k[4], r[4]).ok());  // evicts k2, then k3: never the retained k0
  ASSERT_TRUE(tier->Put(k[5], r[5]).ok());
  EXPECT_TRUE(tier->MayContain(k[0]));
  EXPECT_FALSE(tier->MayContain(k[2]));
  EXPECT_FALSE(tier->MayContain(k[3]));
  // Reopened with room for one record, the unretained ones go and the retained one stays.
  auto small = Open(record_bytes_);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(Files().size(), 1u);
  EXPECT_TRUE(small->MayContain(k[0]));
}

TEST_F(DiskTierTest, ReopeningWithASmallerCapacityEvictsTheOldestFiles) {
  std::vector<BlockKey> k;
  std::vector<std::vector<uint8_t>> r;
  WriteAndClose(3, 3, &k, &r);  // oldest first: k0, k1, k2
  auto tier = Open(2 * record_bytes_);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->rebuild_stats().files, 3);
  EXPECT_FALSE(tier->MayContain(k[0]));
  EXPECT_FALSE(fs::exists(PathOf(k[0])));
  EXPECT_TRUE(tier->MayContain(k[1]));
  EXPECT_TRUE(tier->MayContain(k[2]));
  ExpectConsistent(*tier, 2, 2 * record_bytes_);
}

TEST_F(DiskTierTest, OpenDeletesLeftoverTempFiles) {
  { auto tier = Open(); }
  { std::ofstream(dir_ / "tmp" / "half-written.tmp") << "partial"; }
  auto tier = Open();
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(fs::is_empty(dir_ / "tmp"));
  EXPECT_EQ(tier->rebuild_stats().dropped, 0);
  EXPECT_EQ(tier->stats().entries, 0);
}

TEST_F(DiskTierTest, RebuildDeletesAndCountsBadFiles) {
  std::vector<BlockKey> k;
  std::vector<std::vector<uint8_t>> r;
  Records(4, &k, &r);
  {
    auto tier = Open();
    ASSERT_NE(tier, nullptr);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(tier->Put(k[i], r[i]).ok());
  }
  fs::resize_file(PathOf(k[0]), record_bytes_ - 1);  // truncated
  {
    std::fstream f(PathOf(k[1]), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.put('X');  // a flipped magic byte
  }
  fs::copy_file(PathOf(k[3]), PathOf(k[2]), fs::copy_options::overwrite_existing);  // wrong key
  // Files not named as records are not the tier's: left alone.
  { std::ofstream(dir_ / "README") << "kv cache"; }
  { std::ofstream(PathOf(k[3]).parent_path() / "notes.kvb") << "not a key"; }
  auto tier = Open();
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->rebuild_stats().files, 1);
  EXPECT_EQ(tier->rebuild_stats().dropped, 3);
  EXPECT_EQ(Errors(*tier, TierError::kCorrupt), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(tier->MayContain(k[i])) << i;
    EXPECT_FALSE(fs::exists(PathOf(k[i]))) << i;
  }
  EXPECT_TRUE(tier->MayContain(k[3]));
  ExpectConsistent(*tier, 1, record_bytes_);
  EXPECT_TRUE(fs::exists(dir_ / "README"));
  EXPECT_TRUE(fs::exists(PathOf(k[3]).parent_path() / "notes.kvb"));
  EXPECT_NE(tier->Describe().find("3 bad files deleted"), std::string::npos) << tier->Describe();
}

TEST_F(DiskTierTest, AFileDeletedBehindItsBackIsAMissAndLeavesTheIndex) {
  auto tier = Open();
  ASSERT_NE(tier, nullptr);
  std::vector<BlockKey> k;
  std::vector<std::vector<uint8_t>> r;
  Records(2, &k, &r);
  ASSERT_TRUE(tier->Put(k[0], r[0]).ok());
  ASSERT_TRUE(tier->Put(k[1], r[1]).ok());
  fs::remove(PathOf(k[1]));
  std::vector<std::vector<uint8_t>> values;
  EXPECT_EQ(tier->GetRun(k, &values), 1);
  EXPECT_TRUE(tier->MayContain(k[0]));
  EXPECT_FALSE(tier->MayContain(k[1]));
  ExpectConsistent(*tier, 1, record_bytes_);
  EXPECT_EQ(Errors(*tier, TierError::kIo), 0);
  ASSERT_TRUE(tier->Put(k[1], r[1]).ok());  // and can be written again
  EXPECT_EQ(tier->GetRun(k, &values), 2);
}

TEST_F(DiskTierTest, OpenOnARegularFileFailsNamingThePathAndTheFlag) {
  { std::ofstream(dir_) << "not a directory"; }
  auto tier = DiskTier::Open(DiskTierConfig{dir_.string(), 0});
  ASSERT_FALSE(tier.ok());
  const std::string& message = tier.status().message();
  EXPECT_NE(message.find(dir_.string()), std::string::npos) << message;
  EXPECT_NE(message.find("not a directory"), std::string::npos) << message;
  EXPECT_NE(message.find("--kv-disk-path"), std::string::npos) << message;
  EXPECT_TRUE(fs::is_regular_file(dir_));  // untouched
}

TEST_F(DiskTierTest, OpenCreatesMissingParentsAndDefaultsToAShareOfTheFreeSpace) {
  const fs::path nested = dir_ / "a" / "b";
  // Other tests (CTest runs several at once) write and delete files on the same filesystem, so
  // the free space Open saw lies between what it was just before and just after.
  const uintmax_t before = fs::space(dir_.parent_path()).available;
  auto tier = DiskTier::Open(DiskTierConfig{nested.string(), 0});
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  const uintmax_t after = fs::space(nested).available;
  EXPECT_TRUE(fs::is_directory(nested / "tmp"));
  EXPECT_LE((*tier)->capacity_bytes(), uint64_t{64} << 30);
  EXPECT_LE((*tier)->capacity_bytes(), std::max(before, after) / 10 + 4096);
  EXPECT_EQ((*tier)->dir(), nested.string());
}

TEST_F(DiskTierTest, AFailedWriteIsCountedLeavesNoTempFileAndLowersTheCapacity) {
  auto tier = Open();
  ASSERT_NE(tier, nullptr);
  std::vector<BlockKey> k;
  std::vector<std::vector<uint8_t>> r;
  Records(2, &k, &r);
  ASSERT_TRUE(tier->Put(k[0], r[0]).ok());
  Status failed;
  {
    // Below one record: write() fails with EFBIG after a short write, as on a full disk.
    FileSizeLimit limit(100);
    ASSERT_TRUE(limit.ok());
    failed = tier->Put(k[1], r[1]);
  }
  EXPECT_EQ(failed.code(), StatusCode::kIoError);
  EXPECT_NE(failed.message().find(dir_.string()), std::string::npos) << failed.message();
  EXPECT_FALSE(tier->MayContain(k[1]));
  EXPECT_FALSE(fs::exists(PathOf(k[1])));
  EXPECT_TRUE(fs::is_empty(dir_ / "tmp"));
  EXPECT_EQ(Errors(*tier, TierError::kIo), 1);
  EXPECT_EQ(tier->stats().blocks_written, 1);
  EXPECT_EQ(tier->capacity_bytes(), record_bytes_);  // what it held when the disk was "full"
  // It keeps working within that: a new block evicts the oldest instead of failing.
  ASSERT_TRUE(tier->Put(k[1], r[1]).ok());
  EXPECT_TRUE(tier->MayContain(k[1]));
  EXPECT_FALSE(tier->MayContain(k[0]));
  ExpectConsistent(*tier, 1, record_bytes_);
}

TEST_F(DiskTierTest, ConcurrentPutsReadsAndRemovesKeepTheIndexEqualToTheFiles) {
  auto tier = Open(24 * record_bytes_);
  ASSERT_NE(tier, nullptr);
  std::vector<BlockKey> keys;
  std::vector<std::vector<uint8_t>> records;
  Records(48, &keys, &records);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::vector<uint8_t>> values;
      for (int j = 0; j < 300; ++j) {
        const size_t i = static_cast<size_t>(j * 7 + t * 13) % keys.size();
        if (j % 3 == 0) {
          EXPECT_TRUE(tier->Put(keys[i], records[i]).ok());
        } else if (j % 17 == 0) {
          tier->Remove(keys[i]);
        } else {
          const size_t n = std::min<size_t>(3, keys.size() - i);
          const int got = tier->GetRun(std::span<const BlockKey>(keys.data() + i, n), &values);
          for (size_t g = 0; g < static_cast<size_t>(got); ++g) {
            EXPECT_EQ(values[g], records[i + g]);
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const std::vector<fs::path> files = Files();
  ExpectConsistent(*tier, files.size(), files.size() * record_bytes_);
  EXPECT_LE(files.size() * record_bytes_, tier->capacity_bytes());
  for (const BlockKey& key : keys) EXPECT_EQ(tier->MayContain(key), fs::exists(PathOf(key)));
  EXPECT_TRUE(fs::is_empty(dir_ / "tmp"));
  EXPECT_EQ(tier->stats().errors, (std::array<int64_t, kNumTierErrors>{}));
}

}  // namespace disk_tier_test
}  // namespace
}  // namespace kvserve
