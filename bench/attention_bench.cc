// kvserve_attention_bench: the paged attention kernel alone, as a decode step runs it (one token,
// `--group` query heads per KV head, every KV head of every layer), over a KV cache of
// `--layers` distinct layers: with enough of them the cache lies past the CPU's caches, as a long
// context's does, and with one it stays in them. Threads take the KV heads in turn (h = t,
// t + threads, ...), as Model::Attend splits a step. Prints the median, fastest and slowest of
// --reps steps in ns per slot and KV head, and the KV bytes read per second.
//
//   kvserve_attention_bench [--context 4096] [--layers 16] [--cache-type f16] [--threads 1]
//
// The KV cache is the engine's own (KvStorage, read through KvLayerView); its vectors are random
// (stored through StoreKvVector, so every type's scales and rotations are real); the output's
// checksum is printed so that two builds can be compared for identical results as well as
// speed.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_stats.h"
#include "kv/kv_storage.h"
#include "model/model.h"
#include "ops/attention.h"
#include "quant/kv_dtype.h"

namespace kvserve {
namespace {

struct Options {
  int context = 4096;
  int layers = 16;
  int kv_heads = 8;
  int group = 4;
  int head_dim = 64;
  int block_size = 16;
  int threads = 1;
  int reps = 7;
  std::string cache_type = "f16";
};

int Run(const Options& o) {
  const auto dtype = ParseKvDtypeOrError(o.cache_type, "--cache-type");
  if (!dtype.ok()) {
    fmt::print(stderr, "error: {}\n", dtype.status().message());
    return 2;
  }
  if (const Status s = CheckKvDtype(*dtype, o.head_dim); !s.ok()) {
    fmt::print(stderr, "error: {}\n", s.message());
    return 2;
  }
  KvLayout layout;
  layout.num_layers = o.layers;
  layout.num_kv_heads = o.kv_heads;
  layout.head_dim = o.head_dim;
  layout.block_size = o.block_size;
  layout.k_dtype = layout.v_dtype = *dtype;
  const int blocks = (o.context + o.block_size - 1) / o.block_size;
  KvStorage kv(layout, blocks);
  const size_t head_bytes = layout.k_head_bytes();
  std::mt19937 rng(1);  // a fixed seed: every run stores the same KV
  std::uniform_real_distribution<float> values(-1.7f, 1.7f);
  std::vector<float> x(static_cast<size_t>(o.head_dim));
  auto store = [&](uint8_t* slot) {
    for (float& e : x) e = values(rng);
    StoreKvVector(*dtype, x.data(), o.head_dim, slot);
  };
  for (int layer = 0; layer < o.layers; ++layer) {
    for (int b = 0; b < blocks; ++b) {
      for (int h = 0; h < o.kv_heads; ++h) {
        for (int s = 0; s < o.block_size; ++s) {
          store(kv.KTile(layer, BlockId(b), h) + s * head_bytes);
          store(kv.VTile(layer, BlockId(b), h) + s * head_bytes);
        }
      }
    }
  }
  std::vector<BlockId> table;
  for (int b = 0; b < blocks; ++b) table.push_back(BlockId(b));
  const int64_t q_dim = static_cast<int64_t>(o.kv_heads) * o.group * o.head_dim;
  std::vector<float> q(static_cast<size_t>(q_dim)), out(q.size());
  for (float& e : q) e = values(rng);
  const float scale = 1.f / std::sqrt(static_cast<float>(o.head_dim));

  auto step = [&](int t) {
    for (int layer = 0; layer < o.layers; ++layer) {
      const PagedKvLayerView view = KvLayerView(kv, layer);
      for (int h = t; h < o.kv_heads; h += o.threads) {
        AttentionTile tile;
        const int64_t head0 = static_cast<int64_t>(h) * o.group * o.head_dim;
        tile.q = q.data() + head0;
        tile.q_stride = q_dim;
        tile.out = out.data() + head0;
        tile.out_stride = q_dim;
        tile.group = o.group;
        tile.kv_head = h;
        tile.first_slots = o.context;
        tile.block_table = table;
        AttendTile(tile, view, scale);
      }
    }
  };
  std::vector<double> runs;
  for (int r = 0; r < o.reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    for (int t = 1; t < o.threads; ++t) workers.emplace_back(step, t);
    step(0);
    for (std::thread& w : workers) w.join();
    runs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double median = bench::Median(runs);
  const auto [fastest, slowest] = std::minmax_element(runs.begin(), runs.end());
  // Per thread: each reads its share of the slots and heads.
  const double slot_heads = static_cast<double>(o.context) * o.kv_heads * o.layers / o.threads;
  const double kv_bytes = 2.0 * static_cast<double>(head_bytes) * o.context * o.kv_heads * o.layers;
  double checksum = 0;
  for (float e : out) checksum += e;
  fmt::print(
      "attention {} KV, head_dim {}, group {}, {} KV heads x {} layers, {} cached ({:.1f} MiB), "
      "{} thread(s), isa {}: {:.2f} ns per slot and KV head per thread (fastest {:.2f}, slowest "
      "{:.2f}), {:.3f} ms per step, {:.1f} GB/s of KV, checksum {:.6f}\n",
      o.cache_type, o.head_dim, o.group, o.kv_heads, o.layers, o.context, kv_bytes / (1 << 20),
      o.threads, AttentionIsa(), median / slot_heads * 1e9, *fastest / slot_heads * 1e9,
      *slowest / slot_heads * 1e9, median * 1e3, kv_bytes / median / 1e9, checksum);
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  kvserve::Options o;
  CLI::App app{"kvserve_attention_bench: the paged attention kernel alone, one decode step"};
  app.add_option("--context", o.context, "Cached tokens")->check(CLI::Range(1, 1 << 20));
  app.add_option("--layers", o.layers, "Layers of distinct KV (more: past the CPU's caches)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--kv-heads", o.kv_heads, "KV heads per layer")->check(CLI::Range(1, 256));
  app.add_option("--group", o.group, "Query heads per KV head")->check(CLI::Range(1, 64));
  app.add_option("--head-dim", o.head_dim, "Head dimension")->check(CLI::Range(1, 1024));
  app.add_option("--block-size", o.block_size, "Slots per KV block")->check(CLI::Range(1, 1024));
  app.add_option("--cache-type", o.cache_type, "KV cache type of keys and values");
  app.add_option("--threads", o.threads, "Threads (the KV heads in turn)")
      ->check(CLI::Range(1, 256));
  app.add_option("--reps", o.reps, "Steps timed (median reported)")->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);
  return kvserve::Run(o);
}
