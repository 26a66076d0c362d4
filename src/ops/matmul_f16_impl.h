// F16 / BF16 weight panels, written once over a vector traits type V and included by each ISA
// file (matmul_avx512.cc, matmul_avx2.cc) inside its own target flags. Everything here has
// internal linkage, so the copies compiled for different instruction sets never mix.
// Internal to ops/.
//
// V provides: Vec, kLanes, kDirectRows (rows read side by side on the decode path),
// kDirectTokens (the most tokens of one register tile there), kGemmMinTokens (from this many
// tokens on, the prefill path), kTileRows x
// kTileTokens (the prefill register tile), Zero, Load, LoadPartial (n < kLanes floats,
// zero-filled, never reads past p + n), LoadHalf<kBF16> / LoadHalfPartial<kBF16> (the same for
// 16-bit weights, converted exactly to float), Fma(a, b, c) = a * b + c, Sum (a fixed
// horizontal sum), Pin(v) (keeps a loaded vector in a register where the tile leaves room).
//
// NOTE: batch invariance. Output (row r, token t) is always:
//   acc = 0; for each vector of columns c0 = 0, L, 2L, ... (the last one zero-filled past cols):
//     acc = Fma(w[r, c0..], x[t, c0..], acc)
//   y[t, r] = Sum(acc)
// The decode path converts the weights in registers; the prefill path converts a panel of rows
// once into scratch, then splits the columns into chunks (the accumulators are stored and
// reloaded between chunks, unchanged). Conversion is exact, so both perform the same float
// operations in the same order, whatever the number of tokens, the tile a (row, token) falls in,
// or the thread split.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops/matmul_kernels.h"

