// Panels for weights in 32-value blocks with one scale (Q8_0; the 4-bit Q4_0 and MXFP4) times
// ActQ8_0 activations, written once over a dot-product policy D and included by each ISA file
// (matmul_avx2.cc with maddubs for all three; matmul_avx512.cc with VNNI for the 4-bit ones, its
// Q8_0 has a panel of its own) inside its own target flags. Everything here has internal
// linkage, so the copies for different instruction sets never mix. Internal to ops/.
//
// A block's 32 weights become signed bytes in registers: Q8_0's as stored (in [-127, 127]),
// Q4_0's nibbles minus 8, MXFP4's codes through kMxfp4Values (twice the E2M1 values, so every
// weight is an integer in [-12, 12]). D::Dot(|w|, x carrying w's sign) gives 8 int32 sums of 4
// products each, the same exact integer whichever instruction computes it (maddubs' int16
// pairs never saturate: 2 * 127 * 127 < 32767).
//
// NOTE: batch invariance. Output (row r, token t) is always, over the blocks b in order:
//   acc = Fma(float(Dot(w[r, b], x[t, b])), scale(w[r, b]) * d(x[t, b]), acc)
//   y[t, r] = HorizontalSum(acc)
// whatever tile (row, token) falls in or how many tokens the call has.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "ops/matmul_kernels.h"

namespace kvserve::kernels {
namespace {
namespace block32 {

inline float HalfToFloat(uint16_t h) { return _cvtsh_ss(h); }

inline float Sum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

// The 16 packed bytes as 32 nibbles: the low ones (values 0..15) in the lower half.
inline __m256i Nibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i low = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), low), _mm_and_si128(raw, low));
}

// Each format: its Block, Values (the 32 signed weights), Scale, and kPrefetchEvery (blocks per
// two cache lines of the row NR rows on).
struct Q8_0 {
  using Block = BlockQ8_0;
  static constexpr int kPrefetchEvery = 2;  // 68 bytes
  static __m256i Values(const Block& b) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
  }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
};

struct Q4_0 {
  using Block = BlockQ4_0;
  static constexpr int kPrefetchEvery = 4;  // 72 bytes
  static __m256i Values(const Block& b) {
    return _mm256_sub_epi8(Nibbles(b.qs), _mm256_set1_epi8(8));
  }
  static float Scale(const Block& b) { return HalfToFloat(b.d); }
};

struct Mxfp4 {
  using Block = BlockMXFP4;
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
constexpr int kTokens = 4;

template <typename F, typename D, int NR, int NT>
void Tile(const typename F::Block* const* rows, int64_t nb, const ActQ8_0& x, int64_t t0, float* y,
          int64_t y_stride, int64_t prefetch) {
  __m256 acc[NT][NR];
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < NR; ++i) acc[t][i] = _mm256_setzero_ps();
  const int64_t xnb = x.cols / 32;
  for (int64_t b = 0; b < nb; ++b) {
    __m256i w[NR], aw[NR];
    float dw[NR];
    for (int i = 0; i < NR; ++i) {
      if (prefetch != 0 && b % F::kPrefetchEvery == 0) {
        const char* next = reinterpret_cast<const char*>(rows[i] + b) + prefetch;
        _mm_prefetch(next, _MM_HINT_T0);
        _mm_prefetch(next + 64, _MM_HINT_T0);
      }
      w[i] = F::Values(rows[i][b]);
      aw[i] = _mm256_sign_epi8(w[i], w[i]);
      dw[i] = F::Scale(rows[i][b]);
    }
    for (int t = 0; t < NT; ++t) {
      const __m256i xv =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + (t0 + t) * x.cols + b * 32));
      const float dx = x.d[(t0 + t) * xnb + b];
      for (int i = 0; i < NR; ++i) {
        const __m256 p = _mm256_cvtepi32_ps(D::Dot(aw[i], _mm256_sign_epi8(xv, w[i])));
        acc[t][i] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw[i] * dx), acc[t][i]);
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int i = 0; i < NR; ++i) y[t * y_stride + i] = Sum8(acc[t][i]);
}

template <typename F, typename D, int NR>
void Rows(const PanelArgs& a, const ActQ8_0& x, int64_t r) {
  const WeightMatrix& w = *a.w;
  const typename F::Block* rows[NR];
  for (int i = 0; i < NR; ++i) rows[i] = reinterpret_cast<const typename F::Block*>(w.row(r + i));
  const int64_t nb = w.cols / 32;
  // The first token tile over NR rows prefetches the same blocks NR rows on; later tiles find
  // the rows in L1.
  const auto prefetch = [&](int64_t t) {
    return t == 0 ? NR * static_cast<int64_t>(w.row_bytes) : int64_t{0};
  };
  int64_t t = 0;
  for (; t + kTokens <= a.num_tokens; t += kTokens) {
    Tile<F, D, NR, kTokens>(rows, nb, x, t, a.y + t * w.rows + r, w.rows, prefetch(t));
  }
  for (; t < a.num_tokens; ++t) {
    Tile<F, D, NR, 1>(rows, nb, x, t, a.y + t * w.rows + r, w.rows, prefetch(t));
  }
}

// Decode (fewer tokens than a tile) streams one row at a time, as the Q8_0 panels do.
template <typename F, typename D>
void Panel(const PanelArgs& a, const ActQ8_0& x, int64_t r0, int64_t r1) {
  int64_t r = r0;
  if (a.num_tokens < kTokens) {
    for (; r < r1; ++r) Rows<F, D, 1>(a, x, r);
  }
  for (; r + kRows <= r1; r += kRows) Rows<F, D, kRows>(a, x, r);
  for (; r < r1; ++r) Rows<F, D, 1>(a, x, r);
}

}  // namespace block32
}  // namespace
}  // namespace kvserve::kernels
