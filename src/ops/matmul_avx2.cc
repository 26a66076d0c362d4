// AVX2 + FMA + F16C matmul panels. Compiled with those target flags; only called after a
// run-time CPU check (InitAvx2).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "ops/kquant_unpack.h"
#include "ops/matmul_block32_impl.h"
#include "ops/matmul_f16_impl.h"
#include "ops/matmul_kernels.h"
#include "ops/matmul_packed.h"

namespace kvserve::kernels {
namespace {

// The first token tile over NR rows prefetches the same block NR rows on (see the NOTE on
// prefetch in matmul_avx512.cc); later tiles find the rows in L1.
inline int64_t PrefetchDistance(const WeightMatrix& w, int nr, int64_t t) {
  return t == 0 ? nr * static_cast<int64_t>(w.row_bytes) : 0;
}

inline float Half(uint16_t h) { return _cvtsh_ss(h); }

inline float HorizontalSum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

// --- Q8_0, Q4_0, MXFP4: matmul_block32_impl.h, with this policy -----------------------------

// The signed products through maddubs, the int16 pairs summed by madd.
struct MaddubsDot {
  static __m256i Dot(__m256i unsigned_w, __m256i signed_x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(unsigned_w, signed_x), _mm256_set1_epi16(1));
  }
};

// --- K-quants ---------------------------------------------------------------------------------
// One row at a time (a single sequential stream for decode), up to kKTokens tokens per pass over
// it: a super-block is unpacked once for the tile, and every token then runs the same
// arithmetic whatever tile it is in (batch invariance). Sub-block scales multiply the int16
// pairs of maddubs through madd; everything else per token is whole vectors.

constexpr int kKTokens = 4;

// Int16 lane k of v (the same in both halves of v) in every lane.
inline __m256i BroadcastLane16(__m256i v, int k) {
  return _mm256_shuffle_epi8(v,
                             _mm256_set1_epi16(static_cast<int16_t>((2 * k) | ((2 * k + 1) << 8))));
}

// Q4_K and Q5_K, per super-block: y += d·dx·sum_j(scale_j · q·x over sub-block j)
//                                   - dmin·dx·sum_j(min_j · (sum of x over sub-block j)).
// Chunk by chunk (64 values: two sub-blocks), its values and scales are unpacked into registers
// once and meet each token of the tile; the integer sums are exact, so their order is free.
// Q5_K's values are Q4_K's nibbles plus a fifth bit (16) from qh: bit 2c of qh[l] for element
// 64c + l, bit 2c + 1 for 64c + 32 + l. maddubs pairs stay <= 2 * 31 * 127, no saturation.
template <int NT, typename Block>
requires std::is_same_v<Block, BlockQ4_K> || std::is_same_v<Block, BlockQ5_K>
void KTile(const Block* row, int64_t nsb, const ActQ8K& x, int64_t t0, float* y, int64_t y_stride,
           int64_t prefetch) {
  constexpr bool kFifthBit = std::is_same_v<Block, BlockQ5_K>;
  constexpr int kLines = (sizeof(Block) + 63) / 64;  // 144 bytes: 3 lines; 176: 3
  const __m256i low = _mm256_set1_epi8(0x0F);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const Block& blk = row[s];
    if (prefetch != 0) {
      const char* next = reinterpret_cast<const char*>(&blk) + prefetch;
      for (int l = 0; l < kLines; ++l) _mm_prefetch(next + 64 * l, _MM_HINT_T0);
    }
    const __m128i sm = Q4KScalesAndMins(blk.scales);  // bytes 0-7 scales, 8-15 mins
    const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi64(sm, sm));  // scales, twice
    __m256i qh;  // Q5_K: chunk c's two bits in bits 0 and 1 of each byte (shifted per chunk)
    if constexpr (kFifthBit) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh));
    __m256i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * c));
      __m256i lo = _mm256_and_si256(raw, low);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
      if constexpr (kFifthBit) {
        // 16-bit shifts: each byte's bits 0 and 1 land in its own bit 4 (nothing crosses bytes).
        const __m256i bit4 = _mm256_set1_epi8(0x10);
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
        qh = _mm256_srli_epi16(qh, 2);
      }
      const __m256i sc_lo = BroadcastLane16(sc16, 2 * c), sc_hi = BroadcastLane16(sc16, 2 * c + 1);
      for (int t = 0; t < NT; ++t) {
        const int8_t* xq = x.q + (t0 + t) * x.cols + s * 256 + 64 * c;
        const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
        const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32));
        const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x0), sc_lo);
        const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x1), sc_hi);
        isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(p0, p1));
      }
    }
    // Each min twice, against the two 16-value sums of its sub-block: madd gives min_j times
    // the sub-block's sum in lane j.
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));
    const float d = Half(blk.d), dmin = Half(blk.dmin);
    for (int t = 0; t < NT; ++t) {
      const int64_t tok = t0 + t;
      const float dx = x.d[tok * nsb + s];
      const __m256i bsum =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsum + (tok * nsb + s) * 16));
      const __m256i msum = _mm256_madd_epi16(mins, bsum);  // |.| <= 63 * 32 * 127
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(d * dx), acc[t]);
      acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(dmin * dx), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) y[t * y_stride] = HorizontalSum(acc[t]);
}

