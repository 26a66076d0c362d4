// AVX-512 (F, BW, VL, VNNI) matmul panels. Compiled with those target flags; only called after
// a run-time CPU check (InitAvx512).
// GCC 12's AVX-512 headers build "undefined" vectors from uninitialised locals
// (_mm512_castsi256_si512, _mm512_reduce_add_ps), which -Wuninitialized reports.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops/kquant_unpack.h"
#include "ops/matmul_block32_impl.h"
#include "ops/matmul_f16_impl.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_packed.h"

// Without the target flags (KVSERVE_HOST_ISA_ONLY on a CPU that lacks AVX-512), nothing but a
// refusal: InitAvx512 says the CPU has no such kernels.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && defined(__AVX512VNNI__)
namespace kvserve::kernels {
namespace {

constexpr int kRows = 4;    // weight rows per tile
constexpr int kTokens = 4;  // tokens per tile

// NOTE (prefetch): the hardware prefetchers stop at 4 KiB pages and follow few streams. The
// first token tile over a group of NR rows prefetches, per weight block it reads, the same
// block of the row NR rows on: the next group's, one group ahead in reading order. (A fixed
// distance would land in a neighbouring row that its own stream is already reading.) The other
// token tiles find the rows in L1. Measured on 2 Zen 5 cores, 1B Q8_0: batch-4 decode 87 -> 135
// tokens/s, batch-8 98 -> 153.
inline int64_t PrefetchDistance(const WeightMatrix& w, int nr, int64_t t) {
  return t == 0 ? nr * static_cast<int64_t>(w.row_bytes) : 0;
}

inline float Half(uint16_t h) { return _cvtsh_ss(h); }

// Lanes 0-7 = a, lanes 8-15 = b.
inline __m512 SplitScale(float a, float b) {
  return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

// --- Q8_0 ------------------------------------------------------------------------------------
// NOTE: VNNI multiplies unsigned by signed bytes. Activations are shifted to unsigned
// (x + 128, an xor of the sign bit) and the excess 128 * sum(w) is subtracted by starting each
// dot product from -128 * sum(w), computed once per weight block pair and reused by every token.
//
// Two ways to read the activations, with the same arithmetic for every (row, token):
// - direct (decode and small batches): each tile shifts the int8 values and spreads the pair's
//   scales itself;
// - paired (kPairedMinTokens to kPairedMaxTokens tokens): MatMul has laid them out once
//   (Q8_0PrepareAvx512), so a tile loads one vector of values and one of scales per token and
//   pair. That frees the
//   instructions and registers for a 2-row x 8-token tile, which reads the weights once for up
//   to 8 tokens. Measured on 2 Zen 5 cores, a 5632 x 2048 matrix: 5-8 tokens 1.1-1.25x faster
//   than 4-token tiles (verification of speculative drafts, batched decode). Not for prefill:
//   the paired layout is twice the activation bytes and a 2-row tile reads them twice as often,
//   so 512-token prefill measured 140 tokens/s against 4 x 4 tiles' 200 (1B Q8_0, A/B).

constexpr int64_t kPairedMinTokens = 5;
constexpr int64_t kPairedMaxTokens = 8;
constexpr int kPairedRows = 2;
constexpr int kPairedTokens = 8;

void Q8_0PrepareAvx512(const ActQ8_0& x, int64_t t0, int64_t t1) {
  const int64_t nb = x.cols / 32;
  const int64_t pairs = (nb + 1) / 2;
  const __m256i sign_bit = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t t = t0; t < t1; ++t) {
    const int8_t* q = x.q + t * x.cols;
    const float* d = x.d + t * nb;
    uint8_t* pq = x.pair_q + t * pairs * 64;
    float* pd = x.pair_d + t * pairs * 16;
    for (int64_t b = 0; b < nb; ++b) {  // block b sits at b * 32 bytes and b * 8 floats
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * 32));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pq + b * 32),
                          _mm256_xor_si256(v, sign_bit));
      _mm256_storeu_ps(pd + b * 8, _mm256_set1_ps(d[b]));
    }
    if (nb % 2 != 0) {  // the missing block of the last pair: q = 0 (128 unsigned), d = 0
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pq + nb * 32), sign_bit);
      _mm256_storeu_ps(pd + nb * 8, _mm256_setzero_ps());
    }
  }
}

template <int NR, int NT, bool kPaired>
void Q8_0Tile(const BlockQ8_0* const* rows, int64_t nb, const ActQ8_0& x, int64_t t0,
              float* y, int64_t y_stride, int64_t prefetch) {
  const __m512i sign_bit = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[NT][NR];
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < NR; ++i) acc[t][i] = _mm512_setzero_ps();
  const int64_t xnb = x.cols / 32;
  const int64_t pairs = (xnb + 1) / 2;
  for (int64_t b = 0; b < nb; b += 2) {
    const bool pair = b + 1 < nb;
    __m512i w[NR], neg_corr[NR];
    __m512 dw[NR];
    for (int i = 0; i < NR; ++i) {
      const BlockQ8_0* blk = rows[i] + b;
      if (prefetch != 0) {  // two blocks are 68 bytes: two lines cover them
        const char* next = reinterpret_cast<const char*>(blk) + prefetch;
        _mm_prefetch(next, _MM_HINT_T0);
        _mm_prefetch(next + 64, _MM_HINT_T0);
      }
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[0].qs));
      const __m256i hi = pair ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[1].qs))
                              : _mm256_setzero_si256();
      w[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      neg_corr[i] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                     _mm512_dpbusd_epi32(_mm512_setzero_si512(), sign_bit, w[i]));
      dw[i] = SplitScale(Half(blk[0].d), pair ? Half(blk[1].d) : 0.f);
    }
    for (int t = 0; t < NT; ++t) {
      __m512i xu;
      __m512 dx;
      if constexpr (kPaired) {
        const int64_t at = (t0 + t) * pairs + b / 2;
        xu = _mm512_loadu_si512(x.pair_q + at * 64);
        dx = _mm512_loadu_ps(x.pair_d + at * 16);
      } else {
        const int8_t* xq = x.q + (t0 + t) * x.cols + b * 32;
        const __m256i xlo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
        const __m256i xhi = pair
                                ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32))
                                : _mm256_setzero_si256();
        xu = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(xlo), xhi, 1),
                              sign_bit);
        const float* xd = x.d + (t0 + t) * xnb + b;
        dx = SplitScale(xd[0], pair ? xd[1] : 0.f);
      }
      for (int i = 0; i < NR; ++i) {
        const __m512i p = _mm512_dpbusd_epi32(neg_corr[i], xu, w[i]);
        acc[t][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dw[i], dx), acc[t][i]);
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < NR; ++i) y[t * y_stride + i] = _mm512_reduce_add_ps(acc[t][i]);
}

