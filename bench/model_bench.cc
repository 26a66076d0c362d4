// kvserve_model_bench: speed of the forward pass against the machine's measured limits.
//
// For each GGUF model given it prints prompt processing (pp, one batch of N tokens) and token
// generation (tg, one token per step from an empty context) in tokens/s, the decode bound
// (measured memory bandwidth / weight bytes a decode step reads) and the achieved fraction,
// prefill GFLOP/s against the measured peak, batched decode throughput at several batch sizes, and
// decode speed at a short and a long context, and optionally a prefill on top of a cached context
// (--pp-at). Every speed is the median of --reps runs; the bandwidth and FMA peak are the best of
// theirs (limits: a busy neighbour only lowers them).
//
// With --cache-type-k / --cache-type-v (default f16) the KV cache uses those types, and the
// long-context run also times attention alone (every layer and KV head of one decode step), the
// part of a decode step that the KV type changes.
//
//   kvserve_model_bench --model A.gguf [--model B.gguf] [--threads 2] [--reps 3]
//       [--pp 512] [--tg 128] [--batches 1,2,4,8,16] [--long-context 4096] [--pp-at 1024,2048]
//       [--cache-type-k int8] [--cache-type-v int8]
//   kvserve_model_bench --matmul Q4_0,MXFP4 [--matmul-rows 2880] [--matmul-cols 2880]
//       [--matmul-tokens 1,512]   (weight types alone, no model; Q4_K, Q5_K and Q6_K need
//       --matmul-cols a multiple of 256)
#include <fmt/format.h>
#include <immintrin.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "bench_stats.h"
#include "kv/block_pool.h"
#include "kv/kv_storage.h"
#include "model/model.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "quant/types.h"
#include "util/aligned_buffer.h"
#include "util/check.h"
#include "util/fp16.h"
#include "util/thread_pool.h"

namespace kvserve {
namespace {

using Clock = std::chrono::steady_clock;

using bench::Median;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// n pseudo-random bytes at p: splitmix64 from state z, 8 bytes per step.
void FillRandomBytes(uint8_t* p, size_t n, uint64_t z) {
  for (size_t i = 0; i < n; i += 8) {
    z += 0x9e3779b97f4a7c15ull;
    uint64_t v = z;
    v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ull;
    v = (v ^ (v >> 27)) * 0x94d049bb133111ebull;
    v ^= v >> 31;
    std::memcpy(p + i, &v, std::min<size_t>(8, n - i));
  }
}

// Read bandwidth of all threads streaming over a buffer much larger than the caches (GB/s),
// prefetching one page ahead as the decode kernels do.
// NOTE: the buffer holds random bytes, written by the threads that later read it. A buffer of
// one repeated byte measured about twice the bandwidth that real weights get on a virtual
// machine (the host may merge identical pages), so it would overstate the decode bound.
double MeasureBandwidth(ThreadPool& pool, int reps) {
  const size_t bytes = size_t{1} << 30;
  AlignedBuffer<uint8_t> buf(bytes);
  auto range = [&](int t, int nt) {
    const size_t units = bytes / 128;  // 128-byte steps of the read loop
    return std::pair{units / nt * t * 128, units / nt * (t + 1) * 128};
  };
  pool.Run([&](int t, int nt) {
    const auto [b, e] = range(t, nt);
    FillRandomBytes(buf.data() + b, e - b, 0x9e3779b97f4a7c15ull * (t + 1));
  });
  // The ranges are contiguous from 0: the last one ends at the bytes read in all.
  const double read = static_cast<double>(range(pool.num_threads() - 1, pool.num_threads()).second);
  std::vector<double> runs;
  std::vector<uint64_t> sink(pool.num_threads());
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = Clock::now();
    pool.Run([&](int t, int nt) {
      const auto [b, e] = range(t, nt);
      // Every byte is loaded (two 32-byte loads per line), four independent xor chains.
      __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                        _mm256_setzero_si256()};
      for (size_t i = b; i < e; i += 128) {
        _mm_prefetch(reinterpret_cast<const char*>(buf.data() + i) + 4096, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(buf.data() + i) + 4096 + 64, _MM_HINT_T0);
        const auto* p = reinterpret_cast<const __m256i*>(buf.data() + i);
        for (int k = 0; k < 4; ++k) acc[k] = _mm256_xor_si256(acc[k], _mm256_load_si256(p + k));
      }
      const __m256i x = _mm256_xor_si256(_mm256_xor_si256(acc[0], acc[1]),
                                         _mm256_xor_si256(acc[2], acc[3]));
      sink[t] = static_cast<uint64_t>(_mm256_extract_epi64(x, 0));
    });
    if (r > 0) runs.push_back(read / SecondsSince(t0) / 1e9);  // first run warms up
  }
  return *std::max_element(runs.begin(), runs.end());  // a bound: noise only lowers it
}