namespace kvserve::kernels {
namespace {
namespace half {

// Below V::kGemmMinTokens tokens the weights are converted in registers straight from the matrix
// (memory-bound decode and batched decode); from it on, from a panel of rows copied once into
// scratch (compute-bound prefill).
// Prefill path blocking (measured on Zen 5, 48 KiB L1 / 1 MiB L2 per core):
// - a panel of up to 32 rows stays in L2 (<= 768 KiB) while every token tile streams past it;
//   the activations are re-read from L3 once per panel, so panels are made as tall as L2 allows
//   (2 / rows bytes of activation traffic per flop; 64 rows measured no faster). The panel keeps
//   the weights' 16 bits, converted where the tiles load them: against a panel of converted
//   floats, half the bytes to bring from L2 per FMA for a conversion the FMA pipes do not run
//   (8192 x 2048, 2 Zen 5 threads, 512 tokens 57.4 -> 42.1 ms, 8 tokens 1.62 -> 1.09 ms);
// - the columns are taken in chunks of 1024, so the token tile's chunk (24 KiB) stays in L1
//   while the panel's row groups pass over it.
constexpr int64_t kChunkCols = 1024;
constexpr int64_t kPanelBytes = 768 * 1024;
constexpr int64_t kMaxPanelRows = 32;

// --- decode: weights converted in registers ---------------------------------------------------

// NOTE: the hardware prefetchers stop at 4 KiB pages, and a row of 2048 f16 weights is one
// page: each row would start with a full memory latency. Prefetching each cache line one page
// ahead measured +15% decode bandwidth (31 -> 36.5 GB/s on 2 Zen 5 cores).
constexpr int kPrefetchBytes = 4096;

template <typename V, bool kBF16, int NR, int NT>
void DirectTile(const uint16_t* const* w, const float* x, int64_t cols, float* y,
                int64_t y_stride) {
  using Vec = typename V::Vec;
  constexpr int L = V::kLanes;
  Vec acc[NT][NR];
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < NR; ++i) acc[t][i] = V::Zero();
  int64_t c = 0;
  for (; c + L <= cols; c += L) {
    if (c % 32 == 0) {  // once per 64-byte line of weights
      for (int i = 0; i < NR; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(w[i] + c) + kPrefetchBytes, _MM_HINT_T0);
      }
    }
    Vec wv[NR];
    for (int i = 0; i < NR; ++i) wv[i] = V::template LoadHalf<kBF16>(w[i] + c);
    for (int t = 0; t < NT; ++t) {
      const Vec xv = V::Load(x + t * cols + c);
      for (int i = 0; i < NR; ++i) acc[t][i] = V::Fma(wv[i], xv, acc[t][i]);
    }
  }
  if (c < cols) {
    const int n = static_cast<int>(cols - c);
    Vec wv[NR];
    for (int i = 0; i < NR; ++i) wv[i] = V::template LoadHalfPartial<kBF16>(w[i] + c, n);
    for (int t = 0; t < NT; ++t) {
      const Vec xv = V::LoadPartial(x + t * cols + c, n);
      for (int i = 0; i < NR; ++i) acc[t][i] = V::Fma(wv[i], xv, acc[t][i]);
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < NR; ++i) y[t * y_stride + i] = V::Sum(acc[t][i]);
}

// DirectTile<NT = n> for a run-time n in [1, kDirectTokens].
template <typename V, bool kBF16, int NR, int... I>
void DirectTokens(int64_t n, const uint16_t* const* rows, const float* x, int64_t cols, float* y,
                  int64_t y_stride, std::integer_sequence<int, I...>) {
  ((n == I + 1 ? DirectTile<V, kBF16, NR, I + 1>(rows, x, cols, y, y_stride) : void()), ...);
}

template <typename V, bool kBF16, int NR>
void DirectRows(const PanelArgs& a, const float* x, int64_t r) {
  const WeightMatrix& w = *a.w;
  const uint16_t* rows[NR];
  for (int i = 0; i < NR; ++i) rows[i] = reinterpret_cast<const uint16_t*>(w.row(r + i));
  // Tiles of up to kDirectTokens tokens; the rows stay in L1 for the tiles after the first.
  for (int64_t t = 0; t < a.num_tokens; t += V::kDirectTokens) {
    const float* xt = x + t * w.cols;
    float* y = a.y + t * w.rows + r;
    DirectTokens<V, kBF16, NR>(std::min<int64_t>(V::kDirectTokens, a.num_tokens - t), rows, xt,
                               w.cols, y, w.rows,
                               std::make_integer_sequence<int, V::kDirectTokens>{});
  }
}

template <typename V, bool kBF16>
void DirectPanel(const PanelArgs& a, const float* x, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + V::kDirectRows <= r1; r += V::kDirectRows) DirectRows<V, kBF16, V::kDirectRows>(a, x, r);
  for (; r < r1; ++r) DirectRows<V, kBF16, 1>(a, x, r);
}

// --- prefill: panel copied once, register-blocked tiles ---------------------------------------

// Columns [k0, k1) of an NR x NT tile. w: the panel's rows, the weights' own 16 bits (stride
// ldw, zero-padded to a multiple of the vector width), converted as they are loaded (exact);
// x: NT tokens (stride cols). acc_io holds the accumulators between chunks: read unless kFirst;
// on `last` the sums go to y, otherwise back to acc_io.
template <typename V, bool kBF16, int NR, int NT, bool kFirst>
inline __attribute__((always_inline)) void GemmTileBody(const uint16_t* w, int64_t ldw,
                                                        const float* x, int64_t cols, int64_t k0,
                                                        int64_t k1, typename V::Vec* acc_io,
                                                        bool last, float* y, int64_t y_stride) {
  using Vec = typename V::Vec;
  constexpr int L = V::kLanes;
  Vec acc[NT][NR];
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < NR; ++i) acc[t][i] = kFirst ? V::Zero() : acc_io[t * NR + i];
  int64_t c = k0;
  for (; c + L <= k1; c += L) {
    Vec wv[NR];
    for (int i = 0; i < NR; ++i) wv[i] = V::template LoadHalf<kBF16>(w + i * ldw + c);
    for (int t = 0; t < NT; ++t) {
      Vec xv = V::Load(x + t * cols + c);
      V::Pin(xv);  // one load per token, not one memory operand per FMA
      for (int i = 0; i < NR; ++i) acc[t][i] = V::Fma(wv[i], xv, acc[t][i]);
    }
  }
  if (c < k1) {  // only in the last chunk: the padding of w is zero, x is zero-filled
    const int n = static_cast<int>(k1 - c);
    Vec wv[NR];
    for (int i = 0; i < NR; ++i) wv[i] = V::template LoadHalf<kBF16>(w + i * ldw + c);
    for (int t = 0; t < NT; ++t) {
      const Vec xv = V::LoadPartial(x + t * cols + c, n);
      for (int i = 0; i < NR; ++i) acc[t][i] = V::Fma(wv[i], xv, acc[t][i]);
    }
  }
  if (last) {
    for (int t = 0; t < NT; ++t)
      for (int i = 0; i < NR; ++i) y[t * y_stride + i] = V::Sum(acc[t][i]);
  } else {
    for (int t = 0; t < NT; ++t)
      for (int i = 0; i < NR; ++i) acc_io[t * NR + i] = acc[t][i];
  }
}