template <int NR, bool kPaired>
void Q8_0Rows(const PanelArgs& a, const ActQ8_0& x, int64_t r) {
  const WeightMatrix& w = *a.w;
  const BlockQ8_0* rows[NR];
  for (int i = 0; i < NR; ++i) rows[i] = reinterpret_cast<const BlockQ8_0*>(w.row(r + i));
  const int64_t n = w.cols / 32;
  ForTokenTiles<kPaired ? kPairedTokens : kTokens>(a.num_tokens, [&](auto nt, int64_t t) {
    Q8_0Tile<NR, decltype(nt)::value, kPaired>(rows, n, x, t, a.y + t * w.rows + r, w.rows,
                                               PrefetchDistance(w, NR, t));
  });
}

void Q8_0PanelAvx512(const PanelArgs& a, const ActQ8_0& x, int64_t r0, int64_t r1) {
  int64_t r = r0;
  if (x.pair_q != nullptr) {
    for (; r + kPairedRows <= r1; r += kPairedRows) Q8_0Rows<kPairedRows, true>(a, x, r);
    for (; r < r1; ++r) Q8_0Rows<1, true>(a, x, r);
    return;
  }
  // NOTE: a single token (decode) reads one row at a time, a single sequential stream for the
  // hardware prefetcher. From 2 tokens on, 4-row tiles share each token's shifted activations
  // and spread scales across 4 rows, which the 1-row tiles redo per row: 1B Q8_0, 2 Zen 5 cores,
  // a whole Forward of 2 tokens measured 21.0 -> 16.4 ms and of 3 tokens 25.4 -> 18.8 ms (one
  // token: 17.5 ms either way; kvserve_spec_bench --verify-table, 2 alternating rounds).
  if (a.num_tokens < 2) {
    for (; r < r1; ++r) Q8_0Rows<1, false>(a, x, r);
  }
  for (; r + kRows <= r1; r += kRows) Q8_0Rows<kRows, false>(a, x, r);
  for (; r < r1; ++r) Q8_0Rows<1, false>(a, x, r);
}

// --- Packed Q8_0 and Q4_0 (ops/matmul_packed.h) ---------------------------------------------
// One register holds a block's exact integer sums for the 16 rows of a group: per 4-column
// slice k, dpbusd multiplies the slice's 64 unsigned weight bytes (16 rows x 4) with the
// token's 4 activation bytes broadcast to every row. A token tile of NT tokens takes each
// block's slices out of memory (and Q4_0's out of their nibbles) once for all of them. Tiles of
// up to 2 tokens (decode) split a block's 8 slices over two chains, so the dependent dpbusd
// latency does not bound them; the integer sum is the same.
// A thread's groups are one stream (see packed::PrefetchPairAhead).

constexpr int kPackedTokens = 8;

// Slices m and m + 4 (m < 4) of the block values at v, as unsigned bytes w + offset (Q4_0's
// nibbles split by a mask and a shift; MXFP4's codes through the table of doubled E2M1 values
// + 12).
inline void SlicePair(packed::Q8_0, const uint8_t* v, int m, __m512i& lo, __m512i& hi) {
  lo = _mm512_load_si512(v + m * 64);
  hi = _mm512_load_si512(v + (m + 4) * 64);
}

inline void SlicePair(packed::Q4_0, const uint8_t* v, int m, __m512i& lo, __m512i& hi) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  const __m512i bytes = _mm512_load_si512(v + m * 64);
  lo = _mm512_and_si512(bytes, low);
  hi = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low);
}

inline void SlicePair(packed::MXFP4, const uint8_t* v, int m, __m512i& lo, __m512i& hi) {
  const __m512i lut = _mm512_broadcast_i32x4(
      _mm_load_si128(reinterpret_cast<const __m128i*>(packed::MXFP4::kShiftedValues)));
  const __m512i low = _mm512_set1_epi8(0x0F);
  const __m512i bytes = _mm512_load_si512(v + m * 64);
  lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(bytes, low));
  hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low));
}

// All 8 slices of the block values at v.
template <typename F>
inline void Slices(F format, const uint8_t* v, __m512i (&w)[8]) {
  for (int m = 0; m < 4; ++m) SlicePair(format, v, m, w[m], w[m + 4]);
}

// The 16 rows' weight scales of a block.
template <typename F>
inline __m512 BlockScale(const uint8_t* group, int64_t b) {
  const __m256i bits =
      _mm256_load_si256(reinterpret_cast<const __m256i*>(packed::BlockScales<F>(group, b)));
  if constexpr (std::is_same_v<F, packed::MXFP4>) {
    // 2^(e - 128): the float with exponent field e - 1 for e >= 2, the subnormals
    // 0x00200000 << e (2^-128, 2^-127) below (as block32::Mxfp4::Scale).
    const __m512i e = _mm512_cvtepu16_epi32(bits);
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 tiny = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(tiny, normal, sub));
  } else {
    return _mm512_cvtph_ps(bits);
  }
}