// Q6_K: values q - 32 with q in [0, 63]. maddubs takes q (unsigned) against the activations
// (pairs <= 2 * 63 * 127, no saturation) and madd applies the sub-block scales: each 32-value
// group holds two 16-value sub-blocks, so the first 8 int16 lanes take one scale and the last 8
// the next. The offset, 32 · sum_k(scale_k · sum of x over sub-block k), is one madd of the 16
// scales with the token's 16 sub-block sums per super-block. Group by group, the values and
// scales are assembled in registers once and meet each token of the tile (exact integer sums, in
// any order: |isum| <= 256 * 128 * 63 * 127 < 2^31).
template <int NT>
void KTile(const BlockQ6_K* row, int64_t nsb, const ActQ8K& x, int64_t t0, float* y,
           int64_t y_stride, int64_t prefetch) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const BlockQ6_K& blk = row[s];
    if (prefetch != 0) {  // 210 bytes: four lines
      const char* next = reinterpret_cast<const char*>(&blk) + prefetch;
      for (int l = 0; l < 4; ++l) _mm_prefetch(next + 64 * l, _MM_HINT_T0);
    }
    // The 16 scales as int16 in order; half h's eight in both 128-bit lanes of by_half[h]: group
    // g of a half takes its scale 2g in the low lane and 2g + 1 in the high lane (one in-lane
    // shuffle).
    const __m256i sc16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
    const __m256i by_half[2] = {_mm256_permute2x128_si256(sc16, sc16, 0x00),
                                _mm256_permute2x128_si256(sc16, sc16, 0x11)};
    __m256i isum[NT];
    for (int t = 0; t < NT; ++t) isum[t] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
      for (int g = 0; g < 4; ++g) {
        // Group g of half h: elements 128h + 32g .. + 32. Low 4 bits: ql's low (g < 2) or high
        // nibbles of bytes 64h + 32(g % 2) ..; high 2 bits: qh's bits 2g, 2g + 1.
        const __m256i ql =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h + 32 * (g % 2)));
        const __m256i lo4 =
            g < 2 ? _mm256_and_si256(ql, m4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
        const __m256i hi2 = g == 0   ? _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)
                            : g == 1 ? _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)
                            : g == 2 ? _mm256_and_si256(qh, m30)
                                     : _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30);
        const __m256i q = _mm256_or_si256(lo4, hi2);
        const int16_t lo = static_cast<int16_t>((4 * g) | ((4 * g + 1) << 8));
        const int16_t hi = static_cast<int16_t>((4 * g + 2) | ((4 * g + 3) << 8));
        const __m256i sc = _mm256_shuffle_epi8(
            by_half[h],
            _mm256_setr_epi16(lo, lo, lo, lo, lo, lo, lo, lo, hi, hi, hi, hi, hi, hi, hi, hi));
        for (int t = 0; t < NT; ++t) {
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
              x.q + (t0 + t) * x.cols + s * 256 + 128 * h + 32 * g));
          isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv), sc));
        }
      }
    }
    const float d = Half(blk.d);
    for (int t = 0; t < NT; ++t) {
      const int64_t tok = t0 + t;
      const __m256i bsum =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsum + (tok * nsb + s) * 16));
      const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(sc16, bsum), 5);
      const float dx = x.d[tok * nsb + s];
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum[t], offset)),
                               _mm256_set1_ps(d * dx), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) y[t * y_stride] = HorizontalSum(acc[t]);
}