template <typename V, bool kBF16, int NR, int NT>
void GemmTile(const uint16_t* w, int64_t ldw, const float* x, int64_t cols, int64_t k0, int64_t k1,
              typename V::Vec* acc_io, bool first, bool last, float* y, int64_t y_stride) {
  if (first) {
    GemmTileBody<V, kBF16, NR, NT, true>(w, ldw, x, cols, k0, k1, acc_io, last, y, y_stride);
  } else {
    GemmTileBody<V, kBF16, NR, NT, false>(w, ldw, x, cols, k0, k1, acc_io, last, y, y_stride);
  }
}

template <typename V>
using GemmTileFn = void (*)(const uint16_t*, int64_t, const float*, int64_t, int64_t, int64_t,
                            typename V::Vec*, bool, bool, float*, int64_t);

// Tiles<V, kBF16>::fn[nr - 1][nt - 1] = GemmTile<nr, nt>, for the partial tiles at the panel
// edges.
template <typename V, bool kBF16>
struct Tiles {
  GemmTileFn<V> fn[V::kTileRows][V::kTileTokens];

  template <int NR, size_t... T>
  constexpr void FillRow(std::index_sequence<T...>) {
    ((fn[NR - 1][T] = &GemmTile<V, kBF16, NR, static_cast<int>(T) + 1>), ...);
  }
  template <size_t... R>
  constexpr Tiles(std::index_sequence<R...>) : fn{} {
    (FillRow<static_cast<int>(R) + 1>(std::make_index_sequence<V::kTileTokens>{}), ...);
  }
};

template <typename V, bool kBF16>
inline constexpr Tiles<V, kBF16> kTiles{std::make_index_sequence<V::kTileRows>{}};

// Rows of a panel are copied one after another, so one page ahead is the next row's start (see
// the NOTE on decode prefetching): the panel streams from memory as decode does, which batches of
// a few tokens (batched decode) need. The row's end is zero-filled to ld.
inline void CopyRow(const uint16_t* src, int64_t cols, int64_t ld, uint16_t* dst) {
  for (int64_t c = 0; c < cols; c += 32) {  // once per 64-byte line
    _mm_prefetch(reinterpret_cast<const char*>(src + c) + kPrefetchBytes, _MM_HINT_T0);
  }
  std::memcpy(dst, src, static_cast<size_t>(cols) * sizeof(uint16_t));
  std::fill(dst + cols, dst + ld, uint16_t{0});
}

template <typename V, bool kBF16>
void GemmPanel(const PanelArgs& a, const float* x, int64_t r0, int64_t r1) {
  constexpr int NR = V::kTileRows, NT = V::kTileTokens;
  const WeightMatrix& w = *a.w;
  const int64_t cols = w.cols;
  const int64_t ld = (cols + V::kLanes - 1) / V::kLanes * V::kLanes;
  const int64_t fit = kPanelBytes / (ld * static_cast<int64_t>(sizeof(uint16_t))) / NR * NR;
  const int64_t panel = std::clamp<int64_t>(fit, NR, kMaxPanelRows / NR * NR);
  thread_local std::vector<uint16_t> scratch;
  if (scratch.size() < static_cast<size_t>(panel * ld)) scratch.resize(panel * ld);
  uint16_t* buf = scratch.data();
  typename V::Vec acc[kMaxPanelRows * NT];
  const auto& tiles = kTiles<V, kBF16>.fn;
  for (int64_t p0 = r0; p0 < r1; p0 += panel) {
    const int64_t np = std::min(panel, r1 - p0);
    for (int64_t i = 0; i < np; ++i) {
      CopyRow(reinterpret_cast<const uint16_t*>(w.row(p0 + i)), cols, ld, buf + i * ld);
    }
    for (int64_t t0 = 0; t0 < a.num_tokens; t0 += NT) {
      const int64_t nt = std::min<int64_t>(NT, a.num_tokens - t0);
      const float* xt = x + t0 * cols;
      float* yt = a.y + t0 * w.rows + p0;
      for (int64_t k0 = 0; k0 < cols; k0 += kChunkCols) {
        const int64_t k1 = std::min(cols, k0 + kChunkCols);
        for (int64_t i0 = 0; i0 < np; i0 += NR) {
          const int64_t nr = std::min<int64_t>(NR, np - i0);
          tiles[nr - 1][nt - 1](buf + i0 * ld, ld, xt, cols, k0, k1, acc + i0 * NT, k0 == 0,
                                k1 == cols, yt + i0, w.rows);
        }
      }
    }
  }
}

template <typename V, bool kBF16>
void Panel(const PanelArgs& a, const float* x, int64_t r0, int64_t r1) {
  if (a.num_tokens < V::kGemmMinTokens) {
    DirectPanel<V, kBF16>(a, x, r0, r1);
  } else {
    GemmPanel<V, kBF16>(a, x, r0, r1);
  }
}

}  // namespace half
}  // namespace
}  // namespace kvserve::kernels