template <typename F, int NT>
void PackedTile(const uint8_t* group, int64_t nb, const ActQ8_0& x, int64_t t0, float* y,
                int64_t y_stride, __mmask16 rows, bool prefetch) {
  constexpr int kChains = NT <= 2 ? 2 : 1;
  static_assert(NT <= kActTileTokens);
  // The tile's per-block scalars, its tokens side by side (tiles start at multiples of 8).
  const float* tile_d = x.tile_d + ActTileOffset(t0, nb);
  const int32_t* tile_osum = x.tile_osum + ActTileOffset(t0, nb);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (prefetch && b % 2 == 0) packed::PrefetchPairAhead<F>(group, b);
    __m512i w[8];
    Slices(F{}, packed::BlockValues<F>(group, b), w);
    const __m512 dw = BlockScale<F>(group, b);
    __m512i sum[NT][kChains];
    for (int t = 0; t < NT; ++t) {
      sum[t][0] = _mm512_set1_epi32(tile_osum[b * kActTileTokens + t]);  // -offset * sum(q)
      if constexpr (kChains == 2) sum[t][1] = _mm512_setzero_si512();
    }
    for (int k = 0; k < 8; ++k) {
      for (int t = 0; t < NT; ++t) {
        const int8_t* xq = x.q + (t0 + t) * x.cols + b * 32 + k * 4;
        sum[t][k % kChains] =
            _mm512_dpbusd_epi32(sum[t][k % kChains], w[k], _mm512_set1_epi32(packed::Slice4(xq)));
      }
    }
    for (int t = 0; t < NT; ++t) {
      __m512i s = sum[t][0];
      if constexpr (kChains == 2) s = _mm512_add_epi32(s, sum[t][1]);
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(tile_d[b * kActTileTokens + t]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(y + t * y_stride, rows, acc[t]);
}

// Two groups (32 rows) x NT tokens: each activation broadcast feeds both groups' dpbusd (one
// broadcast load per two of them instead of per one: PackedTile ran at about half the VNNI peak),
// the groups' slices taken two at a time as they are used. Per (row, token) the same exact integer
// sum and the same float steps as PackedTile, so the same bits.
template <typename F, int NT>
void PackedPairTile(const uint8_t* g0, const uint8_t* g1, int64_t nb, const ActQ8_0& x, int64_t t0,
                    float* y, int64_t y_stride, __mmask16 rows0, __mmask16 rows1, bool prefetch) {
  static_assert(NT <= kActTileTokens / 2);
  // The tile's per-block scalars within its line of 8 tokens (these tiles start at multiples
  // of 4).
  const float* tile_d = x.tile_d + ActTileOffset(t0, nb);
  const int32_t* tile_osum = x.tile_osum + ActTileOffset(t0, nb);
  __m512 acc[2][NT];
  for (int t = 0; t < NT; ++t) acc[0][t] = acc[1][t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (prefetch && b % 2 == 0) {
      packed::PrefetchPairAhead<F>(g0, b);
      packed::PrefetchPairAhead<F>(g1, b);
    }
    const uint8_t* v0 = packed::BlockValues<F>(g0, b);
    const uint8_t* v1 = packed::BlockValues<F>(g1, b);
    __m512i sum[2][NT];
    for (int t = 0; t < NT; ++t) {
      sum[0][t] = sum[1][t] = _mm512_set1_epi32(tile_osum[b * kActTileTokens + t]);
    }
    for (int m = 0; m < 4; ++m) {
      __m512i w0[2], w1[2];
      SlicePair(F{}, v0, m, w0[0], w0[1]);
      SlicePair(F{}, v1, m, w1[0], w1[1]);
      for (int h = 0; h < 2; ++h) {
        for (int t = 0; t < NT; ++t) {
          const int8_t* xq = x.q + (t0 + t) * x.cols + b * 32 + (m + 4 * h) * 4;
          const __m512i xb = _mm512_set1_epi32(packed::Slice4(xq));
          sum[0][t] = _mm512_dpbusd_epi32(sum[0][t], w0[h], xb);
          sum[1][t] = _mm512_dpbusd_epi32(sum[1][t], w1[h], xb);
        }
      }
    }
    const __m512 dw0 = BlockScale<F>(g0, b), dw1 = BlockScale<F>(g1, b);
    for (int t = 0; t < NT; ++t) {
      const __m512 dx = _mm512_set1_ps(tile_d[b * kActTileTokens + t]);
      acc[0][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[0][t]), _mm512_mul_ps(dw0, dx), acc[0][t]);
      acc[1][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[1][t]), _mm512_mul_ps(dw1, dx), acc[1][t]);
    }
  }
  for (int t = 0; t < NT; ++t) {
    _mm512_mask_storeu_ps(y + t * y_stride, rows0, acc[0][t]);
    _mm512_mask_storeu_ps(y + t * y_stride + packed::kGroupRows, rows1, acc[1][t]);
  }
}

// --- Packed K-quants (ops/matmul_packed.h) --------------------------------------------------
// Per 32 values (a Q4_K / Q5_K sub-block, or two 16-value Q6_K sub-blocks) the 8 slices are
// unpacked once per token tile; per token, 8 dpbusd give the 16 rows' exact sums and a mullo by
// the rows' scales adds them into the super-block's int32 sum. The mins (Q4_K, Q5_K) and the
// -32 offset (Q6_K) are dpwssd products of the rows' pairs with the token's pair sums. Then the
// float epilogue, once per super-block.

// Calls fn(std::integral_constant<int, i>) for i = 0 .. N - 1, unrolled (shift counts and
// offsets become immediates).
template <int N, typename Fn>
inline void Unrolled(Fn&& fn) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (fn(std::integral_constant<int, I>{}), ...); }
  (std::make_integer_sequence<int, N>{});
}

constexpr int kOrAnd = 0xF8;  // vpternlog's a | (b & c)

// Unsigned slice m (values 4m .. 4m + 3) of Q4_K / Q5_K sub-block J of the super-block at sb.
template <typename F, int J>
inline __m512i KSlice(const uint8_t* sb, int m) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  const __m512i bytes = _mm512_load_si512(sb + (J / 2 * 8 + m) * 64);
  __m512i w = _mm512_and_si512(J % 2 == 0 ? bytes : _mm512_srli_epi16(bytes, 4), low);
  if constexpr (std::is_same_v<F, packed::Q5K>) {
    // Bit J of each qh byte to bit 4 (what the 16-bit shift brings from the other byte of the
    // pair is masked off), ORed in.
    const __m512i h = _mm512_load_si512(sb + F::kHigh + m * 64);
    const __m512i at4 = J <= 4 ? _mm512_slli_epi16(h, 4 - J) : _mm512_srli_epi16(h, J - 4);
    w = _mm512_ternarylogic_epi32(w, at4, _mm512_set1_epi8(0x10), kOrAnd);
  }
  return w;
}

// Unsigned 6-bit slice m of Q6_K values 32J .. 32J + 31 (half J / 4, group J % 4).
template <int J>
inline __m512i Q6KSlice(const uint8_t* sb, int m) {
  constexpr int h = J / 4, g = J % 4;
  const __m512i low = _mm512_set1_epi8(0x0F);
  const __m512i l = _mm512_load_si512(sb + packed::Q6K::kLow + (16 * h + 8 * (g % 2) + m) * 64);
  const __m512i nib = _mm512_and_si512(g < 2 ? l : _mm512_srli_epi16(l, 4), low);
  const __m512i q = _mm512_load_si512(sb + packed::Q6K::kHigh + (8 * h + m) * 64);
  // Bits 2g, 2g + 1 of each qh byte to bits 4, 5.
  __m512i at4 = q;
  if constexpr (g == 0) at4 = _mm512_slli_epi16(q, 4);
  if constexpr (g == 1) at4 = _mm512_slli_epi16(q, 2);
  if constexpr (g == 3) at4 = _mm512_srli_epi16(q, 2);
  return _mm512_ternarylogic_epi32(nib, at4, _mm512_set1_epi8(0x30), kOrAnd);
}

// Slice m of the 32 values J (a Q4_K / Q5_K sub-block, two Q6_K ones), and all 8 of them.
template <typename F, int J>
inline __m512i KSliceOf(const uint8_t* sb, int m) {
  if constexpr (std::is_same_v<F, packed::Q6K>) {
    return Q6KSlice<J>(sb, m);
  } else {
    return KSlice<F, J>(sb, m);
  }
}
template <typename F, int J>
inline void KSlices(const uint8_t* sb, __m512i (&w)[8]) {
  for (int m = 0; m < 8; ++m) w[m] = KSliceOf<F, J>(sb, m);
}