// The panel of each K-quant type (KTile by its block type). Rows [r0, r1) are visited in blocks of
// about 128 KiB of weights: each token tile runs over a block's rows while its activations are in
// L1, and the block stays in L2 across the tiles, so a prefill's activations are read once per
// block of rows rather than once per row (512 tokens of 2048 columns are 1 MiB, beyond L2).
// Decode is one tile: the rows in order, one stream.
template <typename Block>
void KQuantPanelAvx2(const PanelArgs& a, const ActQ8K& x, int64_t r0, int64_t r1) {
  const WeightMatrix& w = *a.w;
  const int64_t nsb = w.cols / 256;
  const int64_t block = std::clamp<int64_t>((128 << 10) / static_cast<int64_t>(w.row_bytes), 4, 64);
  for (int64_t rb = r0; rb < r1; rb += block) {
    const int64_t re = std::min(r1, rb + block);
    ForTokenTiles<kKTokens>(a.num_tokens, [&](auto nt, int64_t t) {
      for (int64_t r = rb; r < re; ++r) {
        KTile<decltype(nt)::value>(reinterpret_cast<const Block*>(w.row(r)), nsb, x, t,
                                   a.y + t * w.rows + r, w.rows, PrefetchDistance(w, 1, t));
      }
    });
  }
}

void F16ToF32Avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = Half(src[i]);
}

// --- F16 / BF16 (see matmul_f16_impl.h) ---------------------------------------------------------

struct Avx2Vec {
  using Vec = __m256;
  static constexpr int kLanes = 8;
  // Decode reads 4 rows side by side: one 8-lane FMA chain per row alone could not keep up
  // with memory (measured 17 GB/s per core with 1 row, 18.5 with 4).
  static constexpr int kDirectRows = 4;
  // 4 rows x 3 tokens fill the 16 registers; from 4 tokens on, the prefill path.
  static constexpr int kDirectTokens = 3;
  static constexpr int64_t kGemmMinTokens = 4;
  // 2 rows x 6 tokens: 12 accumulators, 2 weight vectors and the token's activation vector
  // (loaded once, pinned) of 16 registers: 8 loads per 12 FMAs. 4 x 3 with the activations as
  // FMA memory operands took 16; 1B F16 pp512 on Zen 3: 32.8 -> 41 tokens/s.
  static constexpr int kTileRows = 2;
  static constexpr int kTileTokens = 6;

  static Vec Zero() { return _mm256_setzero_ps(); }
  static Vec Load(const float* p) { return _mm256_loadu_ps(p); }
  static Vec LoadPartial(const float* p, int n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane));
  }
  template <bool kBF16>
  static Vec FromHalf(__m128i h) {
    if constexpr (kBF16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      return _mm256_cvtph_ps(h);
    }
  }
  template <bool kBF16>
  static Vec LoadHalf(const uint16_t* p) {
    return FromHalf<kBF16>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  template <bool kBF16>
  static Vec LoadHalfPartial(const uint16_t* p, int n) {
    uint16_t tmp[8] = {};
    std::memcpy(tmp, p, sizeof(uint16_t) * n);
    return LoadHalf<kBF16>(tmp);
  }
  static Vec Fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static void Pin(Vec& v) { __asm__("" : "+x"(v)); }
  static float Sum(Vec v) { return HorizontalSum(v); }
};

// --- Packed Q4_0 and MXFP4 (ops/matmul_packed.h) ----------------------------------------------
// A group's 64-byte vectors as two halves of 8 rows. Per 4-column slice, maddubs multiplies the
// 8 rows' unsigned values (Q4_0's nibbles w + 8 <= 15; MXFP4's codes through a shuffle table to
// their doubled value + 12 <= 24: the int16 pairs stay below 2 * 24 * 127) with the token's 4
// activation bytes broadcast, and madd sums the pairs: 8 rows' exact block sums in one
// register, then the packed kernels' float epilogue per lane, bit for bit the AVX-512 one.
// (Q8_0's w + 128 would saturate maddubs' int16 pairs: AVX2 reads Q8_0 as stored.)

constexpr int kPackedTokens = 2;  // two tokens x two halves of sums and accumulators

inline __m256i Broadcast4(const int8_t* p) { return _mm256_set1_epi32(packed::Slice4(p)); }