// Peak f32 FMA throughput of all threads with register-resident operands (GFLOP/s).
template <typename Vec, typename Set1, typename Fma>
double FmaPeakWith(ThreadPool& pool, int reps, Set1 set1, Fma fma) {
  constexpr int kIters = 20'000'000;
  constexpr int kLanes = sizeof(Vec) / sizeof(float);
  std::vector<double> runs;
  std::vector<float> sink(pool.num_threads());
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    pool.Run([&](int t, int) {
      Vec a[8];
      for (int k = 0; k < 8; ++k) a[k] = set1(1.0f + k * 1e-7f);
      const Vec m = set1(0.9999999f), c = set1(1e-7f);
      for (int i = 0; i < kIters; ++i) {
        for (int k = 0; k < 8; ++k) a[k] = fma(a[k], m, c);
      }
      float lanes[8 * kLanes];
      std::memcpy(lanes, a, sizeof(a));
      sink[t] = std::accumulate(lanes, lanes + 8 * kLanes, 0.f);
    });
    const double flops = 2.0 * kLanes * 8 * kIters * pool.num_threads();
    runs.push_back(flops / SecondsSince(t0) / 1e9);
  }
  return *std::max_element(runs.begin(), runs.end());  // a peak: noise only lowers it
}

__attribute__((target("avx512f"))) double FmaPeakAvx512(ThreadPool& pool, int reps) {
  return FmaPeakWith<__m512>(
      pool, reps, [](float v) __attribute__((target("avx512f"))) { return _mm512_set1_ps(v); },
      [](__m512 a, __m512 b, __m512 c) __attribute__((target("avx512f"))) {
        return _mm512_fmadd_ps(a, b, c);
      });
}

double FmaPeakAvx2(ThreadPool& pool, int reps) {
  return FmaPeakWith<__m256>(
      pool, reps, [](float v) { return _mm256_set1_ps(v); },
      [](__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); });
}

// The peak of the vector width the matmul kernels run with (KVSERVE_ISA may cap it).
double MeasureFmaPeak(ThreadPool& pool, int reps) {
  return MatMulIsa().starts_with("avx512") ? FmaPeakAvx512(pool, reps) : FmaPeakAvx2(pool, reps);
}

// Peak int8 multiply-add throughput of all threads with register-resident operands (GMAC/s,
// one MAC = one int8 x int8 product summed), for each integer instruction the kernels may use:
// AVX2's maddubs (+ madd + add: 32 MACs per three instructions), AVX-512 VNNI's dpbusd (64 per
// instruction) and AMX's tdpbssd (16 x 16 x 64 per instruction, four independent tiles).
template <typename Body>
double Int8PeakWith(ThreadPool& pool, int reps, double macs_per_thread, Body body) {
  std::vector<double> runs;
  std::vector<int64_t> sink(pool.num_threads());
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = Clock::now();
    pool.Run([&](int t, int) { sink[t] = body(); });
    if (r > 0) runs.push_back(macs_per_thread * pool.num_threads() / SecondsSince(t0) / 1e9);
  }
  return *std::max_element(runs.begin(), runs.end());  // a peak: noise only lowers it
}

constexpr int kInt8Iters = 5'000'000;

double MaddubsPeak(ThreadPool& pool, int reps) {
  return Int8PeakWith(pool, reps, 32.0 * 8 * kInt8Iters, [] {
    __m256i acc[8];
    for (int k = 0; k < 8; ++k) acc[k] = _mm256_set1_epi32(k);
    const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
    for (int i = 0; i < kInt8Iters; ++i) {
      for (int k = 0; k < 8; ++k) {
        acc[k] = _mm256_add_epi32(acc[k], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
      }
      __asm__ volatile("" : "+x"(acc[0]), "+x"(acc[1]), "+x"(acc[2]), "+x"(acc[3]));
    }
    int64_t sum = 0;
    for (int k = 0; k < 8; ++k) sum += _mm256_extract_epi32(acc[k], 0);
    return sum;
  });
}

__attribute__((target("avx512f,avx512vnni"))) int64_t VnniPeakBody() {
  __m512i acc[10];
  for (int k = 0; k < 10; ++k) acc[k] = _mm512_set1_epi32(k);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int i = 0; i < kInt8Iters; ++i) {
    for (int k = 0; k < 10; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], a, b);
  }
  alignas(64) int32_t lanes[16];
  int64_t sum = 0;
  for (int k = 0; k < 10; ++k) {
    _mm512_store_si512(lanes, acc[k]);
    sum += lanes[0];
  }
  return sum;
}

double VnniPeak(ThreadPool& pool, int reps) {
  return Int8PeakWith(pool, reps, 64.0 * 10 * kInt8Iters, &VnniPeakBody);
}

constexpr int kAmxIters = 1'000'000;

