// DiskTier: files in a directory, LRU by bytes, an index rebuilt from headers at Open, atomic
// publish, and every failure a counted error rather than a crash or a half file.
#include "prefix/disk_tier.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "prefix/block_record.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

KvLayout SmallLayout() { return KvLayout{2, 2, 8, 4, KvDtype::kF16, KvDtype::kF16}; }

class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvserve-disk-tier-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Record i: a real block record (so the rebuild's header checks pass), distinct per i.
  std::vector<uint8_t> Record(int i, BlockKey* key) {
    std::vector<TokenId> tokens{i, i + 1, i + 2, i + 3};
    const BlockKey root = RootKey(CacheNamespace{});
    *key = ChainKey(root, tokens);
    std::vector<uint8_t> bytes(SmallLayout().bytes_per_block(), static_cast<uint8_t>(i));
    kv_.WriteBlock(BlockId(0), bytes.data());
    std::vector<uint8_t> rec;
    EncodeBlockRecord(TreeBlock{*key, root, root, tokens, BlockId(0)}, kv_, &rec);
    return rec;
  }
  std::unique_ptr<DiskTier> Open(uint64_t capacity = 1 << 20) {
    auto t = DiskTier::Open(DiskTierConfig{dir_.string(), capacity});
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  std::vector<fs::path> Files() const {
    std::vector<fs::path> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      if (e.is_regular_file() && e.path().extension() == ".kvb") out.push_back(e.path());
    }
    return out;
  }
  fs::path PathOf(const BlockKey& k) const {
    return dir_ / k.Hex().substr(0, 2) / (k.Hex() + ".kvb");
  }

  fs::path dir_;
  KvStorage kv_{SmallLayout(), 1};
  const size_t record_bytes_ = BlockRecordBytes(SmallLayout());
};

TEST_F(DiskTierTest, PutGetRunAndRemove) {
  auto tier = Open();
  BlockKey k0, k1, k2;
  const auto r0 = Record(0, &k0), r1 = Record(1, &k1), r2 = Record(2, &k2);
  ASSERT_TRUE(tier->Put(k0, r0).ok());
  ASSERT_TRUE(tier->Put(k1, r1).ok());
  EXPECT_TRUE(tier->MayContain(k0));
  EXPECT_FALSE(tier->MayContain(k2));
  std::vector<std::vector<uint8_t>> values;
  const std::vector<BlockKey> keys{k0, k1, k2};
  EXPECT_EQ(tier->GetRun(keys, &values), 2);  // stops at the first key it lacks
  EXPECT_EQ(values[0], r0);
  EXPECT_EQ(values[1], r1);
  EXPECT_EQ(tier->GetRun(std::vector<BlockKey>{k2, k0}, &values), 0);
  tier->Remove(k0);
  EXPECT_FALSE(tier->MayContain(k0));
  EXPECT_FALSE(fs::exists(PathOf(k0)));
  const TierStats s = tier->stats();
  EXPECT_EQ(s.entries, 1);
  EXPECT_EQ(s.bytes_held, static_cast<int64_t>(record_bytes_));
  EXPECT_EQ(s.blocks_written, 2);
  EXPECT_EQ(s.blocks_read, 2);
  EXPECT_EQ(s.name, "disk");
}

TEST_F(DiskTierTest, EvictsTheLeastRecentlyUsedBeyondCapacity) {
  auto tier = Open(3 * record_bytes_);
  BlockKey k[5];
  std::vector<std::vector<uint8_t>> r(5);
  for (int i = 0; i < 5; ++i) r[i] = Record(i, &k[i]);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(tier->Put(k[i], r[i]).ok());
  std::vector<std::vector<uint8_t>> values;
  ASSERT_EQ(tier->GetRun(std::vector<BlockKey>{k[0]}, &values), 1);  // k0 is now the newest
  ASSERT_TRUE(tier->Put(k[3], r[3]).ok());  // evicts k1
  EXPECT_TRUE(tier->MayContain(k[0]));
  EXPECT_FALSE(tier->MayContain(k[1]));
  EXPECT_FALSE(fs::exists(PathOf(k[1])));
  ASSERT_TRUE(tier->Put(k[4], r[4]).ok());  // evicts k2
  EXPECT_FALSE(tier->MayContain(k[2]));
  EXPECT_TRUE(tier->MayContain(k[3]));
  EXPECT_EQ(Files().size(), 3u);
  EXPECT_EQ(tier->stats().bytes_held, static_cast<int64_t>(3 * record_bytes_));
}

TEST_F(DiskTierTest, ReopeningRebuildsTheIndexInModificationTimeOrder) {
  BlockKey k[3];
  std::vector<std::vector<uint8_t>> r(3);
  {
    auto tier = Open();
    for (int i = 0; i < 3; ++i) {
      r[i] = Record(i, &k[i]);
      ASSERT_TRUE(tier->Put(k[i], r[i]).ok());
    }
  }
  // Oldest first: k2, k0, k1 (set explicitly; no sleeping).
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(PathOf(k[2]), now - std::chrono::hours(3));
  fs::last_write_time(PathOf(k[0]), now - std::chrono::hours(2));
  fs::last_write_time(PathOf(k[1]), now - std::chrono::hours(1));
  auto tier = Open(3 * record_bytes_);
  EXPECT_EQ(tier->rebuild_stats().files, 3);
  EXPECT_EQ(tier->rebuild_stats().dropped, 0);
  EXPECT_EQ(tier->stats().entries, 3);
  // A fourth record evicts the oldest file: k2.
  BlockKey k3;
  ASSERT_TRUE(tier->Put(k3, Record(3, &k3)).ok());
  EXPECT_FALSE(tier->MayContain(k[2]));
  std::vector<std::vector<uint8_t>> values;
  ASSERT_EQ(tier->GetRun(std::vector<BlockKey>{k[0], k[1]}, &values), 2);
  EXPECT_EQ(values[0], r[0]);
  EXPECT_EQ(values[1], r[1]);
  EXPECT_NE(tier->Describe().find("3 blocks"), std::string::npos) << tier->Describe();
}