// Q6_K's scales of its 16-value sub-blocks 2j and 2j + 1 for the 16 rows as int32 (stored as
// int8 pairs, widened to int16 pairs, then each to int32).
inline void Q6KScales(const uint8_t* sb, int j, __m512i& first, __m512i& second) {
  const __m512i pairs = _mm512_cvtepi8_epi16(
      _mm256_load_si256(reinterpret_cast<const __m256i*>(sb + packed::Q6K::kScales + 32 * j)));
  first = _mm512_srai_epi32(_mm512_slli_epi32(pairs, 16), 16);
  second = _mm512_srai_epi32(pairs, 16);
}

// The 16 rows' scales of values 32j .. 32j + 31 as int32: Q4_K / Q5_K's sub-block j, or (Q6_K)
// its 16-value sub-block 2j + e.
template <typename F>
inline __m512i KScale(const uint8_t* sb, int j, int e) {
  if constexpr (std::is_same_v<F, packed::Q6K>) {
    __m512i scale[2];
    Q6KScales(sb, j, scale[0], scale[1]);
    return scale[e];
  } else {
    return _mm512_cvtepu8_epi32(
        _mm_load_si128(reinterpret_cast<const __m128i*>(sb + F::kScales + 16 * j)));
  }
}

// The exact sum over slices [kFirst, kFirst + kCount) of weights w with one token's activations
// (xq: the first of the 32 values). kChains = 2 splits them into two dependent chains (for small
// tiles, whose few tokens would leave dpbusd's latency exposed); the integer sum is the same.
template <int kChains, int kFirst = 0, int kCount = 8>
inline __m512i SliceDot(const __m512i (&w)[8], const int8_t* xq) {
  __m512i sum[kChains];
  for (int c = 0; c < kChains; ++c) sum[c] = _mm512_setzero_si512();
  for (int k = kFirst; k < kFirst + kCount; ++k) {
    sum[k % kChains] =
        _mm512_dpbusd_epi32(sum[k % kChains], w[k], _mm512_set1_epi32(packed::Slice4(xq + 4 * k)));
  }
  return kChains == 2 ? _mm512_add_epi32(sum[0], sum[1]) : sum[0];
}

// The end of super-block s for NT tokens of one group whose exact int32 sums S are in sum: the
// float steps of the arithmetic above into acc (with the mins for Q4_K / Q5_K, the -32 offset for
// Q6_K; or, kCorrected, Q6_K's sums of signed values whose correction is the vector at
// `correction`, see UnpackKGroup).
template <typename F, int NT, bool kCorrected = false>
__attribute__((always_inline)) inline void KSuperEnd(const uint8_t* sb, const ActQ8K& x, int64_t t0,
                                                     int64_t nsb, int64_t s, const __m512i* sum,
                                                     __m512* acc,
                                                     const uint8_t* correction = nullptr) {
  if constexpr (std::is_same_v<F, packed::Q6K>) {
    const __m512 d =
        _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sb + F::kD)));
    auto step = [&](int t, __m512i total) {
      const __m512 dx = _mm512_set1_ps(x.d[(t0 + t) * nsb + s]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(d, dx), acc[t]);
    };
    if constexpr (kCorrected) {
      const __m512i c = _mm512_load_si512(correction);
      for (int t = 0; t < NT; ++t) step(t, _mm512_sub_epi32(sum[t], c));
    } else {
      __m512i pairs[8];
      for (int p = 0; p < 8; ++p) {
        pairs[p] = _mm512_cvtepi8_epi16(
            _mm256_load_si256(reinterpret_cast<const __m256i*>(sb + F::kScales + 32 * p)));
      }
      for (int t = 0; t < NT; ++t) {
        const int16_t* b = x.bsum + ((t0 + t) * nsb + s) * 16;
        __m512i off = _mm512_setzero_si512();
        for (int p = 0; p < 8; ++p) {
          int32_t two;  // the token's sums of sub-blocks 2p, 2p + 1
          std::memcpy(&two, b + 2 * p, sizeof two);
          off = _mm512_dpwssd_epi32(off, pairs[p], _mm512_set1_epi32(two));
        }
        step(t, _mm512_sub_epi32(sum[t], _mm512_slli_epi32(off, 5)));
      }
    }
  } else {
    __m512i mins[4];
    for (int p = 0; p < 4; ++p) {
      mins[p] = _mm512_cvtepu8_epi16(
          _mm256_load_si256(reinterpret_cast<const __m256i*>(sb + F::kMins + 32 * p)));
    }
    const __m512 d =
        _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sb + F::kD)));
    const __m512 dmin =
        _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sb + F::kDmin)));
    for (int t = 0; t < NT; ++t) {
      const int32_t* pair_sums = x.sum32_pairs + ((t0 + t) * nsb + s) * 4;
      __m512i m = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p)
        m = _mm512_dpwssd_epi32(m, mins[p], _mm512_set1_epi32(pair_sums[p]));
      const __m512 dx = _mm512_set1_ps(x.d[(t0 + t) * nsb + s]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]), _mm512_mul_ps(d, dx), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(dmin, dx), acc[t]);
    }
  }
}

// Not inlined: inside the panel its registers spilled and Q6_K's 8- and 16-token batches took
// 15-20% longer.
template <typename F, int NT>
__attribute__((noinline)) void PackedKTile(const uint8_t* group, int64_t nsb, const ActQ8K& x,
                                           int64_t t0, float* y, int64_t y_stride, __mmask16 rows,
                                           bool prefetch) {
  constexpr int kChains = NT <= 2 ? 2 : 1;
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* sb = group + s * F::kSuperBytes;
    if (prefetch) packed::PrefetchSuperAhead<F>(group, s);
    __m512i sum[NT];
    for (int t = 0; t < NT; ++t) sum[t] = _mm512_setzero_si512();
    auto xq = [&](int t, int j) { return x.q + (t0 + t) * x.cols + s * 256 + 32 * j; };
    Unrolled<8>([&](auto j) {
      constexpr int J = decltype(j)::value;
      __m512i w[8];
      KSlices<F, J>(sb, w);
      if constexpr (std::is_same_v<F, packed::Q6K>) {
        __m512i first, second;
        Q6KScales(sb, J, first, second);
        for (int t = 0; t < NT; ++t) {
          const __m512i a = SliceDot<kChains, 0, 4>(w, xq(t, J));
          const __m512i b = SliceDot<kChains, 4, 4>(w, xq(t, J));
          sum[t] = _mm512_add_epi32(sum[t], _mm512_add_epi32(_mm512_mullo_epi32(a, first),
                                                             _mm512_mullo_epi32(b, second)));
        }
      } else {
        const __m512i sc = KScale<F>(sb, J, 0);
        for (int t = 0; t < NT; ++t) {
          sum[t] = _mm512_add_epi32(sum[t], _mm512_mullo_epi32(SliceDot<kChains>(w, xq(t, J)), sc));
        }
      }
    });
    KSuperEnd<F, NT>(sb, x, t0, nsb, s, sum, acc);
  }
  for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(y + t * y_stride, rows, acc[t]);
}