struct alignas(64) AmxPeakConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// Tiles 0-3 accumulate A (4, 5) x B (6, 7); the four products per step are independent.
__attribute__((target("amx-tile,amx-int8"))) int64_t AmxPeakBody() {
  static const AmxPeakConfig config;
  alignas(64) int8_t ab[16 * 64];
  std::memset(ab, 1, sizeof ab);
  alignas(64) int32_t c[16 * 16];
  _tile_loadconfig(&config);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, ab, 64);
  _tile_loadd(5, ab, 64);
  _tile_loadd(6, ab, 64);
  _tile_loadd(7, ab, 64);
  for (int i = 0; i < kAmxIters; ++i) {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  _tile_stored(0, c, 64);
  _tile_release();
  return c[0];
}

// GMAC/s of each int8 instruction this CPU has and the kernels may use (KVSERVE_ISA caps them),
// best first.
std::vector<std::pair<std::string, double>> MeasureInt8Peaks(ThreadPool& pool, int reps) {
  std::vector<std::pair<std::string, double>> out;
  const std::string_view isa = MatMulIsa();
  if (isa == "avx512-amx") {
    out.emplace_back("AMX", Int8PeakWith(pool, reps, 4.0 * 16 * 16 * 64 * kAmxIters, &AmxPeakBody));
  }
  if (isa.starts_with("avx512")) out.emplace_back("VNNI", VnniPeak(pool, reps));
  if (isa != "generic") out.emplace_back("maddubs", MaddubsPeak(pool, reps));
  return out;
}

struct Bench {
  Model* model;
  ThreadPool* pool;
  std::unique_ptr<KvStorage> kv;
  std::vector<BlockId> blocks;  // one sequence's table per batch slot, concatenated
  int blocks_per_seq = 0;

  std::span<const BlockId> Table(int seq) const {
    return std::span<const BlockId>(blocks).subspan(static_cast<size_t>(seq) * blocks_per_seq,
                                                    blocks_per_seq);
  }
};

std::vector<TokenId> Tokens(int n, int vocab, int salt) {
  std::vector<TokenId> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<TokenId>((i * 7919 + salt * 104729 + 3) % vocab);
  return t;
}

// Decode steps of each batched-decode run (after 128 cached tokens), and of each short- and
// long-context decode run.
constexpr int kBatchedSteps = 16;
constexpr int kLongContextSteps = 32;

// Feeds `n` tokens of sequence `seq` starting at slot `start`, in batches of at most max_batch.
void Prefill(Bench& b, int seq, int start, int n, std::vector<float>& logits) {
  const int vocab = b.model->config().vocab;
  const std::vector<TokenId> ids = Tokens(n, vocab, seq);
  for (int i = 0; i < n; i += b.model->max_batch_tokens()) {
    const int m = std::min(n - i, b.model->max_batch_tokens());
    ForwardBatch batch;
    batch.AddSequence(b.Table(seq), start + i, std::span<const TokenId>(ids).subspan(i, m), true);
    KV_CHECK(b.model->Forward(batch, *b.kv, *b.pool, logits.data()).ok());
  }
}

// One decode step for each of `num_seqs` sequences holding `context` tokens; tokens/s.
double DecodeSteps(Bench& b, int num_seqs, int context, int steps, std::vector<float>& logits) {
  const auto t0 = Clock::now();
  for (int s = 0; s < steps; ++s) {
    ForwardBatch batch;
    std::vector<TokenId> tok(num_seqs);
    for (int q = 0; q < num_seqs; ++q) {
      tok[q] = static_cast<TokenId>((s * 31 + q) % b.model->config().vocab);
      batch.AddSequence(b.Table(q), context + s, std::span<const TokenId>(&tok[q], 1), true);
    }
    KV_CHECK(b.model->Forward(batch, *b.kv, *b.pool, logits.data()).ok());
  }
  return static_cast<double>(num_seqs) * steps / SecondsSince(t0);
}