TEST_F(DiskTierTest, RebuildDropsBadFilesAndLeftoverTempFiles) {
  BlockKey k[4];
  {
    auto tier = Open();
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(tier->Put(k[i], Record(i, &k[i])).ok());
  }
  fs::resize_file(PathOf(k[0]), record_bytes_ / 2);  // truncated
  {
    std::fstream f(PathOf(k[1]), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.put('X');  // bad magic
  }
  fs::copy_file(PathOf(k[3]), PathOf(k[2]), fs::copy_options::overwrite_existing);  // wrong key
  { std::ofstream(dir_ / "tmp" / "half-written.tmp") << "partial"; }
  auto tier = Open();
  EXPECT_EQ(tier->rebuild_stats().files, 1);
  EXPECT_EQ(tier->rebuild_stats().dropped, 3);
  EXPECT_EQ(tier->stats().errors[static_cast<int>(TierError::kCorrupt)], 3);
  EXPECT_TRUE(tier->MayContain(k[3]));
  EXPECT_EQ(Files().size(), 1u);
  EXPECT_TRUE(fs::is_empty(dir_ / "tmp"));
}

TEST_F(DiskTierTest, AFileDeletedBehindItsBackIsAMiss) {
  auto tier = Open();
  BlockKey k;
  ASSERT_TRUE(tier->Put(k, Record(0, &k)).ok());
  fs::remove(PathOf(k));
  std::vector<std::vector<uint8_t>> values;
  EXPECT_EQ(tier->GetRun(std::vector<BlockKey>{k}, &values), 0);
  EXPECT_FALSE(tier->MayContain(k));
  EXPECT_EQ(tier->stats().errors[static_cast<int>(TierError::kIo)], 0);
}

TEST_F(DiskTierTest, APathThatIsAFileIsRefusedWithAClearMessage) {
  fs::create_directories(dir_.parent_path());
  { std::ofstream(dir_) << "not a directory"; }
  auto t = DiskTier::Open(DiskTierConfig{dir_.string(), 0});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(dir_.string()), std::string::npos);
  EXPECT_NE(t.status().message().find("--kv-disk-path"), std::string::npos);
  fs::remove(dir_);
}

TEST_F(DiskTierTest, AFailedWriteIsCountedLeavesNoTempFileAndLowersTheCapacity) {
  auto tier = Open();
  BlockKey k0, k1;
  ASSERT_TRUE(tier->Put(k0, Record(0, &k0)).ok());
  // A file size limit below one record: write() fails with EFBIG, as a full disk would fail.
  ::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  ::getrlimit(RLIMIT_FSIZE, &old);
  rlimit small = old;
  small.rlim_cur = 100;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const Status st = tier->Put(k1, Record(1, &k1));
  ::setrlimit(RLIMIT_FSIZE, &old);
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_FALSE(tier->MayContain(k1));
  EXPECT_EQ(tier->stats().errors[static_cast<int>(TierError::kIo)], 1);
  EXPECT_TRUE(fs::is_empty(dir_ / "tmp"));
  EXPECT_EQ(tier->capacity_bytes(), record_bytes_);  // what it held when the disk was "full"
  // It keeps working within that: a new block evicts the oldest.
  ASSERT_TRUE(tier->Put(k1, Record(1, &k1)).ok());
  EXPECT_TRUE(tier->MayContain(k1));
  EXPECT_FALSE(tier->MayContain(k0));
}

TEST_F(DiskTierTest, ConcurrentPutsAndReadsKeepTheIndexEqualToTheFiles) {
  auto tier = Open(40 * record_bytes_);
  std::vector<BlockKey> keys(64);
  std::vector<std::vector<uint8_t>> recs(64);
  for (int i = 0; i < 64; ++i) recs[i] = Record(i, &keys[i]);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::vector<uint8_t>> values;
      for (int j = 0; j < 200; ++j) {
        const int i = (j * 7 + t * 13) % 64;
        if (j % 3 == 0) {
          (void)tier->Put(keys[i], recs[i]);
        } else if (tier->GetRun(std::vector<BlockKey>{keys[i]}, &values) == 1) {
          EXPECT_EQ(values[0], recs[i]);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const TierStats s = tier->stats();
  EXPECT_EQ(s.entries, static_cast<int64_t>(Files().size()));
  EXPECT_LE(s.bytes_held, static_cast<int64_t>(40 * record_bytes_));
  EXPECT_TRUE(fs::is_empty(dir_ / "tmp"));
}

}  // namespace
}  // namespace kvserve