// The K-quants' pair tiles read their slices unpacked: a group's super-blocks as the bytes the
// dpbusd take, 64 vectors of 16 rows x 4 bytes per super-block (32 values j, then slice m),
// written once per token chunk for all its tiles (unpacked per tile, the pair tiles measured no
// faster than PackedKTile: each slice would be unpacked for 4 tokens, not 8). Q4_K / Q5_K keep
// their unsigned values. Q6_K's are stored signed, q - 32, for the token's unsigned bytes
// x + 128 (ActQ8K::qu), and a 65th vector holds each row's correction
// C = 128 * sum_j scale_j * sum_k (q_jk - 32) over the super-block's 16-value sub-blocks j:
// sum_j scale_j * sum_k (q_jk - 32) * (x_k + 128) - C is the same exact int32 as
// PackedKTile's sum_j scale_j * sum_k q_jk * x_k - 32 * sum_j scale_j * sum_k x_k (|C| < 2^28,
// each sum below 2^29), without the per-token offset products.
constexpr int64_t kUnpackedSuperBytes = 65 * 64;
constexpr int64_t kCorrection = 64 * 64;  // Q6_K's correction vector in the unpacked super-block

template <typename F>
void UnpackKGroup(const uint8_t* group, int64_t nsb, uint8_t* out) {
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* sb = group + s * F::kSuperBytes;
    packed::PrefetchSuperAhead<F>(group, s);
    uint8_t* o = out + s * kUnpackedSuperBytes;
    if constexpr (std::is_same_v<F, packed::Q6K>) {
      const __m512i ones = _mm512_set1_epi8(1), offset = _mm512_set1_epi8(32);
      __m512i correction = _mm512_setzero_si512();
      Unrolled<8>([&](auto j) {
        constexpr int J = decltype(j)::value;
        __m512i scale[2];
        Q6KScales(sb, J, scale[0], scale[1]);
        for (int e = 0; e < 2; ++e) {
          __m512i sum = _mm512_setzero_si512();  // each row's sum of its 16 values q - 32
          for (int m = 4 * e; m < 4 * e + 4; ++m) {
            const __m512i w = _mm512_sub_epi8(Q6KSlice<J>(sb, m), offset);
            _mm512_store_si512(o + (J * 8 + m) * 64, w);
            sum = _mm512_dpbusd_epi32(sum, ones, w);
          }
          correction = _mm512_add_epi32(correction, _mm512_mullo_epi32(sum, scale[e]));
        }
      });
      _mm512_store_si512(o + kCorrection, _mm512_slli_epi32(correction, 7));
    } else {
      Unrolled<8>([&](auto j) {
        constexpr int J = decltype(j)::value;
        for (int m = 0; m < 8; ++m) _mm512_store_si512(o + (J * 8 + m) * 64, KSlice<F, J>(sb, m));
      });
    }
  }
}

// Two groups (32 rows) x NT tokens of a K-quant, their slices unpacked at u0, u1 (UnpackKGroup):
// each activation broadcast feeds both groups' dpbusd. Per (row, token) the same exact int32
// sums and the same float steps (KSuperEnd) as PackedKTile, so the same bits.
template <typename F, int NT>
void PackedKPairTile(const uint8_t* g0, const uint8_t* g1, const uint8_t* u0, const uint8_t* u1,
                     int64_t nsb, const ActQ8K& x, int64_t t0, float* y, int64_t y_stride,
                     __mmask16 rows0, __mmask16 rows1) {
  // Scales per 32 values (Q6_K: one per 16), and the slices each covers.
  constexpr bool kQ6K = std::is_same_v<F, packed::Q6K>;
  constexpr int kParts = kQ6K ? 2 : 1, kPartSlices = 8 / kParts;
  __m512 acc[2][NT];
  for (int t = 0; t < NT; ++t) acc[0][t] = acc[1][t] = _mm512_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* sb[2] = {g0 + s * F::kSuperBytes, g1 + s * F::kSuperBytes};
    const uint8_t* us[2] = {u0 + s * kUnpackedSuperBytes, u1 + s * kUnpackedSuperBytes};
    __m512i sum[2][NT];
    for (int t = 0; t < NT; ++t) sum[0][t] = sum[1][t] = _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) {
      Unrolled<kParts>([&](auto part) {
        constexpr int e = decltype(part)::value;
        __m512i dot[2][NT];
        for (int t = 0; t < NT; ++t) dot[0][t] = dot[1][t] = _mm512_setzero_si512();
        for (int m = e * kPartSlices; m < (e + 1) * kPartSlices; ++m) {
          __m512i w0 = _mm512_load_si512(us[0] + (j * 8 + m) * 64);
          __m512i w1 = _mm512_load_si512(us[1] + (j * 8 + m) * 64);
          if constexpr (kQ6K) {
            // Loaded once for the NT tokens: as dpbusd's second operand the compiler would
            // otherwise fold the load into each of them.
            asm("" : "+v"(w0), "+v"(w1));
          }
          for (int t = 0; t < NT; ++t) {
            const int64_t at = (t0 + t) * x.cols + s * 256 + 32 * j + 4 * m;
            if constexpr (kQ6K) {  // unsigned activations, signed weights
              const __m512i xb =
                  _mm512_set1_epi32(packed::Slice4(reinterpret_cast<const int8_t*>(x.qu + at)));
              dot[0][t] = _mm512_dpbusd_epi32(dot[0][t], xb, w0);
              dot[1][t] = _mm512_dpbusd_epi32(dot[1][t], xb, w1);
            } else {
              const __m512i xb = _mm512_set1_epi32(packed::Slice4(x.q + at));
              dot[0][t] = _mm512_dpbusd_epi32(dot[0][t], w0, xb);
              dot[1][t] = _mm512_dpbusd_epi32(dot[1][t], w1, xb);
            }
          }
        }
        for (int i = 0; i < 2; ++i) {
          const __m512i sc = KScale<F>(sb[i], j, e);
          for (int t = 0; t < NT; ++t) {
            sum[i][t] = _mm512_add_epi32(sum[i][t], _mm512_mullo_epi32(dot[i][t], sc));
          }
        }
      });
    }
    for (int i = 0; i < 2; ++i) {
      KSuperEnd<F, NT, kQ6K>(sb[i], x, t0, nsb, s, sum[i], acc[i], us[i] + kCorrection);
    }
  }
  for (int t = 0; t < NT; ++t) {
    _mm512_mask_storeu_ps(y + t * y_stride, rows0, acc[0][t]);
    _mm512_mask_storeu_ps(y + t * y_stride + packed::kGroupRows, rows1, acc[1][t]);
  }
}