// Attention alone for one decode token of sequence 0 over `context` cached slots, every layer and
// KV head, the KV heads of a layer spread over the pool as Model::Attend does for one decode
// token; seconds per step (median of `steps`).
// With `windows`, each layer attends as the model's does (sliding-window layers their window
// only); without, every layer attends the whole context.
double AttentionStep(Bench& b, int context, int steps, bool windows = true) {
  const ModelConfig& c = b.model->config();
  const KvLayout& l = b.kv->layout();
  // Query heads of the cache's head size: for MLA the absorbed queries over the latent.
  const int64_t q_dim = static_cast<int64_t>(c.num_heads) * c.head_dim;
  std::vector<float> q(static_cast<size_t>(q_dim)), out(static_cast<size_t>(q_dim));
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>((i * 37) % 17) / 17.f - 0.5f;
  const float scale = c.is_mla() ? c.mla.kq_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<double> runs;
  // Fewer KV heads than threads (MLA's one latent head): partitions on the threads, then the
  // merge, as Model::Attend splits a decode step.
  const int parts = AttentionPartitions(context);
  const bool split = l.num_kv_heads < b.pool->num_threads() && parts > 1 && AttentionCanSplit(c.head_dim);
  const size_t pf = AttentionPartialFloats(c.head_dim);
  std::vector<float> partials(static_cast<size_t>(l.num_kv_heads) * parts * c.group() * pf);
  int layer_window = 0;
  auto tile_of = [&](int h) {
    AttentionTile tile;
    tile.window = layer_window;
    const int64_t head0 = static_cast<int64_t>(h) * c.group() * c.head_dim;
    tile.q = q.data() + head0;
    tile.q_stride = q_dim;
    tile.out = out.data() + head0;
    tile.out_stride = q_dim;
    tile.group = c.group();
    tile.kv_head = h;
    tile.first_slots = context;
    tile.block_table = b.Table(0);
    return tile;
  };
  for (int s = 0; s < steps; ++s) {
    const auto t0 = Clock::now();
    for (int layer = 0; layer < l.num_layers; ++layer) {
      const PagedKvLayerView v = KvLayerView(*b.kv, layer);
      layer_window = windows ? c.LayerWindow(layer) : 0;
      const int p0 = AttentionTileFirstPartition(tile_of(0));
      if (split && parts - p0 > 1) {
        const int64_t rows = c.group();
        const int np = parts - p0;
        b.pool->ForEach(static_cast<int64_t>(l.num_kv_heads) * np, [&](int64_t i) {
          const int h = static_cast<int>(i / np), p = p0 + static_cast<int>(i % np);
          AttendTilePartition(tile_of(h), v, scale, p,
                              partials.data() + (static_cast<size_t>(h) * parts + p) * rows * pf);
        });
        for (int h = 0; h < l.num_kv_heads; ++h) {
          const AttentionTile tile = tile_of(h);
          for (int64_t r = 0; r < rows; ++r) {
            MergeAttentionPartials(
                partials.data() + ((static_cast<size_t>(h) * parts + p0) * rows + r) * pf, np,
                rows * static_cast<int64_t>(pf), c.head_dim, tile.out + r * c.head_dim);
          }
        }
        continue;
      }
      b.pool->Run([&](int t, int nt) {
        for (int h = t; h < l.num_kv_heads; h += nt) AttendTile(tile_of(h), v, scale);
      });
    }
    runs.push_back(SecondsSince(t0));
  }
  return Median(runs);
}

// Matmul FLOPs of a prefill of n tokens (as Prefill feeds it): every token meets every matrix
// but the output one, which makes logits for the last token of each batch only.
double PrefillMatmulFlops(const Model& m, int n) {
  const int batches = (n + m.max_batch_tokens() - 1) / m.max_batch_tokens();
  return 2.0 * (m.active_params_per_token() - m.output_params()) * n +
         2.0 * m.output_params() * batches;
}

struct Options {
  std::vector<std::string> models;
  std::vector<std::string> matmul_types;  // --matmul: weight types timed alone
  int64_t matmul_rows = 2880, matmul_cols = 2880;
  std::vector<int> matmul_tokens = {1, 512};
  int matmul_stream_mb = 768;  // distinct weights a 1-token run streams through
  int threads = 0, reps = 3, pp = 512, tg = 128, long_context = 4096;
  KvDtype k_dtype = KvDtype::kF16, v_dtype = KvDtype::kF16;
  MlaForm mla_form = MlaForm::kAbsorbed;
  std::vector<int> batches = {1, 2, 4, 8, 16};
  std::vector<int> pp_at;  // cached contexts for prefill-at-context runs
  bool pack = true;        // ModelOptions::pack_weights (--no-pack: the file's layout)
};

// Resident set size of this process (bytes), from /proc/self/statm.
double ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) : 0;
}

