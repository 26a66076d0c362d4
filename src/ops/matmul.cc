#include "ops/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ops/act_quant.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_packed.h"
#include "ops/simd.h"

namespace kvserve {
namespace {

using simd::kLanes;
using simd::Load;
using simd::VecF;

constexpr int64_t kRowTile = 16;   // rows dequantized together
constexpr int64_t kMicroRows = 4;  // micro-kernel: 4 rows x 4 tokens
constexpr int64_t kMicroTokens = 4;

kernels::KernelTable MakeTable(std::string_view isa) {
  kernels::KernelTable t;
  if (isa == "generic") return t;
  // Every AVX-512 CPU has AVX2: the AVX2 table is the base, and the AVX-512 (then AMX) kernels
  // replace the entries they have (Q5_K keeps the AVX2 panel there).
  kernels::InitAvx2(t);
  if (isa != "avx2" && kernels::InitAvx512(t) && isa != "avx512") kernels::InitAmx(t);
  return t;
}

kernels::KernelTable& Table() {
  static kernels::KernelTable table = [] {
    const char* env = std::getenv("KVSERVE_ISA");
    return MakeTable(env != nullptr ? env : "best");
  }();
  return table;
}

template <typename T>
T* ScratchOf(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

float* ThreadScratch(size_t n) {
  thread_local std::vector<float> scratch;
  return ScratchOf(scratch, n);
}

// y[t, r0 + i] for i < nr, t < nt, from dequantized rows w (stride cols) and tokens x.
// NOTE: every output is summed in the same order (one vector accumulator over the columns, then
// its lanes, then the scalar tail) whatever nr and nt are, so a token's result never depends on
// which other tokens share the batch: a decode step alone, a decode batched with other requests
// and a prefill of the same tokens produce bit-identical K/V. Prefix caching relies on it.
// NR and NT are the tile's rows and tokens where they are known at compile time (then its
// accumulators live in registers), or 0 where nr and nt say them.
template <int64_t NR, int64_t NT>
void MicroKernelT(const float* w, const float* x, int64_t cols, int64_t nr_arg, int64_t nt_arg,
                  float* y, int64_t y_stride) {
  const int64_t nr = NR > 0 ? NR : nr_arg;
  const int64_t nt = NT > 0 ? NT : nt_arg;
  VecF acc[kMicroTokens][kMicroRows] = {};
  int64_t c = 0;
  for (; c + kLanes <= cols; c += kLanes) {
    VecF wv[kMicroRows];
    for (int64_t i = 0; i < nr; ++i) wv[i] = Load(w + i * cols + c);
    for (int64_t t = 0; t < nt; ++t) {
      const VecF xv = Load(x + t * cols + c);
      for (int64_t i = 0; i < nr; ++i) acc[t][i] += wv[i] * xv;
    }
  }
  for (int64_t t = 0; t < nt; ++t) {
    for (int64_t i = 0; i < nr; ++i) {
      float s = simd::Sum(acc[t][i]);
      for (int64_t k = c; k < cols; ++k) s += w[i * cols + k] * x[t * cols + k];
      y[t * y_stride + i] = s;
    }
  }
}

void MicroKernel(const float* w, const float* x, int64_t cols, int64_t nr, int64_t nt, float* y,
                 int64_t y_stride) {
  static_assert(kMicroTokens == 4);
  if (nr != kMicroRows) return MicroKernelT<0, 0>(w, x, cols, nr, nt, y, y_stride);
  switch (nt) {
    case 1:
      return MicroKernelT<kMicroRows, 1>(w, x, cols, nr, nt, y, y_stride);
    case 2:
      return MicroKernelT<kMicroRows, 2>(w, x, cols, nr, nt, y, y_stride);
    case 3:
      return MicroKernelT<kMicroRows, 3>(w, x, cols, nr, nt, y, y_stride);
    default:
      return MicroKernelT<kMicroRows, kMicroTokens>(w, x, cols, nr, nt, y, y_stride);
  }
}

void MatMulRows(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y, int64_t r0,
                int64_t r1) {
  float* tile = ThreadScratch(static_cast<size_t>(kRowTile * w.cols));
  for (int64_t rt = r0; rt < r1; rt += kRowTile) {
    const int64_t nrows = std::min(kRowTile, r1 - rt);
    const float* rows;
    if (w.type == GgmlType::kF32) {
      rows = reinterpret_cast<const float*>(w.row(rt));
    } else {
      for (int64_t i = 0; i < nrows; ++i) DequantizeWeightRow(w, rt + i, tile + i * w.cols);
      rows = tile;
    }
    for (int64_t t = 0; t < num_tokens; t += kMicroTokens) {
      const int64_t nt = std::min(kMicroTokens, num_tokens - t);
      for (int64_t i = 0; i < nrows; i += kMicroRows) {
        const int64_t nr = std::min(kMicroRows, nrows - i);
        MicroKernel(rows + i * w.cols, x + t * w.cols, w.cols, nr, nt, y + t * w.rows + rt + i,
                    w.rows);
      }
    }
  }
}

}  // namespace

std::string_view MatMulIsa() { return Table().isa; }

void QuantizeActQ8_0ForIsa(const float* x, int64_t num_tokens, ActQ8_0& out) {
  Table().quantize_q8_0(x, num_tokens, out);
}

void QuantizeActQ8KForIsa(const float* x, int64_t num_tokens, ActQ8K& out) {
  Table().quantize_q8k(x, num_tokens, out);
}

bool SetMatMulIsa(std::string_view isa) {
  if (isa != "generic" && isa != "avx2" && isa != "avx512" && isa != "amx" && isa != "best") {
    return false;
  }
  kernels::KernelTable t = MakeTable(isa);
  if (isa == "avx512" && std::string_view(t.isa) != "avx512-vnni") return false;
  if (isa == "amx" && std::string_view(t.isa) != "avx512-amx") return false;
  if (isa == "avx2" && std::string_view(t.isa) != "avx2") return false;
  Table() = t;
  return true;
}

void DequantizeWeightRow(const WeightMatrix& w, int64_t r, float* out) {
  if (w.type == GgmlType::kF16 && Table().f16_to_f32 != nullptr) {
    Table().f16_to_f32(reinterpret_cast<const uint16_t*>(w.row(r)), out, w.cols);
    return;
  }
  DequantizeRow(w.type, w.row(r), out, w.cols);
}

namespace {

// Integer paths: quantize the activations once, then each thread takes a share of the rows.
// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and MXFP4 weights (32-value blocks) share the activations' Q8_0
// quantization, in per-thread scratch kept between calls, with what a panel reads beside it: the
// paired layout (Q8_0's own panel) or the block sums (the packed panels, Q4_1, Q5_1).
// `tile_offset` (> 0, with `sums`): also the tile-interleaved d and -offset * sums of the packed
// tiles (ActQ8_0::tile_d, tile_osum).
ActQ8_0 QuantizeForPanels(const WeightMatrix& w, const float* x, int64_t num_tokens, bool paired,
                          bool sums, ThreadPool& pool, int32_t tile_offset = 0) {
  const kernels::KernelTable& k = Table();
  const int64_t nb = w.cols / 32;
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d;
  thread_local std::vector<uint8_t> pair_q;
  thread_local std::vector<float> pair_d;
  thread_local std::vector<int32_t> block_sums, tile_osum;
  thread_local std::vector<float> tile_d;
  ActQ8_0 act{ScratchOf(q, num_tokens * w.cols), ScratchOf(d, num_tokens * nb), w.cols};
  if (paired) {
    const int64_t pairs = (nb + 1) / 2;
    act.pair_q = ScratchOf(pair_q, num_tokens * pairs * 64);
    act.pair_d = ScratchOf(pair_d, num_tokens * pairs * 16);
  }
  if (sums) act.sum = ScratchOf(block_sums, num_tokens * nb);
  const bool tiled = sums && tile_offset > 0;
  if (tiled) {
    const int64_t slots = (num_tokens + kActTileTokens - 1) / kActTileTokens * kActTileTokens * nb;
    act.tile_d = ScratchOf(tile_d, slots);
    act.tile_osum = ScratchOf(tile_osum, slots);
  }
  pool.ParallelFor(num_tokens, [&](int64_t t0, int64_t t1) {
    ActQ8_0 part{act.q + t0 * w.cols, act.d + t0 * nb, w.cols};
    k.quantize_q8_0(x + t0 * w.cols, t1 - t0, part);
    if (paired) k.q8_0_prepare(act, t0, t1);
    if (sums) SumActQ8_0(act, t0, t1);
    if (tiled) TileActQ8_0(act, t0, t1, tile_offset);
  });
  return act;
}

// `sums`: the panel reads the activations' block sums (Q4_1, Q5_1: their min terms).
bool MatMulQ8_0(const WeightMatrix& w, kernels::Q8_0Panel panel, const float* x, int64_t num_tokens,
                float* y, ThreadPool& pool, bool sums = false) {
  const kernels::KernelTable& k = Table();
  if (panel == nullptr || w.cols % 32 != 0) return false;
  const bool paired = panel == k.q8_0 && k.q8_0_prepare != nullptr &&
                      num_tokens >= k.q8_0_prepare_min_tokens &&
                      num_tokens <= k.q8_0_prepare_max_tokens;
  const ActQ8_0 act = QuantizeForPanels(w, x, num_tokens, paired, sums, pool);
  const kernels::PanelArgs args{&w, num_tokens, y};
  pool.ParallelFor(
      w.rows, [&](int64_t r0, int64_t r1) { panel(args, act, r0, r1); }, 4);
  return true;
}

// Packed weights (ops/matmul_packed.h): whole 16-token tiles to the tile kernel where there is
// one (AMX, Q8_0), every other token to `panel`; both sum each (row, token) the same way.
bool MatMulPacked(const WeightMatrix& w, kernels::Q8_0Panel panel, kernels::Q8_0Panel tiles,
                  const float* x, int64_t num_tokens, float* y, ThreadPool& pool) {
  if (w.packed == nullptr || panel == nullptr || w.cols % 32 != 0) return false;
  const int64_t nb = w.cols / 32;
  const ActQ8_0 act = QuantizeForPanels(w, x, num_tokens, /*paired=*/false, /*sums=*/true, pool,
                                        packed::OffsetOf(w.type));
  const int64_t tiled = tiles != nullptr ? num_tokens / packed::kGroupRows * packed::kGroupRows : 0;
  ActQ8_0 rest{act.q + tiled * w.cols, act.d + tiled * nb, w.cols};
  rest.sum = act.sum + tiled * nb;
  static_assert(packed::kGroupRows % kActTileTokens == 0, "the rest starts at a whole tile");
  rest.tile_d = act.tile_d + tiled * nb;
  rest.tile_osum = act.tile_osum + tiled * nb;
  pool.ParallelFor(
      w.rows,
      [&](int64_t r0, int64_t r1) {
        if (tiled > 0) tiles({&w, tiled, y}, act, r0, r1);
        if (num_tokens > tiled) panel({&w, num_tokens - tiled, y + tiled * w.rows}, rest, r0, r1);
      },
      packed::kGroupRows);
  return true;
}

// K-quants: `packed` is the panel over w.packed (Q8KPanel's packed kinds), which also reads
// the activations' sum32_pairs and takes rows in whole groups.
bool MatMulQ8K(const WeightMatrix& w, kernels::Q8KPanel panel, bool packed, const float* x,
               int64_t num_tokens, float* y, ThreadPool& pool) {
  if (panel == nullptr || w.cols % 256 != 0 || (packed && w.packed == nullptr)) return false;
  const int64_t nsb = w.cols / 256;
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d;
  thread_local std::vector<int16_t> bsum;
  thread_local std::vector<int32_t> pairs;
  thread_local std::vector<uint8_t> unsigned_q;
  ActQ8K act{ScratchOf(q, num_tokens * w.cols), ScratchOf(d, num_tokens * nsb),
             ScratchOf(bsum, num_tokens * nsb * 16), w.cols};
  if (packed) act.sum32_pairs = ScratchOf(pairs, num_tokens * nsb * 4);
  // Q6_K's pair tiles multiply signed weights by unsigned activations.
  const bool flip = packed && w.type == GgmlType::kQ6_K && num_tokens >= packed::kKPairChunk;
  if (flip) act.qu = ScratchOf(unsigned_q, num_tokens * w.cols);
  pool.ParallelFor(num_tokens, [&](int64_t t0, int64_t t1) {
    ActQ8K part{act.q + t0 * w.cols, act.d + t0 * nsb, act.bsum + t0 * nsb * 16, w.cols};
    if (flip) part.qu = act.qu + t0 * w.cols;
    Table().quantize_q8k(x + t0 * w.cols, t1 - t0, part);
    if (packed) PairSumsActQ8K(act, t0, t1);
  });
  const kernels::PanelArgs args{&w, num_tokens, y};
  pool.ParallelFor(
      w.rows, [&](int64_t r0, int64_t r1) { panel(args, act, r0, r1); },
      packed ? packed::kGroupRows : 4);
  return true;
}

// F16 / BF16: float activations straight into the kernels (no rounding), rows split over threads.
bool MatMulHalf(const WeightMatrix& w, kernels::HalfPanel panel, const float* x,
                int64_t num_tokens, float* y, ThreadPool& pool) {
  if (panel == nullptr) return false;
  const kernels::PanelArgs args{&w, num_tokens, y};
  pool.ParallelFor(w.rows, [&](int64_t r0, int64_t r1) { panel(args, x, r0, r1); }, kRowTile);
  return true;
}

}  // namespace

void MatMul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y, ThreadPool& pool) {
  switch (w.type) {
    case GgmlType::kQ8_0:
      if (MatMulPacked(w, Table().q8_0_packed, Table().q8_0_packed_tiles, x, num_tokens, y, pool)) {
        return;
      }
      if (MatMulQ8_0(w, Table().q8_0, x, num_tokens, y, pool)) return;
      break;
    case GgmlType::kQ4_0:
      if (MatMulPacked(w, Table().q4_0_packed, nullptr, x, num_tokens, y, pool)) return;
      if (MatMulQ8_0(w, Table().q4_0, x, num_tokens, y, pool)) return;
      break;
    case GgmlType::kQ5_0:
      if (MatMulQ8_0(w, Table().q5_0, x, num_tokens, y, pool)) return;
      break;
    case GgmlType::kQ4_1:
      if (MatMulQ8_0(w, Table().q4_1, x, num_tokens, y, pool, /*sums=*/true)) return;
      break;
    case GgmlType::kQ5_1:
      if (MatMulQ8_0(w, Table().q5_1, x, num_tokens, y, pool, /*sums=*/true)) return;
      break;
    case GgmlType::kMXFP4:
      if (MatMulPacked(w, Table().mxfp4_packed, nullptr, x, num_tokens, y, pool)) return;
      if (MatMulQ8_0(w, Table().mxfp4, x, num_tokens, y, pool)) return;
      break;
    case GgmlType::kQ4_K:
      if (MatMulQ8K(w, Table().q4_k_packed, true, x, num_tokens, y, pool)) return;
      if (MatMulQ8K(w, Table().q4_k, false, x, num_tokens, y, pool)) return;
      break;
    case GgmlType::kQ5_K:
      if (MatMulQ8K(w, Table().q5_k_packed, true, x, num_tokens, y, pool)) return;
      if (MatMulQ8K(w, Table().q5_k, false, x, num_tokens, y, pool)) return;
      break;
    case GgmlType::kQ6_K:
      if (MatMulQ8K(w, Table().q6_k_packed, true, x, num_tokens, y, pool)) return;
      if (MatMulQ8K(w, Table().q6_k, false, x, num_tokens, y, pool)) return;
      break;
    case GgmlType::kF16:
      if (MatMulHalf(w, Table().f16, x, num_tokens, y, pool)) return;
      break;
    case GgmlType::kBF16:
      if (MatMulHalf(w, Table().bf16, x, num_tokens, y, pool)) return;
      break;
    default:
      break;
  }
  pool.ParallelFor(
      w.rows, [&](int64_t r0, int64_t r1) { MatMulRows(w, x, num_tokens, y, r0, r1); }, kRowTile);
}

size_t PackedWeightBytes(const WeightMatrix& w) {
  if (w.cols % 32 != 0 || w.rows <= 0) return 0;
  const auto groups = static_cast<size_t>(packed::Groups(w.rows));
  if (w.type == GgmlType::kQ8_0 && Table().q8_0_packed != nullptr) {
    return groups * packed::GroupBytes<packed::Q8_0>(w.cols);
  }
  if (w.type == GgmlType::kQ4_0 && Table().q4_0_packed != nullptr) {
    return groups * packed::GroupBytes<packed::Q4_0>(w.cols);
  }
  if (w.type == GgmlType::kMXFP4 && Table().mxfp4_packed != nullptr) {
    return groups * packed::GroupBytes<packed::MXFP4>(w.cols);
  }
  if (w.cols % 256 != 0) return 0;
  if (w.type == GgmlType::kQ4_K && Table().q4_k_packed != nullptr) {
    return groups * packed::GroupBytes<packed::Q4K>(w.cols);
  }
  if (w.type == GgmlType::kQ5_K && Table().q5_k_packed != nullptr) {
    return groups * packed::GroupBytes<packed::Q5K>(w.cols);
  }
  if (w.type == GgmlType::kQ6_K && Table().q6_k_packed != nullptr) {
    return groups * packed::GroupBytes<packed::Q6K>(w.cols);
  }
  return 0;
}

namespace {

// Row i of a group's block b: Q8_0's 8 slices of 4 values, each value + 128.
void PackRowBlock(packed::Q8_0, const BlockQ8_0* block, uint8_t* values, int64_t i) {
  uint32_t four[8] = {};  // a padding row's weights are 0
  if (block != nullptr) std::memcpy(four, block->qs, sizeof four);
  for (int k = 0; k < 8; ++k) {
    four[k] ^= 0x80808080u;
    std::memcpy(values + k * 64 + i * 4, &four[k], 4);
  }
}

// Q4_0's nibbles as stored (value + 8), bytes 4m..4m+3 into vector m.
void PackRowBlock(packed::Q4_0, const BlockQ4_0* block, uint8_t* values, int64_t i) {
  uint32_t four[4] = {0x88888888u, 0x88888888u, 0x88888888u, 0x88888888u};  // padding: 0
  if (block != nullptr) std::memcpy(four, block->qs, sizeof four);
  for (int m = 0; m < 4; ++m) std::memcpy(values + m * 64 + i * 4, &four[m], 4);
}

// The kernels' table is the file's E2M1 values, doubled, plus the offset.
constexpr bool ShiftedValuesMatch() {
  for (int i = 0; i < 16; ++i) {
    if (packed::MXFP4::kShiftedValues[i] != kMxfp4Values[i] + packed::MXFP4::kOffset) return false;
  }
  return true;
}
static_assert(ShiftedValuesMatch());

// MXFP4's codes as stored, laid out as Q4_0's nibbles (padding: code 0, the value 0).
void PackRowBlock(packed::MXFP4, const BlockMXFP4* block, uint8_t* values, int64_t i) {
  uint32_t four[4] = {};
  if (block != nullptr) std::memcpy(four, block->qs, sizeof four);
  for (int m = 0; m < 4; ++m) std::memcpy(values + m * 64 + i * 4, &four[m], 4);
}

// A block's scale as the packed layout keeps it: the f16 bits, or MXFP4's exponent byte.
uint16_t PackedScale(const BlockQ8_0& b) { return b.d; }
uint16_t PackedScale(const BlockQ4_0& b) { return b.d; }
uint16_t PackedScale(const BlockMXFP4& b) { return b.e; }

template <typename F, typename Block>
void PackGroups(const WeightMatrix& w, uint8_t* out) {
  const int64_t nb = w.cols / 32;
  const size_t group_bytes = packed::GroupBytes<F>(w.cols);
  for (int64_t g = 0; g < packed::Groups(w.rows); ++g) {
    uint8_t* group = out + static_cast<size_t>(g) * group_bytes;
    if (nb % 2 != 0) {  // the padding block of the last pair: never read, but defined
      std::memset(packed::BlockValues<F>(group, nb), 0, F::kValueBytes);
      std::memset(group + packed::ScalesOffset<F>(nb), 0, packed::kGroupRows * 2);
    }
    const Block* rows[packed::kGroupRows];
    for (int64_t i = 0; i < packed::kGroupRows; ++i) {
      const int64_t r = g * packed::kGroupRows + i;
      rows[i] = r < w.rows ? reinterpret_cast<const Block*>(w.row(r)) : nullptr;
    }
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* values = packed::BlockValues<F>(group, b);
      uint16_t scales[packed::kGroupRows];
      for (int64_t i = 0; i < packed::kGroupRows; ++i) {
        PackRowBlock(F{}, rows[i] != nullptr ? rows[i] + b : nullptr, values, i);
        scales[i] = rows[i] != nullptr ? PackedScale(rows[i][b]) : uint16_t{0};
      }
      std::memcpy(group + packed::ScalesOffset<F>(b), scales, sizeof scales);
    }
  }
}

// K-quants (matmul_packed.h). Bytes 4m..4m+3 of row i's `src` (n bytes) into vector m of `v`.
void PackRowVectors(const uint8_t* src, int64_t n, uint8_t* v, int64_t i) {
  for (int64_t m = 0; m < n / 4; ++m) std::memcpy(v + m * 64 + i * 4, src + 4 * m, 4);
}

// Row i's super-block b into its group's super-block at sb.
template <typename Block>
void PackRowSuper(const Block* b, uint8_t* sb, int64_t i) {
  if constexpr (std::is_same_v<Block, BlockQ6_K>) {
    PackRowVectors(b->ql, sizeof b->ql, sb + packed::Q6K::kLow, i);
    PackRowVectors(b->qh, sizeof b->qh, sb + packed::Q6K::kHigh, i);
    for (int k = 0; k < 16; ++k) {
      sb[packed::Q6K::kScales + k / 2 * 32 + i * 2 + k % 2] = static_cast<uint8_t>(b->scales[k]);
    }
    std::memcpy(sb + packed::Q6K::kD + i * 2, &b->d, 2);
  } else {
    PackRowVectors(b->qs, sizeof b->qs, sb, i);
    if constexpr (std::is_same_v<Block, BlockQ5_K>) {
      PackRowVectors(b->qh, sizeof b->qh, sb + packed::Q4K::kHigh, i);
    }
    for (int j = 0; j < 8; ++j) {
      uint8_t sc = 0, m = 0;
      UnpackScaleMinK4(b->scales, j, &sc, &m);
      sb[packed::Q4K::kScales + j * 16 + i] = sc;
      sb[packed::Q4K::kMins + j / 2 * 32 + i * 2 + j % 2] = m;
    }
    std::memcpy(sb + packed::Q4K::kD + i * 2, &b->d, 2);
    std::memcpy(sb + packed::Q4K::kDmin + i * 2, &b->dmin, 2);
  }
}

template <typename F, typename Block>
void PackKGroups(const WeightMatrix& w, uint8_t* out) {
  const int64_t nsb = w.cols / 256;
  const size_t group_bytes = packed::GroupBytes<F>(w.cols);
  // Padding rows (and Q6_K's padding bytes) stay zero: scales 0, their products 0.
  std::memset(out, 0, group_bytes * static_cast<size_t>(packed::Groups(w.rows)));
  for (int64_t r = 0; r < w.rows; ++r) {
    uint8_t* group = out + static_cast<size_t>(r / packed::kGroupRows) * group_bytes;
    const auto* row = reinterpret_cast<const Block*>(w.row(r));
    for (int64_t s = 0; s < nsb; ++s) {
      PackRowSuper(row + s, group + s * F::kSuperBytes, r % packed::kGroupRows);
    }
  }
}

}  // namespace