// Every packed layout, in token chunks of kAvx512Chunk (each reads the thread's groups once): a
// chunk of kPackedTokens tokens or more (K-quants: kKPairChunk, which pays for unpacking a pair's
// slices first) takes the thread's groups two at a time (the pair tiles, kPairTokens tokens each),
// a last odd group and smaller chunks one group at a time (tiles of kPackedTokens). Act is ActQ8_0
// or, for the K-quants, ActQ8K.
constexpr int kPairTokens = 4;
using packed::kKPairChunk;
// Longer than packed::kTokenChunk: each chunk reads the thread's groups again (and the K-quants
// unpack each pair again). 256 tokens against 64, Zen 5, 2 threads, 8192 x 2048 and
// 2048 x 8192 at 100 to 1024 tokens: Q8_0 2-4%, Q4_K and Q6_K 4-8% faster (medians of three
// alternating rounds); 512 within noise of 256 (4% faster for one of four shapes).
constexpr int64_t kAvx512Chunk = 256;

template <typename F, typename Act>
void PackedPanelAvx512(const PanelArgs& a, const Act& x, int64_t r0, int64_t r1) {
  const WeightMatrix& w = *a.w;
  const int64_t nb = packed::kIsKQuant<F> ? w.cols / 256 : w.cols / 32;
  constexpr int64_t kRows = packed::kGroupRows;
  const int64_t min_pair_chunk = packed::kIsKQuant<F> ? kKPairChunk : kPackedTokens;
  auto mask = [&](int64_t r) {
    return static_cast<__mmask16>((1u << std::min(kRows, w.rows - r)) - 1);
  };
  struct alignas(64) Line {
    uint8_t bytes[64];
  };
  // Q6_K's pairs read the tokens' unsigned bytes, which MatMulQ8K writes for them.
  bool can_pair = true;
  if constexpr (std::is_same_v<F, packed::Q6K>) can_pair = x.qu != nullptr;
  thread_local std::vector<Line> unpacked;  // K-quants: the pair's two groups
  uint8_t* u0 = nullptr;
  uint8_t* u1 = nullptr;
  if (packed::kIsKQuant<F> && can_pair && a.num_tokens >= min_pair_chunk) {
    unpacked.resize(static_cast<size_t>(2 * nb * kUnpackedSuperBytes / 64));
    u0 = unpacked.data()->bytes;
    u1 = u0 + nb * kUnpackedSuperBytes;
  }
  for (int64_t c0 = 0; c0 < a.num_tokens; c0 += kAvx512Chunk) {
    const int64_t c1 = std::min(c0 + kAvx512Chunk, a.num_tokens);
    const bool pairs = can_pair && c1 - c0 >= min_pair_chunk;
    for (int64_t r = r0; r < r1;) {
      const uint8_t* g0 = packed::Group<F>(w, r / kRows);
      if (pairs && r + kRows < r1) {
        const uint8_t* g1 = packed::Group<F>(w, r / kRows + 1);
        if constexpr (packed::kIsKQuant<F>) {
          UnpackKGroup<F>(g0, nb, u0);
          UnpackKGroup<F>(g1, nb, u1);
        }
        ForTokenTiles<kPairTokens>(c0, c1, [&](auto nt, int64_t at) {
          float* y = a.y + at * w.rows + r;
          if constexpr (packed::kIsKQuant<F>) {
            PackedKPairTile<F, decltype(nt)::value>(g0, g1, u0, u1, nb, x, at, y, w.rows, mask(r),
                                                    mask(r + kRows));
          } else {
            PackedPairTile<F, decltype(nt)::value>(g0, g1, nb, x, at, y, w.rows, mask(r),
                                                   mask(r + kRows), at == c0);
          }
        });
        r += 2 * kRows;
        continue;
      }
      ForTokenTiles<kPackedTokens>(c0, c1, [&](auto nt, int64_t at) {
        float* y = a.y + at * w.rows + r;
        if constexpr (packed::kIsKQuant<F>) {
          PackedKTile<F, decltype(nt)::value>(g0, nb, x, at, y, w.rows, mask(r), at == c0);
        } else {
          PackedTile<F, decltype(nt)::value>(g0, nb, x, at, y, w.rows, mask(r), at == c0);
        }
      });
      r += kRows;
    }
  }
}

// --- K-quants --------------------------------------------------------------------------------

// Per row and super-block: the 4-bit values unpacked to bytes (one vector per 64 values: lanes
// 0-7 = first 32-value sub-block, 8-15 = second), their scales times d in the same lane layout,
// and -dmin * min_j in lanes 0-7 of `neg_min` (lanes 8-15 zero).
struct Q4KSuper {
  __m512 scale[4];
  __m512i q[4];
  __m512 neg_min;
};

inline void LoadQ4K(const BlockQ4_K& blk, Q4KSuper& s) {
  const __m128i sm = Q4KScalesAndMins(blk.scales);
  const __m512 sc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sm)),
                                  _mm512_set1_ps(Half(blk.d)));  // lanes 0-7 scales, 8-15 mins
  const __m256i low = _mm256_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * c));
    const __m256i lo = _mm256_and_si256(raw, low);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
    s.q[c] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi32(2 * c),
                                           _mm256_set1_epi32(2 * c + 1), 1);
    s.scale[c] = _mm512_permutexvar_ps(idx, sc);
  }
  const __m512 mins = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_srli_si128(sm, 8)));
  s.neg_min = _mm512_maskz_mul_ps(0x00FF, mins, _mm512_set1_ps(-Half(blk.dmin)));
}

template <int NR, int NT>
void Q4KTile(const BlockQ4_K* const* rows, int64_t nsb, const ActQ8K& x, int64_t t0, float* y,
             int64_t y_stride, int64_t prefetch) {
  __m512 acc[NT][NR];
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < NR; ++i) acc[t][i] = _mm512_setzero_ps();
  Q4KSuper sup[NR];
  for (int64_t s = 0; s < nsb; ++s) {
    for (int i = 0; i < NR; ++i) {
      if (prefetch != 0) {  // 144 bytes: three lines
        const char* next = reinterpret_cast<const char*>(rows[i] + s) + prefetch;
        for (int l = 0; l < 3; ++l) _mm_prefetch(next + 64 * l, _MM_HINT_T0);
      }
      LoadQ4K(rows[i][s], sup[i]);
    }
    for (int t = 0; t < NT; ++t) {
      const int64_t tok = t0 + t;
      const int8_t* xq = x.q + tok * x.cols + s * 256;
      const __m512 vdx = _mm512_set1_ps(x.d[tok * nsb + s]);
      // Sums of each 32 activations (adjacent pairs of the 16-value sums), times dx, in lanes 0-7.
      const __m256i sums32 = _mm256_madd_epi16(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsum + (tok * nsb + s) * 16)),
          _mm256_set1_epi16(1));
      const __m512 bsum =
          _mm512_maskz_mul_ps(0x00FF, _mm512_cvtepi32_ps(_mm512_castsi256_si512(sums32)), vdx);
      for (int c = 0; c < 4; ++c) {
        const __m512i xv = _mm512_loadu_si512(xq + 64 * c);
        for (int i = 0; i < NR; ++i) {
          const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), sup[i].q[c], xv);
          acc[t][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(sup[i].scale[c], vdx),
                                      acc[t][i]);
        }
      }
      for (int i = 0; i < NR; ++i) acc[t][i] = _mm512_fmadd_ps(sup[i].neg_min, bsum, acc[t][i]);
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < NR; ++i) y[t * y_stride + i] = _mm512_reduce_add_ps(acc[t][i]);
}