void RunModel(const std::string& path, const Options& o, ThreadPool& pool, double bandwidth,
              double peak, double int8_peak) {
  const double rss_before = ResidentBytes();
  const auto load_start = Clock::now();
  auto file = GgufFile::Open(path, /*populate=*/true);
  if (!file.ok()) {
    fmt::print(stderr, "{}: {}\n", path, file.status().ToString());
    return;
  }
  const int max_seqs = o.batches.empty() ? 1 : *std::max_element(o.batches.begin(), o.batches.end());
  const int max_batch = std::max(o.pp, max_seqs);
  // Every run's last position fits: pp + tg from empty, the batched steps after 128 tokens, the
  // long-context steps after --long-context, and each --pp-at prefill.
  int ctx = std::max({o.pp + o.tg, 128 + kBatchedSteps, o.long_context + kLongContextSteps});
  for (int at : o.pp_at) ctx = std::max(ctx, at + o.pp);
  ctx += 16;
  // The context may exceed the model's trained one (synthetic models): speed only.
  ModelOptions options{max_batch, ctx, o.mla_form};
  options.pack_weights = o.pack;
  auto model = Model::Load(std::move(file).value(), options);
  if (!model.ok()) {
    fmt::print(stderr, "{}: {}\n", path, model.status().ToString());
    return;
  }
  const double load_seconds = SecondsSince(load_start);
  fmt::print("{}: loaded in {:.2f} s (mapped with MAP_POPULATE{}), resident {:.2f} GB more than "
             "before\n",
             path.substr(path.find_last_of('/') + 1), load_seconds,
             (*model)->packed_weight_bytes() > 0
                 ? fmt::format(", {:.2f} GB repacked", (*model)->packed_weight_bytes() / 1e9)
                 : std::string(", nothing repacked"),
             (ResidentBytes() - rss_before) / 1e9);
  Bench b{model->get(), &pool, nullptr, {}, 0};
  b.blocks_per_seq = (ctx + 15) / 16;
  const int num_blocks = b.blocks_per_seq * max_seqs;
  if (auto st = CheckKvDtype(o.k_dtype, (*model)->config().head_dim); !st.ok()) {
    fmt::print(stderr, "{}: {}\n", path, st.ToString());
    return;
  }
  if (auto st = CheckKvDtype(o.v_dtype, (*model)->config().head_dim); !st.ok()) {
    fmt::print(stderr, "{}: {}\n", path, st.ToString());
    return;
  }
  b.kv = std::make_unique<KvStorage>((*model)->MakeKvLayout(16, o.k_dtype, o.v_dtype), num_blocks);
  for (int i = 0; i < num_blocks; ++i) b.blocks.emplace_back(i);
  std::vector<float> logits(static_cast<size_t>(max_batch) * (*model)->config().vocab);

  std::vector<double> pp, tg;
  for (int r = 0; r < o.reps; ++r) {
    auto t0 = Clock::now();
    Prefill(b, 0, 0, o.pp, logits);
    pp.push_back(o.pp / SecondsSince(t0));
    // Generation from an empty context, as llama-bench's tg runs are.
    tg.push_back(DecodeSteps(b, 1, 0, o.tg, logits));
  }
  // The host's bandwidth varies over minutes (shared machines): probed again right after this
  // model's runs, the better of the two is the bound.
  bandwidth = std::max(bandwidth, MeasureBandwidth(pool, o.reps));
  const double weight_gb = (*model)->weight_bytes() / 1e9;
  const double read_gb = (*model)->decode_read_bytes() / 1e9;  // per decode step
  const double bound = bandwidth / read_gb;
  const double pp_med = Median(pp), tg_med = Median(tg);
  const double gflops = PrefillMatmulFlops(**model, o.pp) / o.pp * pp_med / 1e9;
  if (const ModelConfig& c = (*model)->config(); c.moe.num_experts > 0 || c.is_mla()) {
    fmt::print("{}: {:.3g}B active parameters per token{}{}\n", path.substr(path.find_last_of('/') + 1),
               (*model)->active_params_per_token() / 1e9,
               c.moe.num_experts > 0 ? fmt::format(", {} of {} experts", c.moe.num_used, c.moe.num_experts) : "",
               c.is_mla() ? fmt::format(", MLA {}", o.mla_form == MlaForm::kAbsorbed ? "absorbed" : "decompressed") : "");
  }
  fmt::print("{:<28} {:>6.2f} GB ({:.2f} read/token)  pp{} {:>7.1f} t/s ({:>6.1f} GFLOP/s, "
             "{:>4.1f}% of the f32 peak, {:>4.1f}% of the int8 peak)  tg{} {:>6.2f} t/s  bound "
             "{:>6.2f} t/s at {:.1f} GB/s ({:>4.1f}%)\n",
             path.substr(path.find_last_of('/') + 1), weight_gb, read_gb, o.pp, pp_med, gflops,
             100 * gflops / peak, int8_peak > 0 ? 100 * gflops / 2 / int8_peak : 0.0, o.tg,
             tg_med, bound, bandwidth, 100 * tg_med / bound);

  if (o.batches.empty() || o.long_context <= 0) return;  // pp/tg only
  // Batched decode: num_seqs sequences of 128 tokens, one step each for kBatchedSteps steps.
  std::string line = "    batched decode t/s:";
  std::string experts;
  double base = 0;
  for (int q = 0; q < max_seqs; ++q) Prefill(b, q, 0, 128, logits);
  for (int n : o.batches) {
    std::vector<double> runs;
    const MoeStats before = (*model)->moe_stats();
    for (int r = 0; r < o.reps; ++r) runs.push_back(DecodeSteps(b, n, 128, kBatchedSteps, logits));
    const double med = Median(runs);
    if (n == 1) base = med;
    line += fmt::format("  b{}={:.1f} ({:.2f}x)", n, med, base > 0 ? med / base : 0);
    // Mixture of experts: expert bytes one step read (each chosen expert once) against reading
    // every token's experts separately.
    const MoeStats& after = (*model)->moe_stats();
    if (const uint64_t steps = after.steps - before.steps; steps > 0) {
      experts += fmt::format("  b{}={:.0f} MB ({:.0f} MB ungrouped)", n,
                             (after.expert_bytes_read - before.expert_bytes_read) / 1e6 / steps,
                             (after.expert_bytes_ungrouped - before.expert_bytes_ungrouped) / 1e6 / steps);
    }
  }
  fmt::print("{}\n", line);
  if (!experts.empty()) fmt::print("    expert weights read per step:{}\n", experts);

  // Decode with a short and a long context already cached.
  Prefill(b, 0, 0, o.long_context, logits);
  std::vector<double> short_runs, long_runs;
  for (int r = 0; r < o.reps; ++r) {
    short_runs.push_back(DecodeSteps(b, 1, 128, kLongContextSteps, logits));
    long_runs.push_back(DecodeSteps(b, 1, o.long_context, kLongContextSteps, logits));
  }
  const double s = Median(short_runs), l = Median(long_runs);
  fmt::print("    decode at 128 cached: {:.2f} t/s, at {} cached: {:.2f} t/s ({:.1f}%)\n", s,
             o.long_context, l, 100 * l / s);
  const double attn = AttentionStep(b, o.long_context, std::max(5, 3 * o.reps));
  // The K/V bytes one decode step reads: each layer's visible slots (its window, if any).
  const ModelConfig& mc = (*model)->config();
  const KvLayout& kl = b.kv->layout();
  const double layer_bytes = static_cast<double>(kl.bytes_per_token()) / kl.num_layers;
  double kv_bytes = 0;
  for (int layer = 0; layer < mc.num_layers; ++layer) {
    const int w = mc.LayerWindow(layer);
    kv_bytes += layer_bytes * (w > 0 ? std::min(w, o.long_context) : o.long_context);
  }
  fmt::print(
      "    attention alone at {} cached ({}): {:.3f} ms per decode step, {:.1f} MB of KV "
      "at {:.1f} GB/s\n",
      o.long_context, KvCapacitySummary(kl, o.long_context / 16), attn * 1e3, kv_bytes / 1e6,
      kv_bytes / attn / 1e9);
  if (mc.has_windows()) {
    const double full = AttentionStep(b, o.long_context, std::max(5, 3 * o.reps), false);
    const double full_bytes = layer_bytes * mc.num_layers * o.long_context;
    fmt::print(
        "    the same without sliding windows (every layer the whole context): {:.3f} ms, "
        "{:.1f} MB of KV ({:.1f}x the windowed step)\n",
        full * 1e3, full_bytes / 1e6, full / attn);
  }

  // Prefill of --pp tokens (in batches of --pp) on top of a long cached context: attention over
  // many query rows and long K/V.
  for (int at : o.pp_at) {
    std::vector<double> runs;
    for (int r = 0; r < o.reps; ++r) {
      const auto t0 = Clock::now();
      Prefill(b, 0, at, o.pp, logits);
      runs.push_back(o.pp / SecondsSince(t0));
    }
    fmt::print("    prefill {} tokens at {} cached: {:.1f} t/s\n", o.pp, at, Median(runs));
  }
}

