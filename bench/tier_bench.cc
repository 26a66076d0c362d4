// kvserve_tier_bench: the disk tier on its own. Writes N block records of a model's KV layout
// (default: the 1B shape, 22 layers x 4 KV heads x 64 dims, f16, 16-token blocks), then
// reopens the directory to time the index rebuild (headers only) with the page cache warm and
// after dropping the files from it, and times GetRun + verification over runs of blocks.
//
//   build/kvserve_tier_bench --dir /var/tmp/tiers --blocks 10000
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "prefix/block_record.h"
#include "prefix/disk_tier.h"

namespace kvserve {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void DropPageCache(const std::string& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

int Main(int argc, char** argv) {
  CLI::App app("disk tier: index rebuild per 10k blocks, load bandwidth");
  std::string dir = "/var/tmp/kvserve-tier-bench";
  int blocks = 10000, layers = 22, kv_heads = 4, head_dim = 64, run = 128;
  app.add_option("--dir", dir, "scratch directory (emptied first and last)");
  app.add_option("--blocks", blocks, "records to write");
  app.add_option("--layers", layers);
  app.add_option("--kv-heads", kv_heads);
  app.add_option("--head-dim", head_dim);
  app.add_option("--run", run, "blocks per GetRun (a 2048-token prompt is 128)");
  CLI11_PARSE(app, argc, argv);
  std::filesystem::remove_all(dir);
  const KvLayout layout{layers, kv_heads, head_dim, 16, KvDtype::kF16, KvDtype::kF16};
  KvStorage kv(layout, 1);
  std::vector<uint8_t> bytes(layout.bytes_per_block());
  std::mt19937 rng(1);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  kv.WriteBlock(BlockId(0), bytes.data());
  const uint64_t record = BlockRecordBytes(layout);
  std::vector<BlockKey> keys;
  std::vector<TokenId> tokens;
  {
    auto tier = DiskTier::Open(DiskTierConfig{dir, record * (blocks + 1)});
    if (!tier.ok()) return std::fprintf(stderr, "%s\n", tier.status().ToString().c_str()), 1;
    BlockKey prev = RootKey(MakeCacheNamespace({"tier-bench"}));
    std::vector<uint8_t> rec;
    const double t0 = Now();
    for (int i = 0; i < blocks; ++i) {
      std::vector<TokenId> t(16);
      for (auto& x : t) x = static_cast<TokenId>(rng() % 32000);
      const BlockKey k = ChainKey(prev, t);
      EncodeBlockRecord(TreeBlock{k, prev, prev, t, BlockId(0)}, kv, &rec);
      if (!(*tier)->Put(k, rec).ok()) return 1;
      keys.push_back(k);
      tokens.insert(tokens.end(), t.begin(), t.end());
      prev = k;
    }
    const double s = Now() - t0;
    std::printf("wrote %d records of %llu bytes in %.2f s (%.0f blocks/s, %.2f GB/s, fsync each)\n",
                blocks, static_cast<unsigned long long>(record), s, blocks / s,
                blocks * static_cast<double>(record) / s / 1e9);
  }
  for (const bool cold : {false, true}) {
    if (cold) DropPageCache(dir);
    auto tier = DiskTier::Open(DiskTierConfig{dir, record * (blocks + 1)});
    if (!tier.ok()) return 1;
    const auto& r = (*tier)->rebuild_stats();
    std::printf("rebuild (page cache %s): %lld files in %.3f s = %.3f s per 10k blocks\n",
                cold ? "dropped" : "warm", static_cast<long long>(r.files), r.seconds,
                r.seconds * 10000.0 / std::max<int64_t>(1, r.files));
    // Loads: runs of `run` blocks through GetRun and full verification, reusing buffers.
    std::vector<std::vector<uint8_t>> values;
    const int runs = std::min(blocks / run, 20);
    const double t0 = Now();
    uint64_t loaded = 0;
    for (int i = 0; i < runs; ++i) {
      const std::span<const BlockKey> span(keys.data() + i * run, run);
      const int got = (*tier)->GetRun(span, &values);
      for (int j = 0; j < got; ++j) {
        const size_t b = static_cast<size_t>(i * run + j);
        auto ok = VerifyBlockRecord(values[j], keys[b],
                                    std::span<const TokenId>(tokens.data() + b * 16, 16), layout);
        if (!ok.ok()) return std::fprintf(stderr, "%s\n", ok.status().ToString().c_str()), 1;
        loaded += values[j].size();
      }
    }
    const double s = Now() - t0;
    std::printf("load + verify (page cache %s): %d runs of %d blocks, %.2f GB/s\n",
                cold ? "dropped" : "warm", runs, run, loaded / s / 1e9);
  }
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) { return kvserve::Main(argc, argv); }