template <int NR>
void Q4KRows(const PanelArgs& a, const ActQ8K& x, int64_t r) {
  const WeightMatrix& w = *a.w;
  const BlockQ4_K* rows[NR];
  for (int i = 0; i < NR; ++i) rows[i] = reinterpret_cast<const BlockQ4_K*>(w.row(r + i));
  const int64_t n = w.cols / 256;
  ForTokenTiles<kTokens>(a.num_tokens, [&](auto nt, int64_t t) {
    Q4KTile<NR, decltype(nt)::value>(rows, n, x, t, a.y + t * w.rows + r, w.rows,
                                     PrefetchDistance(w, NR, t));
  });
}

void Q4KPanelAvx512(const PanelArgs& a, const ActQ8K& x, int64_t r0, int64_t r1) {
  int64_t r = r0;
  if (a.num_tokens >= kTokens) {  // see Q8_0PanelAvx512: decode streams one row at a time
    for (; r + 2 <= r1; r += 2) Q4KRows<2>(a, x, r);
  }
  for (; r < r1; ++r) Q4KRows<1>(a, x, r);
}

// Q6_K: per half (128 values) the 6-bit values q1..q4 of elements l, l+32, l+64, l+96 are
// assembled from ql (low nibbles) and qh (2 high bits). Values are unsigned 0..63 meaning q-32:
// the 32 * sum(x) excess is computed once per token and chunk and subtracted.
struct Q6KSuper {
  __m512i q[4];      // 64 unsigned 6-bit values per chunk, in element order
  __m512i scale[4];  // int32 scale per lane: each 16 values share one scale
  float d;
};

inline void LoadQ6K(const BlockQ6_K& blk, Q6KSuper& s) {
  // Byte i of the shuffle picks scale i / 4: four lanes share each of 4 scales.
  const __m128i pick = _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  for (int h = 0; h < 2; ++h) {
    __m256i g[4];
    Q6KUnpackHalf(blk, h, g);
    s.q[2 * h] = _mm512_inserti64x4(_mm512_castsi256_si512(g[0]), g[1], 1);
    s.q[2 * h + 1] = _mm512_inserti64x4(_mm512_castsi256_si512(g[2]), g[3], 1);
    for (int k = 0; k < 2; ++k) {
      const __m128i sc = _mm_loadu_si32(blk.scales + 8 * h + 4 * k);
      s.scale[2 * h + k] = _mm512_cvtepi8_epi32(_mm_shuffle_epi8(sc, pick));
    }
  }
  s.d = Half(blk.d);
}

template <int NR, int NT>
void Q6KTile(const BlockQ6_K* const* rows, int64_t nsb, const ActQ8K& x, int64_t t0, float* y,
             int64_t y_stride, int64_t prefetch) {
  const __m512i k32 = _mm512_set1_epi8(32);
  __m512 acc[NT][NR];
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < NR; ++i) acc[t][i] = _mm512_setzero_ps();
  Q6KSuper sup[NR];
  for (int64_t s = 0; s < nsb; ++s) {
    for (int i = 0; i < NR; ++i) {
      if (prefetch != 0) {  // 210 bytes: four lines
        const char* next = reinterpret_cast<const char*>(rows[i] + s) + prefetch;
        for (int l = 0; l < 4; ++l) _mm_prefetch(next + 64 * l, _MM_HINT_T0);
      }
      LoadQ6K(rows[i][s], sup[i]);
    }
    for (int t = 0; t < NT; ++t) {
      const int64_t tok = t0 + t;
      const int8_t* xq = x.q + tok * x.cols + s * 256;
      __m512i isum[NR];
      for (int i = 0; i < NR; ++i) isum[i] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        const __m512i xv = _mm512_loadu_si512(xq + 64 * c);
        const __m512i excess = _mm512_dpbusd_epi32(_mm512_setzero_si512(), k32, xv);
        for (int i = 0; i < NR; ++i) {
          const __m512i p = _mm512_sub_epi32(
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), sup[i].q[c], xv), excess);
          isum[i] = _mm512_add_epi32(isum[i], _mm512_mullo_epi32(p, sup[i].scale[c]));
        }
      }
      const float dx = x.d[tok * nsb + s];
      for (int i = 0; i < NR; ++i) {
        acc[t][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i]), _mm512_set1_ps(sup[i].d * dx),
                                    acc[t][i]);
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < NR; ++i) y[t * y_stride + i] = _mm512_reduce_add_ps(acc[t][i]);
}

template <int NR>
void Q6KRows(const PanelArgs& a, const ActQ8K& x, int64_t r) {
  const WeightMatrix& w = *a.w;
  const BlockQ6_K* rows[NR];
  for (int i = 0; i < NR; ++i) rows[i] = reinterpret_cast<const BlockQ6_K*>(w.row(r + i));
  const int64_t n = w.cols / 256;
  ForTokenTiles<kTokens>(a.num_tokens, [&](auto nt, int64_t t) {
    Q6KTile<NR, decltype(nt)::value>(rows, n, x, t, a.y + t * w.rows + r, w.rows,
                                     PrefetchDistance(w, NR, t));
  });
}

void Q6KPanelAvx512(const PanelArgs& a, const ActQ8K& x, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + 2 <= r1; r += 2) Q6KRows<2>(a, x, r);
  for (; r < r1; ++r) Q6KRows<1>(a, x, r);
}

void F16ToF32Avx512(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = Half(src[i]);
}

// --- F16 / BF16 (see matmul_f16_impl.h) ---------------------------------------------------------

struct Avx512Vec {
  using Vec = __m512;
  static constexpr int kLanes = 16;
  // NOTE: decode reads one row at a time, as Q8_0 does: a single sequential stream measured
  // fastest (~28 GB/s per core; 2 or 4 rows side by side 12-19 GB/s), and one FMA chain per
  // 32 bytes of weights keeps up with it.
  static constexpr int kDirectRows = 1;
  // Up to 4 tokens stay on the direct path: the row streams from memory once (a panel would
  // round-trip it through L2 scratch). 1B F16, 2 threads: batch-4 decode 37 -> 57 tokens/s.
  // Larger tiles lose: 8 tokens' activations (64 KiB) no longer fit L1, and direct tiles of 8
  // measured batch-8 decode 46 tokens/s against the panels' 64.
  static constexpr int kDirectTokens = 4;
  static constexpr int64_t kGemmMinTokens = 5;
  // 4 rows x 6 tokens: 24 accumulators + 4 weight vectors + 1 activation of 32 registers.
  static constexpr int kTileRows = 4;
  static constexpr int kTileTokens = 6;