// Random weights of `type` written as blocks directly (quantizing gigabytes would take
// minutes): random values with a small scale. Q8_0 values stay in [-127, 127] as its quantizer
// writes them; F16 / BF16 elements are small finite values.
constexpr GgmlType kMatMulTypes[] = {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1,
                                     GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kMXFP4,
                                     GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K,
                                     GgmlType::kF16,  GgmlType::kBF16};

bool IsHalf(GgmlType t) { return t == GgmlType::kF16 || t == GgmlType::kBF16; }

// "Q8_0, Q4_0, ...": the names of kMatMulTypes, for the help and the errors.
std::string MatMulTypeNames() {
  std::string out;
  for (const GgmlType t : kMatMulTypes)
    out += fmt::format("{}{}", out.empty() ? "" : ", ", Traits(t).name);
  return out;
}

std::vector<uint8_t> RandomWeights(GgmlType type, int64_t rows, int64_t cols, uint64_t seed) {
  const size_t bytes = static_cast<size_t>(*RowBytes(type, cols)) * static_cast<size_t>(rows);
  std::vector<uint8_t> out(bytes);
  FillRandomBytes(out.data(), bytes, seed * 0x9e3779b97f4a7c15ull + 1);
  if (IsHalf(type)) {  // values in [-0.02, 0.02) from the drawn bits
    for (size_t b = 0; b < bytes; b += 2) {
      uint16_t bits;
      std::memcpy(&bits, &out[b], 2);
      const float v = (static_cast<float>(bits) / 65536.0f - 0.5f) * 0.04f;
      const uint16_t h = type == GgmlType::kF16 ? F32ToF16(v) : F32ToBF16(v);
      std::memcpy(&out[b], &h, 2);
    }
    return out;
  }
  const TypeTraits t = Traits(type);
  const uint16_t d = F32ToF16(0.01f);
  for (size_t b = 0; b < bytes; b += static_cast<size_t>(t.block_bytes)) {
    switch (type) {
      case GgmlType::kQ8_0:
        for (int k = 2; k < 34; ++k) out[b + k] = out[b + k] == 0x80 ? 0x81 : out[b + k];
        [[fallthrough]];
      case GgmlType::kQ4_0:
      case GgmlType::kQ5_0:  // d; the fifth bits and values as drawn
        std::memcpy(&out[b], &d, 2);
        break;
      case GgmlType::kQ4_1:  // d, m; the (fifth bits and) values as drawn
      case GgmlType::kQ5_1:
        std::memcpy(&out[b], &d, 2);
        std::memcpy(&out[b + 2], &d, 2);
        break;
      case GgmlType::kMXFP4:
        out[b] = static_cast<uint8_t>(116 + out[b] % 8);  // 2^-12 .. 2^-5
        break;
      case GgmlType::kQ4_K:  // d, dmin; the scales, mins, (fifth bits,) values as drawn
      case GgmlType::kQ5_K:
        std::memcpy(&out[b], &d, 2);
        std::memcpy(&out[b + 2], &d, 2);
        break;
      case GgmlType::kQ6_K:  // d last; the signed scales and values as drawn
        std::memcpy(&out[b + offsetof(BlockQ6_K, d)], &d, 2);
        break;
      default:
        KV_CHECK(false, "RandomWeights: {} is not one of {}", t.name, MatMulTypeNames());
    }
  }
  return out;
}