void PackWeightsInto(const WeightMatrix& w, uint8_t* out) {
  if (w.type == GgmlType::kQ4_K) {
    PackKGroups<packed::Q4K, BlockQ4_K>(w, out);
  } else if (w.type == GgmlType::kQ5_K) {
    PackKGroups<packed::Q5K, BlockQ5_K>(w, out);
  } else if (w.type == GgmlType::kQ6_K) {
    PackKGroups<packed::Q6K, BlockQ6_K>(w, out);
  } else if (w.type == GgmlType::kQ8_0) {
    PackGroups<packed::Q8_0, BlockQ8_0>(w, out);
  } else if (w.type == GgmlType::kMXFP4) {
    PackGroups<packed::MXFP4, BlockMXFP4>(w, out);
  } else {
    PackGroups<packed::Q4_0, BlockQ4_0>(w, out);
  }
}

AlignedBuffer<uint8_t> PackWeights(const WeightMatrix& w) {
  const size_t bytes = PackedWeightBytes(w);
  if (bytes == 0) return {};
  AlignedBuffer<uint8_t> out(bytes);
  PackWeightsInto(w, out.data());
  return out;
}

void MatMulReference(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) {
  std::vector<float> row(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeWeightRow(w, r, row.data());
    for (int64_t t = 0; t < num_tokens; ++t) {
      double s = 0;
      for (int64_t c = 0; c < w.cols; ++c) s += static_cast<double>(row[c]) * x[t * w.cols + c];
      y[t * w.rows + r] = static_cast<float>(s);
    }
  }
}

}  // namespace kvserve