  static __mmask16 Mask(int n) { return static_cast<__mmask16>((1u << n) - 1); }
  static Vec Zero() { return _mm512_setzero_ps(); }
  static Vec Load(const float* p) { return _mm512_loadu_ps(p); }
  static Vec LoadPartial(const float* p, int n) { return _mm512_maskz_loadu_ps(Mask(n), p); }
  template <bool kBF16>
  static Vec FromHalf(__m256i h) {
    if constexpr (kBF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else {
      return _mm512_cvtph_ps(h);
    }
  }
  template <bool kBF16>
  static Vec LoadHalf(const uint16_t* p) {
    return FromHalf<kBF16>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  template <bool kBF16>
  static Vec LoadHalfPartial(const uint16_t* p, int n) {
    return FromHalf<kBF16>(_mm256_maskz_loadu_epi16(Mask(n), p));
  }
  static Vec Fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  // The 4 x 6 tile leaves room for the activation vector: without this GCC folds its load into
  // each of the 4 FMAs (28 loads per 24 FMAs instead of 10; ~5% slower).
  static void Pin(Vec& v) { __asm__("" : "+v"(v)); }
  static float Sum(Vec v) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
  }
};

// Q4_0 / MXFP4 (matmul_block32_impl.h): the signed products through VNNI's dpbusd.
struct VnniDot {
  static __m256i Dot(__m256i unsigned_w, __m256i signed_x) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), unsigned_w, signed_x);
  }
};

}  // namespace

// --- Activation quantization ------------------------------------------------------------------
// act_quant.h's arithmetic 16 values at a time, the same bytes: the block's absolute maximum
// (exact in any order), d and 1 / d in scalar as QuantizeBlock has them, then per value the
// product rounded on its own (the empty asm keeps the compiler from fusing it into the add, which
// the scalar code, compiled without FMA, never does), +-0.5 by its sign, truncated.

inline __m512i RoundToInt(__m512 x, __m512 id) {
  __m512 v = _mm512_mul_ps(x, id);
  asm("" : "+v"(v));
  const __mmask16 nonnegative = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GE_OQ);
  const __m512 half =
      _mm512_mask_blend_ps(nonnegative, _mm512_set1_ps(-0.5f), _mm512_set1_ps(0.5f));
  return _mm512_cvttps_epi32(_mm512_add_ps(v, half));
}

// The scale d of n values (a multiple of 16) and the inverse the values are multiplied by.
inline float BlockScaleOf(const float* x, int n, float& id) {
  __m512 m = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  const float d = _mm512_reduce_max_ps(m) / 127.f;
  id = d > 0.f ? 1.f / d : 0.f;
  return d;
}

void QuantizeActQ8_0Avx512(const float* x, int64_t num_tokens, ActQ8_0& out) {
  const int64_t nb = out.cols / 32;
  for (int64_t i = 0; i < num_tokens * nb; ++i) {  // block i of the batch
    const float* xb = x + i * 32;
    float id;
    out.d[i] = BlockScaleOf(xb, 32, id);
    const __m512 idv = _mm512_set1_ps(id);
    for (int h = 0; h < 2; ++h) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out.q + i * 32 + 16 * h),
                       _mm512_cvtepi32_epi8(RoundToInt(_mm512_loadu_ps(xb + 16 * h), idv)));
    }
  }
}

void QuantizeActQ8KAvx512(const float* x, int64_t num_tokens, ActQ8K& out) {
  const int64_t nsb = out.cols / 256;
  for (int64_t i = 0; i < num_tokens * nsb; ++i) {  // super-block i of the batch
    const float* xs = x + i * 256;
    float id;
    out.d[i] = BlockScaleOf(xs, 256, id);
    const __m512 idv = _mm512_set1_ps(id);
    for (int j = 0; j < 16; ++j) {
      const __m512i q = RoundToInt(_mm512_loadu_ps(xs + 16 * j), idv);
      const __m128i bytes = _mm512_cvtepi32_epi8(q);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out.q + i * 256 + 16 * j), bytes);
      out.bsum[i * 16 + j] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
      if (out.qu != nullptr) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out.qu + i * 256 + 16 * j),
                         _mm_xor_si128(bytes, _mm_set1_epi8(static_cast<char>(0x80))));
      }
    }
  }
}

bool InitAvx512(KernelTable& table) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512vnni") ||
      !__builtin_cpu_supports("avx512dq")) {
    return false;
  }
  table.isa = "avx512-vnni";
  table.quantize_q8_0 = &QuantizeActQ8_0Avx512;
  table.quantize_q8k = &QuantizeActQ8KAvx512;
  table.q8_0 = &Q8_0PanelAvx512;
  table.q8_0_prepare = &Q8_0PrepareAvx512;
  table.q8_0_prepare_min_tokens = kPairedMinTokens;
  table.q8_0_prepare_max_tokens = kPairedMaxTokens;
  table.q8_0_packed = &PackedPanelAvx512<packed::Q8_0, ActQ8_0>;
  table.q4_0_packed = &PackedPanelAvx512<packed::Q4_0, ActQ8_0>;
  table.mxfp4_packed = &PackedPanelAvx512<packed::MXFP4, ActQ8_0>;
  table.q4_k_packed = &PackedPanelAvx512<packed::Q4K, ActQ8K>;
  table.q5_k_packed = &PackedPanelAvx512<packed::Q5K, ActQ8K>;
  table.q6_k_packed = &PackedPanelAvx512<packed::Q6K, ActQ8K>;
  table.q4_0 = &block32::Panel<block32::Q4_0, VnniDot>;
  table.q5_0 = &block32::Panel<block32::Q5_0, VnniDot>;
  table.q4_1 = &block32::Panel<block32::Q4_1, VnniDot>;
  table.q5_1 = &block32::Panel<block32::Q5_1, VnniDot>;
  table.mxfp4 = &block32::Panel<block32::Mxfp4, VnniDot>;
  table.q4_k = &Q4KPanelAvx512;
  table.q6_k = &Q6KPanelAvx512;
  table.f16_to_f32 = &F16ToF32Avx512;
  table.f16 = &half::Panel<Avx512Vec, false>;
  table.bf16 = &half::Panel<Avx512Vec, true>;
  return true;
}

}  // namespace kvserve::kernels
#else
namespace kvserve::kernels {

bool InitAvx512(KernelTable&) { return false; }

}  // namespace kvserve::kernels
#endif
