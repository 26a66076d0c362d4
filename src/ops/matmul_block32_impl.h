// Panels for weights in 32-value blocks with one scale (Q8_0; the 4- and 5-bit Q4_0, Q4_1, Q5_0,
// Q5_1 and MXFP4) times ActQ8_0 activations, written once over a dot-product policy D and
// included by each ISA file (matmul_avx2.cc with maddubs for all of them; matmul_avx512.cc with
// VNNI for all but Q8_0, which has a panel of its own there) inside its own target flags.
// Everything here has internal linkage, so the copies for different instruction sets never mix.
// Internal to ops/.
//
// A block's 32 weights become signed bytes in registers: Q8_0's as stored (in [-127, 127]),
// Q4_0's nibbles minus 8, Q5_0's 5-bit values minus 16, MXFP4's codes through kMxfp4Values
// (twice the E2M1 values, so every weight is an integer in [-12, 12]). D::Dot(|w|, x carrying w's
// sign) gives 8 int32 sums of 4 products each, the same exact integer whichever instruction
// computes it (maddubs' int16 pairs never saturate: 2 * 127 * 127 < 32767). Q4_1 and Q5_1 are
// d * q + m with q unsigned (in [0, 15], [0, 31]): q goes to Dot as it is, and the min term
// m * dx * sum(x of the block) is one more FMA (the activations' block sums, ActQ8_0::sum).
//
// NOTE: batch invariance. Output (row r, token t) is always, over the blocks b in order, with
// p = Dot(w[r, b], x[t, b]) (8 int32 lanes) split into its exact halves lo = p0 + .. + p3 and
// hi = p4 + .. + p7:
//   acc_lo = Fma(float(lo), scale(w[r, b]) * d(x[t, b]), acc_lo)   (acc_hi likewise)
//   acc_lo = Fma(min(w[r, b]), d(x[t, b]) * float(sum(x[t, b])), acc_lo)   (Q4_1, Q5_1 only)
//   y[t, r] = acc_lo + acc_hi
// whatever tile (row, token) falls in or how many tokens the call has. A 4-row tile reduces its
// rows' p together (one transpose of integer adds), so each token costs one conversion and one
// FMA for 4 rows; a single row reduces its p within each half to the same two integers.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ops/matmul_kernels.h"

namespace kvserve::kernels {
namespace {
namespace block32 {

inline float HalfToFloat(uint16_t h) { return _cvtsh_ss(h); }

// The 16 packed bytes as 32 nibbles: the low ones (values 0..15) in the lower half.
inline __m256i Nibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i low = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low), _mm_and_si128(raw, low));
}

// Q5_0's / Q5_1's fifth bits: byte i is 16 where bit i of qh is set (element i's bit 4).
inline __m256i FifthBits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof bits);
  const __m256i spread =  // byte i: qh's byte i / 8 (every 128-bit lane holds all four)
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
                          _mm256_set1_epi8(0x10));
}

// Each format: its Block, Values (the 32 weights as bytes), Scale, kPrefetchEvery (blocks per
// two cache lines of the row NR rows on), kUnsigned (Values are unsigned, q of d * q + m) and,
// for those, Min.
struct Q8_0 {
  using Block = BlockQ8_0;
  static constexpr bool kUnsigned = false;
  static constexpr int kPrefetchEvery = 2;  // 68 bytes
  static __m256i Values(const Block& b) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
  }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
};

struct Q4_0 {
  using Block = BlockQ4_0;
  static constexpr bool kUnsigned = false;
  static constexpr int kPrefetchEvery = 4;  // 72 bytes
  static __m256i Values(const Block& b) {
    return _mm256_sub_epi8(Nibbles(b.qs), _mm256_set1_epi8(8));
  }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
};

struct Q5_0 {
  using Block = BlockQ5_0;
  static constexpr bool kUnsigned = false;
  static constexpr int kPrefetchEvery = 4;  // 88 bytes
  static __m256i Values(const Block& b) {
    return _mm256_sub_epi8(_mm256_or_si256(Nibbles(b.qs), FifthBits(b.qh)), _mm256_set1_epi8(16));
  }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
};