// A vector of nibbles (one per byte) as the unsigned values the block sum multiplies.
inline __m256i PackedValues(packed::Q4_0, __m256i nibbles) { return nibbles; }
inline __m256i PackedValues(packed::MXFP4, __m256i nibbles) {
  const __m128i lut =
      _mm_load_si128(reinterpret_cast<const __m128i*>(packed::MXFP4::kShiftedValues));
  return _mm256_shuffle_epi8(_mm256_set_m128i(lut, lut), nibbles);
}

// Eight rows' weight scales: f16, or MXFP4's exponent bytes as 2^(e - 128) (subnormal for e < 2).
inline __m256 PackedScales(packed::Q4_0, const uint16_t* s) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
}
inline __m256 PackedScales(packed::MXFP4, const uint16_t* s) {
  const __m256i e = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  const __m256i tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, tiny));
}

template <typename F, int NT>
void PackedQ4Tile(const uint8_t* group, int64_t nb, const ActQ8_0& x, int64_t t0, float* y,
                  int64_t y_stride, int64_t rows, bool prefetch) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[NT][2];
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (prefetch && b % 2 == 0) packed::PrefetchPairAhead<F>(group, b);
    const uint8_t* v = packed::BlockValues<F>(group, b);
    const uint16_t* scales = packed::BlockScales<F>(group, b);
    for (int h = 0; h < 2; ++h) {
      __m256i sum[NT];
      for (int t = 0; t < NT; ++t) {
        sum[t] = _mm256_set1_epi32(-F::kOffset * x.sum[(t0 + t) * nb + b]);
      }
      for (int m = 0; m < 4; ++m) {
        const __m256i bytes =
            _mm256_load_si256(reinterpret_cast<const __m256i*>(v + m * 64 + h * 32));
        const __m256i lo = PackedValues(F{}, _mm256_and_si256(bytes, low));
        const __m256i hi = PackedValues(F{}, _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low));
        for (int t = 0; t < NT; ++t) {
          const int8_t* xq = x.q + (t0 + t) * x.cols + b * 32;
          const __m256i plo =
              _mm256_madd_epi16(_mm256_maddubs_epi16(lo, Broadcast4(xq + m * 4)), ones);
          const __m256i phi =
              _mm256_madd_epi16(_mm256_maddubs_epi16(hi, Broadcast4(xq + 16 + m * 4)), ones);
          sum[t] = _mm256_add_epi32(sum[t], _mm256_add_epi32(plo, phi));
        }
      }
      const __m256 dw = PackedScales(F{}, scales + h * 8);
      for (int t = 0; t < NT; ++t) {
        const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(x.d[(t0 + t) * nb + b]));
        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[t]), scale, acc[t][h]);
      }
    }
  }
  for (int t = 0; t < NT; ++t) {
    float* out = y + t * y_stride;
    if (rows == packed::kGroupRows) {
      _mm256_storeu_ps(out, acc[t][0]);
      _mm256_storeu_ps(out + 8, acc[t][1]);
    } else {
      alignas(32) float lanes[16];
      _mm256_store_ps(lanes, acc[t][0]);
      _mm256_store_ps(lanes + 8, acc[t][1]);
      std::memcpy(out, lanes, static_cast<size_t>(rows) * sizeof(float));
    }
  }
}

template <typename F>
void PackedQ4PanelAvx2(const PanelArgs& a, const ActQ8_0& x, int64_t r0, int64_t r1) {
  const WeightMatrix& w = *a.w;
  const int64_t nb = w.cols / 32;
  packed::ForChunksAndGroups<F>(
      w, a.num_tokens, r0, r1,
      [&](const uint8_t* group, int64_t r, int64_t rows, int64_t c0, int64_t c1) {
        int64_t t = c0;
        for (; t + kPackedTokens <= c1; t += kPackedTokens) {
          PackedQ4Tile<F, kPackedTokens>(group, nb, x, t, a.y + t * w.rows + r, w.rows, rows,
                                         t == c0);
        }
        if (t < c1) {
          PackedQ4Tile<F, 1>(group, nb, x, t, a.y + t * w.rows + r, w.rows, rows, t == c0);
        }
      });
}

}  // namespace

// --- Activation quantization ------------------------------------------------------------------
// act_quant.h's arithmetic 8 values at a time, the same bytes (as the AVX-512 version: the
// product rounded on its own, kept from fusing by the empty asm, +-0.5 by its sign, truncated).