// Each --matmul type alone on a rows x cols matrix: decode (1 token) streams enough distinct
// matrices to leave the caches (weights read per second against the measured bandwidth);
// larger batches run one matrix repeatedly (multiply-adds per second; F16 / BF16 in flops against
// the f32 FMA peak).
void RunMatMuls(const Options& o, ThreadPool& pool, double bandwidth, double int8_peak,
                double fma_peak) {
  fmt::print("matmul {} x {} (rows x cols), kernels {}, weights {}\n", o.matmul_rows,
             o.matmul_cols, MatMulIsa(), o.pack ? "packed where the kernels take it" : "as stored");
  for (const std::string& name : o.matmul_types) {
    const std::optional<GgmlType> type = ParseGgmlType(name);
    const size_t row_bytes = static_cast<size_t>(*RowBytes(*type, o.matmul_cols));
    const size_t matrix_bytes = row_bytes * static_cast<size_t>(o.matmul_rows);
    const int copies = static_cast<int>(
        std::max<size_t>(1, (static_cast<size_t>(o.matmul_stream_mb) << 20) / matrix_bytes));
    std::vector<std::vector<uint8_t>> weights;
    std::vector<AlignedBuffer<uint8_t>> packed;  // as the model repacks them (PackWeights)
    for (int c = 0; c < copies; ++c) {
      weights.push_back(RandomWeights(*type, o.matmul_rows, o.matmul_cols, c + 1));
      if (o.pack) {
        packed.push_back(PackWeights(WeightMatrix{*type, weights.back().data(), o.matmul_rows,
                                                  o.matmul_cols, row_bytes}));
      }
    }
    std::string line = fmt::format("  {:<6} {:.2f} MB/matrix", name, matrix_bytes / 1e6);
    for (const int tokens : o.matmul_tokens) {
      std::vector<float> x(static_cast<size_t>(tokens * o.matmul_cols));
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
      std::vector<float> y(static_cast<size_t>(tokens * o.matmul_rows));
      // Prefill-sized calls: about 2e10 multiply-adds per run, at most 1000 calls.
      const double macs = static_cast<double>(o.matmul_rows) * o.matmul_cols * tokens;
      const int calls =
          tokens == 1 ? copies : static_cast<int>(std::clamp(2e10 / macs, 3.0, 1000.0));
      std::vector<double> runs;
      for (int r = 0; r < o.reps + 1; ++r) {
        const auto t0 = Clock::now();
        for (int c = 0; c < calls; ++c) {
          const size_t m = tokens == 1 ? static_cast<size_t>(c) : 0;
          WeightMatrix w{*type, weights[m].data(), o.matmul_rows, o.matmul_cols, row_bytes};
          if (m < packed.size() && packed[m].size() > 0) w.packed = packed[m].data();
          MatMul(w, x.data(), tokens, y.data(), pool);
        }
        if (r > 0) runs.push_back(SecondsSince(t0) / calls);  // the first run warms up
      }
      const double sec = Median(runs);
      const double gmac = static_cast<double>(o.matmul_rows) * o.matmul_cols * tokens / sec / 1e9;
      if (tokens == 1) {
        const double gbs = matrix_bytes / sec / 1e9;
        line += fmt::format("  t1 {:.1f} us {:.1f} GB/s ({:.0f}% of bandwidth)", sec * 1e6, gbs,
                            100 * gbs / bandwidth);
      } else if (IsHalf(*type)) {  // float multiply-adds: 2 flops each
        line += fmt::format("  t{} {:.2f} ms {:.1f} GFLOP/s ({:.0f}% of the f32 FMA peak)", tokens,
                            sec * 1e3, 2 * gmac, fma_peak > 0 ? 200 * gmac / fma_peak : 0.0);
      } else {
        line += fmt::format("  t{} {:.2f} ms {:.1f} GMAC/s ({:.0f}% of the int8 peak)", tokens,
                            sec * 1e3, gmac, int8_peak > 0 ? 100 * gmac / int8_peak : 0.0);
      }
    }
    fmt::print("{}\n", line);
  }
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  using namespace kvserve;
  Options o;
  CLI::App app{"kvserve_model_bench: forward-pass speed against measured machine limits"};
  app.add_option("--model", o.models, "GGUF model(s)");
  app.add_option(
         "--matmul", o.matmul_types,
         "Weight types to time alone in a matmul (" + MatMulTypeNames() + "), e.g. Q4_0,Q4_K")
      ->delimiter(',');
  app.add_option("--matmul-rows", o.matmul_rows, "Rows (output features) of the --matmul weight");
  app.add_option("--matmul-cols", o.matmul_cols, "Columns (input features), a multiple of 32");
  app.add_option("--matmul-tokens", o.matmul_tokens, "Tokens per --matmul call, e.g. 1,512")
      ->delimiter(',');
  app.add_option("--matmul-stream-mb", o.matmul_stream_mb,
                 "MB of distinct weights a 1-token --matmul run streams (beyond the caches)");
  app.add_option("--threads", o.threads, "Threads (default: all)");
  app.add_option("--reps", o.reps, "Runs per measurement (median reported)");
  app.add_option("--pp", o.pp, "Prompt tokens per prefill");
  app.add_option("--tg", o.tg, "Generated tokens per decode run");
  app.add_option("--batches", o.batches, "Batch sizes for batched decode")->delimiter(',');
  app.add_option("--long-context", o.long_context,
                 "Cached tokens for the long-context decode (0: skip batched and long-context runs)");
  app.add_option("--pp-at", o.pp_at,
                 "Cached contexts (<= --long-context) at which to time a --pp prefill, e.g. 1024,2048")
      ->delimiter(',');
  std::string cache_type_k = "f16", cache_type_v = "f16";
  app.add_option("--cache-type-k", cache_type_k, "KV cache type of keys (" + KvDtypeNames() + ")");
  app.add_option("--cache-type-v", cache_type_v, "KV cache type of values");
  app.add_option_function<std::string>(
         "--mla-attention",
         [&o](const std::string& v) {
           o.mla_form = v == "decompressed" ? MlaForm::kDecompressed : MlaForm::kAbsorbed;
         },
         "deepseek2: absorbed (default) or decompressed")
      ->check(CLI::IsMember({"absorbed", "decompressed"}));
  app.add_flag("!--no-pack", o.pack,
               "Keep the weights in the file's layout (no repacking at load; for A/B runs)");
  CLI11_PARSE(app, argc, argv);
  if (o.models.empty() && o.matmul_types.empty()) {
    fmt::print(stderr, "error: give --model and/or --matmul\n");
    return 2;
  }
  for (const std::string& name : o.matmul_types) {
    const std::optional<GgmlType> t = ParseGgmlType(name);
    if (!t ||
        std::find(std::begin(kMatMulTypes), std::end(kMatMulTypes), *t) == std::end(kMatMulTypes)) {
      fmt::print(stderr, "error: --matmul takes {}, not {}\n", MatMulTypeNames(), name);
      return 2;
    }
    if (const int64_t block = Traits(*t).block_elems; o.matmul_cols % block != 0) {
      fmt::print(stderr, "error: --matmul {} needs --matmul-cols a multiple of {}\n", name, block);
      return 2;
    }
  }
  if (o.matmul_cols % 32 != 0 || o.matmul_rows <= 0 || o.matmul_cols <= 0) {
    fmt::print(stderr, "error: --matmul-cols must be a positive multiple of 32\n");
    return 2;
  }
  for (auto [name, flag, out] : {std::tuple{&cache_type_k, "--cache-type-k", &o.k_dtype},
                                 std::tuple{&cache_type_v, "--cache-type-v", &o.v_dtype}}) {
    auto d = ParseKvDtypeOrError(*name, flag);
    if (!d.ok()) {
      fmt::print(stderr, "error: {}\n", d.status().message());
      return 2;
    }
    *out = *d;
  }
  ThreadPool pool(o.threads > 0 ? o.threads : ThreadPool::DefaultThreads());
  const double bw = MeasureBandwidth(pool, o.reps);
  const double peak = MeasureFmaPeak(pool, o.reps);
  const auto int8 = MeasureInt8Peaks(pool, o.reps);
  std::string peaks;
  for (const auto& [name, gmacs] : int8) peaks += fmt::format("  {} {:.1f}", name, gmacs);
  fmt::print("threads {}  kernels {}  memory bandwidth {:.1f} GB/s  f32 FMA peak {:.1f} GFLOP/s  "
             "int8 peaks (GMAC/s):{}\n",
             pool.num_threads(), MatMulIsa(), bw, peak, peaks.empty() ? " none" : peaks);
  const double int8_peak = int8.empty() ? 0 : int8.front().second;
  if (!o.matmul_types.empty()) RunMatMuls(o, pool, bw, int8_peak, peak);
  for (const std::string& m : o.models) RunModel(m, o, pool, bw, peak, int8_peak);
  return 0;
}