struct Q4_1 {
  using Block = BlockQ4_1;
  static constexpr bool kUnsigned = true;
  static constexpr int kPrefetchEvery = 4;  // 80 bytes
  static __m256i Values(const Block& b) { return Nibbles(b.qs); }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
  static float Min(const Block& b) { return HalfToFloat(b.m); }
};

struct Q5_1 {
  using Block = BlockQ5_1;
  static constexpr bool kUnsigned = true;
  static constexpr int kPrefetchEvery = 4;  // 96 bytes
  static __m256i Values(const Block& b) { return _mm256_or_si256(Nibbles(b.qs), FifthBits(b.qh)); }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
  static float Min(const Block& b) { return HalfToFloat(b.m); }
};

struct Mxfp4 {
  using Block = BlockMXFP4;
  static constexpr bool kUnsigned = false;
  static constexpr int kPrefetchEvery = 4;  // 68 bytes
  static __m256i Values(const Block& b) {
    const __m128i lut = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values));
    return _mm256_shuffle_epi8(_mm256_set_m128i(lut, lut), Nibbles(b.qs));
  }
  // 2^(e - 128) from its bits (Mxfp4Scale without the library call): a normal float for
  // e >= 2, the subnormals 2^-128 and 2^-127 below.
  static float Scale(const Block& b) {
    const uint32_t bits = b.e >= 2 ? static_cast<uint32_t>(b.e - 1) << 23 : 0x00200000u << b.e;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
};

constexpr int kRows = 4;
constexpr int kTokens = 8;

// Lane i < 4: p[i]'s lanes 0..3 summed; lane 4 + i: its lanes 4..7.
inline __m256i ReduceRows4(const __m256i p[4]) {
  const __m256i s01 =
      _mm256_add_epi32(_mm256_unpacklo_epi32(p[0], p[1]), _mm256_unpackhi_epi32(p[0], p[1]));
  const __m256i s23 =
      _mm256_add_epi32(_mm256_unpacklo_epi32(p[2], p[3]), _mm256_unpackhi_epi32(p[2], p[3]));
  return _mm256_add_epi32(_mm256_unpacklo_epi64(s01, s23), _mm256_unpackhi_epi64(s01, s23));
}

// Lanes 0..3: p's lanes 0..3 summed; lanes 4..7: its lanes 4..7.
inline __m256i ReduceHalves(__m256i p) {
  const __m256i s = _mm256_add_epi32(p, _mm256_shuffle_epi32(p, 0x4E));
  return _mm256_add_epi32(s, _mm256_shuffle_epi32(s, 0xB1));
}

// acc_lo + acc_hi of lane i and lane 4 + i.
inline __m128 Halves(__m256 acc) {
  return _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
}