inline __m256i RoundToInt(__m256 x, __m256 id) {
  __m256 v = _mm256_mul_ps(x, id);
  asm("" : "+x"(v));
  const __m256 nonnegative = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GE_OQ);
  const __m256 half = _mm256_blendv_ps(_mm256_set1_ps(-0.5f), _mm256_set1_ps(0.5f), nonnegative);
  return _mm256_cvttps_epi32(_mm256_add_ps(v, half));
}

// The scale d of n values (a multiple of 8) and the inverse the values are multiplied by.
inline float BlockScaleOf(const float* x, int n, float& id) {
  const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(abs, _mm256_loadu_ps(x + i)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float d = _mm_cvtss_f32(h) / 127.f;
  id = d > 0.f ? 1.f / d : 0.f;
  return d;
}

// 32 values from four vectors of int32 (each in [-127, 127]) as bytes in order.
inline __m256i NarrowToBytes(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline int32_t SumOf(__m256i v) {
  __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
  h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
  return _mm_cvtsi128_si32(h);
}

void QuantizeActQ8_0Avx2(const float* x, int64_t num_tokens, ActQ8_0& out) {
  const int64_t nb = out.cols / 32;
  for (int64_t i = 0; i < num_tokens * nb; ++i) {  // block i of the batch
    const float* xb = x + i * 32;
    float id;
    out.d[i] = BlockScaleOf(xb, 32, id);
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = RoundToInt(_mm256_loadu_ps(xb + 8 * k), idv);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q + i * 32),
                        NarrowToBytes(q[0], q[1], q[2], q[3]));
  }
}

void QuantizeActQ8KAvx2(const float* x, int64_t num_tokens, ActQ8K& out) {
  const int64_t nsb = out.cols / 256;
  for (int64_t i = 0; i < num_tokens * nsb; ++i) {  // super-block i of the batch
    const float* xs = x + i * 256;
    float id;
    out.d[i] = BlockScaleOf(xs, 256, id);
    const __m256 idv = _mm256_set1_ps(id);
    for (int k = 0; k < 8; ++k) {  // 32 values: sub-blocks 2k, 2k + 1 of 16
      __m256i q[4];
      for (int v = 0; v < 4; ++v) q[v] = RoundToInt(_mm256_loadu_ps(xs + 32 * k + 8 * v), idv);
      const __m256i bytes = NarrowToBytes(q[0], q[1], q[2], q[3]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q + i * 256 + 32 * k), bytes);
      out.bsum[i * 16 + 2 * k] = static_cast<int16_t>(SumOf(_mm256_add_epi32(q[0], q[1])));
      out.bsum[i * 16 + 2 * k + 1] = static_cast<int16_t>(SumOf(_mm256_add_epi32(q[2], q[3])));
      if (out.qu != nullptr) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.qu + i * 256 + 32 * k),
                            _mm256_xor_si256(bytes, _mm256_set1_epi8(static_cast<char>(0x80))));
      }
    }
  }
}

bool InitAvx2(KernelTable& table) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return false;
  table.isa = "avx2";
  table.quantize_q8_0 = &QuantizeActQ8_0Avx2;
  table.quantize_q8k = &QuantizeActQ8KAvx2;
  table.q8_0 = &block32::Panel<block32::Q8_0, MaddubsDot>;
  table.q4_0 = &block32::Panel<block32::Q4_0, MaddubsDot>;
  table.q5_0 = &block32::Panel<block32::Q5_0, MaddubsDot>;
  table.q4_1 = &block32::Panel<block32::Q4_1, MaddubsDot>;
  table.q5_1 = &block32::Panel<block32::Q5_1, MaddubsDot>;
  table.q4_0_packed = &PackedQ4PanelAvx2<packed::Q4_0>;
  table.mxfp4_packed = &PackedQ4PanelAvx2<packed::MXFP4>;
  table.mxfp4 = &block32::Panel<block32::Mxfp4, MaddubsDot>;
  table.q4_k = &KQuantPanelAvx2<BlockQ4_K>;
  table.q5_k = &KQuantPanelAvx2<BlockQ5_K>;
  table.q6_k = &KQuantPanelAvx2<BlockQ6_K>;
  table.f16_to_f32 = &F16ToF32Avx2;
  table.f16 = &half::Panel<Avx2Vec, false>;
  table.bf16 = &half::Panel<Avx2Vec, true>;
  return true;
}

}  // namespace kvserve::kernels