// NR (1 or 4) rows x NT tokens. With 4 rows, acc[t]'s lane i holds row i's acc_lo and lane 4 + i
// its acc_hi; with one row, every lane of a half holds the same.
template <typename F, typename D, int NR, int NT>
void Tile(const typename F::Block* const* rows, int64_t nb, const ActQ8_0& x, int64_t t0, float* y,
          int64_t y_stride, int64_t prefetch) {
  static_assert(NR == 1 || NR == kRows);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  const int64_t xnb = x.cols / 32;
  for (int64_t b = 0; b < nb; ++b) {
    __m256i w[NR], aw[NR];
    float dw[NR];
    float mw[NR] = {};
    for (int i = 0; i < NR; ++i) {
      if (prefetch != 0 && b % F::kPrefetchEvery == 0) {
        const char* next = reinterpret_cast<const char*>(rows[i] + b) + prefetch;
        _mm_prefetch(next, _MM_HINT_T0);
        _mm_prefetch(next + 64, _MM_HINT_T0);
      }
      w[i] = F::Values(rows[i][b]);
      aw[i] = F::kUnsigned ? w[i] : _mm256_sign_epi8(w[i], w[i]);
      dw[i] = F::Scale(rows[i][b]);
      if constexpr (F::kUnsigned) mw[i] = F::Min(rows[i][b]);
    }
    // x carrying row i's signs (as it is against unsigned weights).
    auto signed_x = [&](__m256i xv, int i) {
      return F::kUnsigned ? xv : _mm256_sign_epi8(xv, w[i]);
    };
    // The min term's factor d(x) * sum(x) of token t0 + t, in every lane.
    auto sum_x = [&](int t, float dx) {
      return _mm256_set1_ps(dx * static_cast<float>(x.sum[(t0 + t) * xnb + b]));
    };
    if constexpr (NR == 1) {
      const __m256 min_lo = _mm256_setr_ps(mw[0], mw[0], mw[0], mw[0], 0.f, 0.f, 0.f, 0.f);
      for (int t = 0; t < NT; ++t) {
        const __m256i xv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + (t0 + t) * x.cols + b * 32));
        const float dx = x.d[(t0 + t) * xnb + b];
        const __m256i s = ReduceHalves(D::Dot(aw[0], signed_x(xv, 0)));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw[0] * dx), acc[t]);
        if constexpr (F::kUnsigned) acc[t] = _mm256_fmadd_ps(min_lo, sum_x(t, dx), acc[t]);
      }
    } else {
      const __m128 d4 = _mm_setr_ps(dw[0], dw[1], dw[2], dw[3]);
      const __m256 dw8 = _mm256_set_m128(d4, d4);
      const __m256 min_lo = _mm256_setr_ps(mw[0], mw[1], mw[2], mw[3], 0.f, 0.f, 0.f, 0.f);
      for (int t = 0; t < NT; ++t) {
        const __m256i xv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + (t0 + t) * x.cols + b * 32));
        __m256i p[kRows];
        for (int i = 0; i < kRows; ++i) p[i] = D::Dot(aw[i], signed_x(xv, i));
        const float dx = x.d[(t0 + t) * xnb + b];
        const __m256 scale = _mm256_mul_ps(dw8, _mm256_set1_ps(dx));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ReduceRows4(p)), scale, acc[t]);
        if constexpr (F::kUnsigned) acc[t] = _mm256_fmadd_ps(min_lo, sum_x(t, dx), acc[t]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    const __m128 sums = Halves(acc[t]);
    if constexpr (NR == 1) {
      y[t * y_stride] = _mm_cvtss_f32(sums);
    } else {
      _mm_storeu_ps(y + t * y_stride, sums);
    }
  }
}

template <typename F, typename D, int NR, int NT>
void RowsTile(const PanelArgs& a, const ActQ8_0& x, int64_t r, int64_t t) {
  const WeightMatrix& w = *a.w;
  const typename F::Block* rows[NR];
  for (int i = 0; i < NR; ++i) rows[i] = reinterpret_cast<const typename F::Block*>(w.row(r + i));
  // The first token tile over NR rows prefetches the same blocks NR rows on; later tiles find
  // the rows in cache.
  Tile<F, D, NR, NT>(rows, w.cols / 32, x, t, a.y + t * w.rows + r, w.rows,
                     t == 0 ? NR * static_cast<int64_t>(w.row_bytes) : 0);
}

// A single token (decode) streams one row at a time, as the Q8_0 panels do. From two tokens on,
// rows [r0, r1) go in blocks of about 128 KiB of weights: each token tile runs over a block's
// rows, 4 at a time, while its activations are in L1, and the block stays in L2 across the
// tiles, so a prefill reads its activations once per block of rows rather than once per 4 rows.
// (Two tokens in 4-row tiles: 0.8 ms for 8192 x 2048 Q8_0 from L3, 1.3 ms a row at a time.)
template <typename F, typename D>
void Panel(const PanelArgs& a, const ActQ8_0& x, int64_t r0, int64_t r1) {
  if (a.num_tokens == 1) {
    for (int64_t r = r0; r < r1; ++r) RowsTile<F, D, 1, 1>(a, x, r, 0);
    return;
  }
  const int64_t block =
      std::max<int64_t>(kRows, (128 << 10) / static_cast<int64_t>(a.w->row_bytes) / kRows * kRows);
  for (int64_t rb = r0; rb < r1; rb += block) {
    const int64_t re = std::min(r1, rb + block);
    ForTokenTiles<kTokens>(a.num_tokens, [&](auto nt, int64_t t) {
      constexpr int NT = decltype(nt)::value;
      int64_t r = rb;
      for (; r + kRows <= re; r += kRows) RowsTile<F, D, kRows, NT>(a, x, r, t);
      for (; r < re; ++r) RowsTile<F, D, 1, NT>(a, x, r, t);
    });
  }
}

}  // namespace block32
}  // namespace
}  // namespace kvserve::kernels
