// The paged attention kernel, written once over GCC/Clang vectors of KVSERVE_ATTN_LANES floats and
// compiled once per instruction set (attention.cc: portable, attention_avx2.cc,
// attention_avx512.cc), each TU with its own target flags. Everything here has internal linkage so
// the per-ISA copies never merge at link time. Internal to ops/; see attention.h for the contract.
//
// Per query row (one query head of one token) and per partition of kAttentionPartition slots:
//   for each chunk of kChunk = 4W slots (W = lanes, chunk starts are multiples of kChunk from
//   slot 0):
//     scores = q · K^T over the chunk (K converted to f32 once per W slots for all rows of the
//     tile; each slot's dot product one vector accumulator over the columns in order, then its
//     lanes summed by a fixed tree), slots the row may not see masked to -inf;
//     online softmax: m = max(m, max(scores)), rescale l and acc when m grows,
//     p = exp(scores - m), l += sum(p), acc += sum_s p[s] * V[s] over the row's visible slots
//     (in blocks of at most kAccVectors vectors of columns; a block of fewer sums its even and
//     odd slots separately, then adds them; two rows of one token share each value load where
//     the registers hold both, kAccRows).
// Partition states are folded in partition order (FoldPartial) and normalised at the end.
// Quantized KV types (quant/kv_dtype.h) are converted as stored (integer levels, raw fp8) and
// each slot's scale and minimum are applied to its score and its probability instead (see
// SlotScale). Against int4 (rotated) keys each query row is rotated once; int4 values are
// accumulated rotated and each row's partition state is rotated back at the partition's end.
// Every step of a row depends only on its own number of visible slots (its position), never on
// the other rows of the tile, the tile size or on which thread computed which partition.
#pragma once

#ifndef KVSERVE_ATTN_LANES
#error "define KVSERVE_ATTN_LANES before including ops/attention_kernel.h"
#endif

#if defined(__AVX512F__) || defined(__F16C__) || defined(__FMA__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "ops/attention.h"
#include "ops/attention_isa.h"
#include "ops/exp_poly.h"
#include "ops/prefetch.h"
#include "util/fp16.h"

namespace kvserve {
namespace {

constexpr int W = KVSERVE_ATTN_LANES;
static_assert(kAttentionMaxLanes % W == 0, "chunks start at multiples of kAttentionMaxLanes");
typedef float VF __attribute__((vector_size(W * sizeof(float))));
typedef int32_t VI __attribute__((vector_size(W * sizeof(int32_t))));

inline VF LoadF(const float* p) {
  VF v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void StoreF(float* p, VF v) { std::memcpy(p, &v, sizeof(v)); }
// NOTE: not VF{} + x: adding zero is not an identity for floats (-0 + 0 = +0), so the compiler
// must emit the addition before the broadcast, and in ScoreRows every FMA paid for it
// (one vaddss + vbroadcastss per FMA instead of a broadcast operand).
template <size_t... I>
inline VF SplatImpl(float x, std::index_sequence<I...>) {
  return VF{((void)I, x)...};
}
inline VF SplatF(float x) { return SplatImpl(x, std::make_index_sequence<W>{}); }
// a * b + c, fused where the ISA has FMA. The TUs are built with -ffp-contract=off, so these are
// the only fused operations and they are the same in every instantiation.
inline VF Fma(VF a, VF b, VF c) {
#if KVSERVE_ATTN_LANES == 16 && defined(__AVX512F__)
  __m512 x, y, z;
  std::memcpy(&x, &a, sizeof(x));
  std::memcpy(&y, &b, sizeof(y));
  std::memcpy(&z, &c, sizeof(z));
  const __m512 r = _mm512_fmadd_ps(x, y, z);
  VF v;
  std::memcpy(&v, &r, sizeof(v));
  return v;
#elif KVSERVE_ATTN_LANES == 8 && defined(__FMA__)
  __m256 x, y, z;
  std::memcpy(&x, &a, sizeof(x));
  std::memcpy(&y, &b, sizeof(y));
  std::memcpy(&z, &c, sizeof(z));
  const __m256 r = _mm256_fmadd_ps(x, y, z);
  VF v;
  std::memcpy(&v, &r, sizeof(v));
  return v;
#else
  return a * b + c;
#endif
}
inline VF Fma(VF a, float b, VF c) { return Fma(a, SplatF(b), c); }
inline VF Fma(float a, VF b, VF c) { return Fma(SplatF(a), b, c); }

inline VI Iota() {
  VI v;
  for (int i = 0; i < W; ++i) v[i] = i;
  return v;
}

typedef uint16_t VH __attribute__((vector_size(W * sizeof(uint16_t))));

// Widening loads, spelled with intrinsics where the ISA has them (GCC 12 scalarizes a
// __builtin_convertvector from bytes to 32-bit lanes).
// W bytes at p to 32-bit lanes, sign- or zero-extended.
template <bool kSigned>
inline VI WidenBytes(const uint8_t* p) {
  VI v;
#if KVSERVE_ATTN_LANES == 16 && defined(__AVX512F__)
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m512i x = kSigned ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
  std::memcpy(&v, &x, sizeof(v));
#elif KVSERVE_ATTN_LANES == 8 && defined(__AVX2__)
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m256i x = kSigned ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
  std::memcpy(&v, &x, sizeof(v));
#else
  for (int k = 0; k < W; ++k) v[k] = kSigned ? static_cast<int8_t>(p[k]) : p[k];
#endif
  return v;
}
// W bytes at p to 16-bit lanes, sign- or zero-extended.
template <bool kSigned>
inline VH WidenBytesTo16(const uint8_t* p) {
  VH v;
#if KVSERVE_ATTN_LANES == 16 && defined(__AVX512F__)
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i x = kSigned ? _mm256_cvtepi8_epi16(b) : _mm256_cvtepu8_epi16(b);
  std::memcpy(&v, &x, sizeof(v));
#elif KVSERVE_ATTN_LANES == 8 && defined(__AVX2__)
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i x = kSigned ? _mm_cvtepi8_epi16(b) : _mm_cvtepu8_epi16(b);
  std::memcpy(&v, &x, sizeof(v));
#else
  for (int k = 0; k < W; ++k) {
    v[k] = kSigned ? static_cast<uint16_t>(static_cast<int8_t>(p[k])) : p[k];
  }
#endif
  return v;
}
// W 16-bit values at p to 32-bit lanes, zero-extended.
inline VI WidenHalves(const uint8_t* p) {
  VI v;
#if KVSERVE_ATTN_LANES == 16 && defined(__AVX512F__)
  const __m512i x = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  std::memcpy(&v, &x, sizeof(v));
#elif KVSERVE_ATTN_LANES == 8 && defined(__AVX2__)
  const __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  std::memcpy(&v, &x, sizeof(v));
#else
  for (int k = 0; k < W; ++k) {
    uint16_t h;
    std::memcpy(&h, p + 2 * k, sizeof(h));
    v[k] = h;
  }
#endif
  return v;
}
inline VF ToFloat(VI v) { return __builtin_convertvector(v, VF); }

// W halves to floats (F16C where the ISA has it).
inline VF HalfToF(VH h) {
#if KVSERVE_ATTN_LANES == 16 && defined(__AVX512F__)
  __m256i x;
  std::memcpy(&x, &h, sizeof(x));
  const __m512 f = _mm512_cvtph_ps(x);
  VF v;
  std::memcpy(&v, &f, sizeof(v));
  return v;
#elif KVSERVE_ATTN_LANES == 8 && defined(__F16C__)
  __m128i x;
  std::memcpy(&x, &h, sizeof(x));
  const __m256 f = _mm256_cvtph_ps(x);
  VF v;
  std::memcpy(&v, &f, sizeof(v));
  return v;
#else
  VF v;
  for (int k = 0; k < W; ++k) v[k] = F16ToF32(h[k]);
  return v;
#endif
}

// The per-slot constants of a head vector (see quant/kv_dtype.h for the layouts): value =
// raw · s · RawFactor + m, where raw is what LoadKvRaw returns (the integer level for int8 and
// int4, the e4m3 value / 256 for e4m3, the value itself for the float types) and s and m are
// the slot's f16 scale and minimum. Attention folds them into the scores (keys) and the
// probabilities (values) instead of scaling every element; a chunk's 16 scales are converted
// from f16 together.
template <KvDtype DT>
constexpr bool kHasScale = DT == KvDtype::kInt8 || DT == KvDtype::kFp8E4M3 || DT == KvDtype::kInt4;
inline float RawFactor(KvDtype d) { return d == KvDtype::kFp8E4M3 ? 256.f : 1.f; }

// The f16 bits of a slot's scale and minimum (0 where the type has none).
template <KvDtype DT, int D>
inline void ReadSlotScale(const uint8_t* row, uint16_t* s, uint16_t* m) {
  if constexpr (DT == KvDtype::kInt8 || DT == KvDtype::kFp8E4M3) {
    std::memcpy(s, row + D, sizeof(*s));
  } else if constexpr (DT == KvDtype::kInt4) {
    std::memcpy(s, row + D / 2, sizeof(*s));
    std::memcpy(m, row + D / 2 + 2, sizeof(*m));
  }
}

// W raw values of a head vector of type DT starting at element i (a multiple of W); exact.
template <KvDtype DT, int D>
inline VF LoadKvRaw(const uint8_t* row, int i) {
  if constexpr (DT == KvDtype::kF32) {
    return LoadF(reinterpret_cast<const float*>(row) + i);
  } else if constexpr (DT == KvDtype::kF16) {
    VH h;
    std::memcpy(&h, row + 2 * i, sizeof(h));
    return HalfToF(h);
  } else if constexpr (DT == KvDtype::kBF16) {
    const VI bits = WidenHalves(row + 2 * i) << 16;
    VF v;
    std::memcpy(&v, &bits, sizeof(v));
    return v;
  } else if constexpr (DT == KvDtype::kInt8) {
    return ToFloat(WidenBytes<true>(row + i));
  } else if constexpr (DT == KvDtype::kFp8E4M3) {
    // Sign-extended byte << 7 puts the sign in bit 15 (and a copy in bit 14, cleared) and the
    // exponent and mantissa where an f16's low exponent bits and high mantissa bits are.
    return HalfToF((WidenBytesTo16<true>(row + i) << 7) & 0xBF80);
  } else if constexpr (DT == KvDtype::kFp8E5M2) {
    return HalfToF(WidenBytesTo16<false>(row + i) << 8);
  } else {
    static_assert(DT == KvDtype::kInt4);
    // Groups of G elements in G/2 bytes: low nibbles are the group's first half.
    constexpr int G = D < 32 ? D : 32, half = G / 2;
    const int g = i / G, o = i % G;
    VI q;
    if constexpr (W <= half) {
      q = WidenBytes<false>(row + g * half + o % half);
      q = o < half ? (q & 0xF) : (q >> 4);
    } else {
      // W == G (head_dim 16 at 16 lanes): the group's bytes twice, low nibbles then high.
      static_assert(W == G);
      uint8_t twice[W];
      std::memcpy(twice, row + g * half, half);
      std::memcpy(twice + half, row + g * half, half);
      q = (WidenBytes<false>(twice) >> (Iota() / half * 4)) & 0xF;
    }
    return ToFloat(q);
  }
}

// Permutation masks, built at compile time: within every segment of 2h lanes, the low (lo) or
// high (hi) h lanes of two vectors side by side; swap<h> maps lane l to l ^ h.
constexpr int LoLane(int l, int h) {
  return (l & (2 * h - 1)) < h ? (l & ~(2 * h - 1)) + (l & (2 * h - 1))
                               : W + (l & ~(2 * h - 1)) + (l & (2 * h - 1)) - h;
}
constexpr int HiLane(int l, int h) {
  return (l & (2 * h - 1)) < h ? (l & ~(2 * h - 1)) + h + (l & (2 * h - 1))
                               : W + (l & ~(2 * h - 1)) + (l & (2 * h - 1));
}
template <int H, size_t... L>
inline VF ShuffleLo(VF x, VF y, std::index_sequence<L...>) {
  return __builtin_shufflevector(x, y, LoLane(static_cast<int>(L), H)...);
}
template <int H, size_t... L>
inline VF ShuffleHi(VF x, VF y, std::index_sequence<L...>) {
  return __builtin_shufflevector(x, y, HiLane(static_cast<int>(L), H)...);
}
template <int H, size_t... L>
inline VF SwapLanes(VF v, std::index_sequence<L...>) {
  return __builtin_shufflevector(v, v, (static_cast<int>(L) ^ H)...);
}
// Lane l: -1 where l & H, else +1.
template <int H, size_t... L>
constexpr VF ButterflySign(std::index_sequence<L...>) {
  return VF{((static_cast<int>(L) & H) != 0 ? -1.f : 1.f)...};
}

// Fixed-order horizontal max / sum (a butterfly; every lane ends up with the result).
template <int H = 1>
inline VF AllMax(VF v) {
  const VF t = SwapLanes<H>(v, std::make_index_sequence<W>{});
  v = v > t ? v : t;
  if constexpr (2 * H < W) {
    return AllMax<2 * H>(v);
  } else {
    return v;
  }
}
template <int H = 1>
inline VF AllSum(VF v) {
  v = v + SwapLanes<H>(v, std::make_index_sequence<W>{});
  if constexpr (2 * H < W) {
    return AllSum<2 * H>(v);
  } else {
    return v;
  }
}
inline float HMax(VF v) { return AllMax(v)[0]; }
inline float HSum(VF v) { return AllSum(v)[0]; }

// exp(x) for x <= 0 (ExpPoly, ~1 ulp); x below -87 is clamped (result ~1e-38).
inline VF Exp(VF x) {
  x = x < -87.0f ? SplatF(-87.0f) : x;
  return ExpPoly<VF, VI>(
      x, [](VF a, VF b, VF c) { return Fma(a, b, c); }, [](float c) { return SplatF(c); });
}
inline float ExpScalar(float x) { return Exp(SplatF(x))[0]; }

// c * tanh(x / c) (gemma2's soft-capped scores): tanh(|a|) = (1 - e) / (1 + e) with
// e = exp(-2|a|), the sign put back.
inline VF SoftCap(VF x, float c) {
  const VF a = x * (1.f / c);
  const VF abs = a < 0.f ? -a : a;
  const VF e = Exp(abs * -2.f);
  const VF t = (1.f - e) / (1.f + e);
  return (a < 0.f ? -t : t) * c;
}

// The rotation of rotated KV types (quant/kv_dtype.h): R = H·S / sqrt(d). Stage for stage the
// same additions as RotateKvVector / UnrotateKvVector, so the results are bit-identical to them.
template <int D>
struct RotationSigns {
  float v[D];
  constexpr RotationSigns() : v() {
    for (int i = 0; i < D; ++i) v[i] = KvRotationFlips(i) ? -1.f : 1.f;
  }
};
template <int D>
inline constexpr RotationSigns<D> kRotationSigns{};

template <int H = 1>
inline VF FwhtLanes(VF v) {
  constexpr VF sign = ButterflySign<H>(std::make_index_sequence<W>{});
  // Lane l without bit H: v[l ^ H] + v[l] = a + b; with it: v[l ^ H] - v[l] = a - b.
  v = SwapLanes<H>(v, std::make_index_sequence<W>{}) + v * sign;
  if constexpr (2 * H < W) {
    return FwhtLanes<2 * H>(v);
  } else {
    return v;
  }
}

// Walsh-Hadamard transform (unnormalised) of D floats held as D / W vectors.
template <int D>
inline void Fwht(VF* v) {
  constexpr int n = D / W;
  for (int k = 0; k < n; ++k) v[k] = FwhtLanes(v[k]);
  for (int h = 1; h < n; h *= 2) {
    for (int k = 0; k < n; k += 2 * h) {
      for (int j = k; j < k + h; ++j) {
        const VF a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
}

inline float RotationScale(int d) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
}

// out = R·q (the query of a row against rotated keys). Rotations run once per row (and
// partition), out of line so that they stay out of RunPartition's hot code.
template <int D>
__attribute__((noinline)) void RotateQuery(const float* q, float* out) {
  VF v[D / W];
  for (int k = 0; k < D / W; ++k) v[k] = LoadF(q + k * W) * LoadF(kRotationSigns<D>.v + k * W);
  Fwht<D>(v);
  const float s = RotationScale(D);
  for (int k = 0; k < D / W; ++k) StoreF(out + k * W, v[k] * s);
}

// acc = Rᵀ·acc (a row's weighted sum of rotated values back to the model's basis).
template <int D>
__attribute__((noinline)) void UnrotateAcc(float* acc) {
  VF v[D / W];
  for (int k = 0; k < D / W; ++k) v[k] = LoadF(acc + k * W);
  Fwht<D>(v);
  const float s = RotationScale(D);
  for (int k = 0; k < D / W; ++k) {
    StoreF(acc + k * W, (v[k] * s) * LoadF(kRotationSigns<D>.v + k * W));
  }
}

// Partial state of one row: acc[D], then m, then l.
template <int D>
inline void FoldPartial(float* merged, const float* part) {
  const float m0 = merged[D], m1 = part[D];
  const float m = std::max(m0, m1);
  const float a = ExpScalar(m0 - m), b = ExpScalar(m1 - m);
  merged[D] = m;
  merged[D + 1] = merged[D + 1] * a + part[D + 1] * b;  // not contracted (-ffp-contract=off)
  for (int i = 0; i < D; i += W) StoreF(merged + i, Fma(LoadF(part + i), b, LoadF(merged + i) * a));
}

// out = acc / l; with a sink logit (not kNoAttentionSink), the sink's term joins l first:
// m' = max(m, sink), l' = l exp(m - m') + exp(sink - m'), out = acc exp(m - m') / l'.
template <int D>
inline void FinishRow(const float* merged, float* out, float* lse, float sink) {
  float m = merged[D], l = merged[D + 1];
  if (sink == kNoAttentionSink) {
    for (int i = 0; i < D; i += W) StoreF(out + i, LoadF(merged + i) / l);
  } else {
    const float mm = std::max(m, sink);
    const float a = ExpScalar(m - mm);
    l = l * a + ExpScalar(sink - mm);  // not contracted (-ffp-contract=off)
    m = mm;
    for (int i = 0; i < D; i += W) StoreF(out + i, (LoadF(merged + i) * a) / l);
  }
  if (lse != nullptr) *lse = m + std::log(l);
}

// RunPartition's softmax chunk: kChunkVectors vectors of W slots. One online-softmax step (the
// maximum, its rescale, the exponentials and their sum: a chain of dependent operations per
// row) covers the whole chunk, so its latency is paid once per 4W slots rather than once per W
// (f16, 64-dim heads in groups of 4, 256 cached, one Zen 3 thread: 475 -> 380 ns per 8 slots).
constexpr int kChunkVectors = 4;
constexpr int kChunk = kChunkVectors * W;
static_assert(kAttentionPartition % kChunk == 0, "a partition is whole chunks");

// Per-thread buffers of the kernel.
struct TileScratch {
  std::vector<float> kf, vf, scores, probs, state, merged, qrot, qsum;
  std::vector<const float*> qrows;  // the tile's query rows (PrepareTile)
  // Long head vectors (D > 128): per row of a chunk, its rescale factor (< 0: none), the int4
  // minimums' share and its visible slots, between the two passes over the rows.
  std::vector<float> row_alpha, row_pm;
  std::vector<int> row_v, row_u;
  void Reserve(int rows, int d) {
    auto grow = [](std::vector<float>& v, size_t n) {
      if (v.size() < n) v.resize(n);
    };
    if (d > 128) {
      grow(row_alpha, static_cast<size_t>(rows));
      grow(row_pm, static_cast<size_t>(rows));
      if (row_v.size() < static_cast<size_t>(rows)) row_v.resize(static_cast<size_t>(rows));
      if (row_u.size() < static_cast<size_t>(rows)) row_u.resize(static_cast<size_t>(rows));
      grow(probs, static_cast<size_t>(rows) * kChunk);
    }
    grow(kf, static_cast<size_t>(d) * W);
    grow(vf, static_cast<size_t>(d) * kChunk);
    grow(scores, static_cast<size_t>(rows) * kChunk);
    grow(probs, 2 * kChunk);  // two rows' (RunPartition pairs a token's rows)
    grow(state, static_cast<size_t>(rows) * (d + 2));
    grow(merged, static_cast<size_t>(rows) * (d + 2));
    grow(qrot, static_cast<size_t>(rows) * d);
    grow(qsum, static_cast<size_t>(rows));
  }
};
inline TileScratch& Scratch() {
  thread_local TileScratch s;
  return s;
}

// Lane s of the result: the sum of v[s]'s lanes (v[0..W) are overwritten). Stage h adds, for
// each i < h, v[i] and v[i + h] lane-wise folded in halves of every 2h-lane segment, so every
// lane of the result is one fixed tree of additions.
template <int H = W / 2>
__attribute__((always_inline)) inline VF SumEachVector(VF* v) {
  for (int i = 0; i < H; ++i) {
    const VF x = v[i], y = v[i + H];
    v[i] = ShuffleLo<H>(x, y, std::make_index_sequence<W>{}) +
           ShuffleHi<H>(x, y, std::make_index_sequence<W>{});
  }
  if constexpr (H > 1) {
    return SumEachVector<H / 2>(v);
  } else {
    return v[0];
  }
}

// Scores of one row against a chunk of W raw keys kf[W][D]: lane s = (q · k_s) * ks[s], and
// with kMin also + km[s] * qsum (int4: Σ_i q_i (s·c_i + m) = s (q·c) + m Σ_i q_i). ks and km are
// per slot with the softmax scale folded in; for f32/f16 ks is the softmax scale in every lane.
// Each slot's dot product is one vector accumulator over the columns in order (W independent
// chains), then SumEachVector.
template <int D, bool kMin>
inline void ScoreRow(const float* q, const float* kf, VF ks, VF km, float qsum, float* scores) {
  VF acc[W];
  for (int s = 0; s < W; ++s) {
    const float* k = kf + s * D;
    VF a = LoadF(q) * LoadF(k);
    for (int i = W; i < D; i += W) a = Fma(LoadF(q + i), LoadF(k + i), a);
    acc[s] = a;
  }
  const VF dot = SumEachVector(acc);
  if constexpr (kMin) {
    StoreF(scores, Fma(km, qsum, dot * ks));
  } else {
    StoreF(scores, dot * ks);
  }
}

// Scores of rows [rc, rows) against a converted K chunk of W slots, into
// sc_scores + r * stride.
template <int D>
inline void ScoreChunk(int rc, int rows, const float* const* qrows, const float* kf, VF ks, VF km,
                       bool k_min, const float* qsum, float* sc_scores, int stride = W) {
  for (int r = rc; r < rows; ++r) {
    float* out = sc_scores + static_cast<size_t>(r) * stride;
    if (k_min) {
      ScoreRow<D, true>(qrows[r], kf, ks, km, qsum[r], out);
    } else {
      ScoreRow<D, false>(qrows[r], kf, ks, km, 0.f, out);
    }
  }
}

// Walks slots [s0, s0 + n) of the block table, calling fn(i, slot pointer) for K or V.
template <bool kIsK, typename Fn>
inline void ForSlots(const PagedKvLayerView& kv, std::span<const BlockId> table, int kv_head, int s0,
                     int n, Fn&& fn) {
  // The slot pointer steps through each block's contiguous tile; the block table is read once per
  // block, not once per slot.
  const size_t bytes = kIsK ? kv.k_head_bytes : kv.v_head_bytes;
  int blk = s0 / kv.block_size, off = s0 % kv.block_size;
  for (int i = 0; i < n;) {
    const uint8_t* p =
        kIsK ? kv.KSlot(table[blk], kv_head, off) : kv.VSlot(table[blk], kv_head, off);
    const int end = std::min(n, i + kv.block_size - off);
    for (; i < end; ++i, p += bytes) fn(i, p);
    off = 0;
    ++blk;
  }
}

// Asks for slots [s0, s1) of the table's K and V for kv_head (prefetches; no arithmetic changes).
// Each (block, kv_head) tile is contiguous, but consecutive blocks lie anywhere in the arena and
// the hardware prefetchers follow streams, not the block table. Slots past the table are skipped.
__attribute__((always_inline)) inline void PrefetchSlots(const PagedKvLayerView& kv,
                                                         std::span<const BlockId> table,
                                                         int kv_head, int s0, int s1) {
  const int end =
      static_cast<int>(std::min<int64_t>(s1, static_cast<int64_t>(table.size()) * kv.block_size));
  if (s0 >= end) return;
  auto lines = [](const uint8_t* p, size_t bytes) {
    for (size_t i = 0; i < bytes; i += 64) PrefetchLine(p + i);
  };
  ForSlots<true>(kv, table, kv_head, s0, end - s0,
                 [&](int, const uint8_t* p) { lines(p, kv.k_head_bytes); });
  ForSlots<false>(kv, table, kv_head, s0, end - s0,
                  [&](int, const uint8_t* p) { lines(p, kv.v_head_bytes); });
}

// One row's online-softmax step over a chunk (its visible slots u..v-1's scores at `scores`,
// kChunkVectors vectors of W): the running maximum and sum in st[D] and st[D + 1] are updated, the
// probabilities (times the value scales vs[g]) written to probs, the int4 minimums' share
// Σ p_s m_s to *pm, and the factor the row's running values must be rescaled by is returned
// (< 0: none; an alpha of 0 still zeroes them). The vectors' maxima, sums and shares are taken
// in vector order, then across lanes.
template <int D>
inline float SoftmaxStep(float* st, const float* scores, int u, int v, VI iota, bool v_scaled,
                         const VF* vs, bool v_min, const VF* vm, float* probs, float* pm) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  VF s[kChunkVectors];
  VI valid[kChunkVectors];
  VF mx = SplatF(kNegInf);
  for (int g = 0; g < kChunkVectors; ++g) {
    const VI lane = iota + g * W;
    valid[g] = (lane < (VI{} + v)) & (lane >= (VI{} + u));
    s[g] = valid[g] ? LoadF(scores + g * W) : SplatF(kNegInf);
    mx = mx > s[g] ? mx : s[g];
  }
  const float cm = HMax(mx);
  float m = st[D], l = st[D + 1];
  float alpha = -1.f;
  if (cm > m) {
    if (m != kNegInf) {
      alpha = ExpScalar(m - cm);
      l *= alpha;
    }
    m = cm;
  }
  VF sum{}, share{};
  for (int g = 0; g < kChunkVectors; ++g) {
    VF pr = Exp(s[g] - m);
    pr = valid[g] ? pr : VF{};
    sum += pr;
    // Quantized values: Σ p_s (s_s c_s + m_s) = Σ (p_s s_s) c_s + Σ p_s m_s. Lanes the row does
    // not see are selected out rather than multiplied by zero: their slots' scales may be
    // anything (slots outside a sliding window, vectors of the chunk not loaded).
    if (v_min) share += valid[g] ? pr * vm[g] : VF{};
    if (v_scaled) pr = valid[g] ? pr * vs[g] : VF{};
    StoreF(probs + g * W, pr);
  }
  l += HSum(sum);
  *pm = v_min ? HSum(share) : 0.f;
  st[D] = m;
  st[D + 1] = l;
  return alpha;
}

// The most vectors of columns one AccumulateValues call sums (its accumulators and a broadcast
// probability stay in registers: 16 on AVX2).
constexpr int kAccVectors = 8;

// R rows' running values, NB vectors of columns at st[i] (each row's state; vf holds the chunk's
// converted values, D floats per slot, offset to the same columns): rescaled by alpha[i] when the
// row's maximum grew (alpha >= 0, as SoftmaxStep returns it), then acc += Σ_k probs[i][k] v_k over
// the rows' visible slots u..v-1 (rows of one token: the same slots), summed in one accumulator
// per vector and row, slot by slot. Fewer than kAccVectors vectors would make too few FMA
// dependency chains: there two interleaved partial sums (slots u, u + 2, ... and u + 1, u + 3,
// ...) are added at the end. Then acc += sum (+ pm[i], the minimums' share, for int4 values).
// Each value vector is loaded once for the R rows; every row's arithmetic is the same whatever R.
// `values(k, i)`: vector i of the block's columns of the chunk's slot k.
template <int D, int NB, int R, typename Values>
__attribute__((always_inline)) inline void AccumulateValues(float* const* st, Values&& values,
                                                            const float* const* probs, int u, int v,
                                                            const float* alpha, bool v_min,
                                                            const float* pm) {
  static_assert(NB <= kAccVectors);
  VF sum[R][NB] = {};
  if constexpr (NB < kAccVectors) {
    VF odd[R][NB] = {};
    int k = u;
    for (; k + 2 <= v; k += 2) {
      for (int i = 0; i < NB; ++i) {
        const VF x0 = values(k, i), x1 = values(k + 1, i);
        for (int r = 0; r < R; ++r) {
          sum[r][i] = Fma(probs[r][k], x0, sum[r][i]);
          odd[r][i] = Fma(probs[r][k + 1], x1, odd[r][i]);
        }
      }
    }
    if (k < v) {
      for (int i = 0; i < NB; ++i) {
        const VF x0 = values(k, i);
        for (int r = 0; r < R; ++r) sum[r][i] = Fma(probs[r][k], x0, sum[r][i]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int i = 0; i < NB; ++i) sum[r][i] = sum[r][i] + odd[r][i];
    }
  } else {
    for (int k = u; k < v; ++k) {
      for (int i = 0; i < NB; ++i) {
        const VF x0 = values(k, i);
        for (int r = 0; r < R; ++r) sum[r][i] = Fma(probs[r][k], x0, sum[r][i]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < NB; ++i) {
      VF acc = LoadF(st[r] + i * W);
      if (alpha[r] >= 0.f) acc *= alpha[r];
      StoreF(st[r] + i * W, v_min ? acc + (sum[r][i] + pm[r]) : acc + sum[r][i]);
    }
  }
}

// How many rows AccumulateValues<D, NB, R> takes at once: two where both rows' accumulators and a
// slot's value vectors fit the registers (AVX-512's 32; AVX2's 16 hold one row of 8 vectors).
template <int NB>
constexpr int kAccRows = 2 * (NB < kAccVectors ? 2 * NB : NB) <= (W == 16 ? 16 : 8) ? 2 : 1;

// The columns of a row in blocks of kAccVectors vectors (then the rest), each by
// AccumulateValues; fn<NB>(first column) calls it for the block.
template <int D, typename Fn>
inline void ForAccumulateBlocks(Fn&& fn) {
  constexpr int kCols = kAccVectors * W;
  for (int b = 0; b + kCols <= D; b += kCols) fn.template operator()<kAccVectors>(b);
  if constexpr (D % kCols != 0) fn.template operator()<(D % kCols) / W>(D - D % kCols);
}

// Chunk conversion, once per chunk for all rows of the tile (dispatched on the dtype once per
// chunk, so the per-element code is straight-line for each type). RunPartition is instantiated
// per conversion mode (kConv): f32/f16 caches, and K and V both int8, both fp8_e4m3 or both
// int4, inline their conversions and the partition loop makes no calls; other combinations
// convert each chunk in an out-of-line call. (Inlining every conversion into one loop crowds it
// out of the inliner's budget, and any call in the loop makes the compiler keep its vector
// constants out of registers: each costs about 10%.)
// Per-slot scales and minimums of a chunk as f16 bits (slots past nc: 0).
struct ChunkScales {
  uint16_t s[W], m[W];
  VF Scales() const { return HalfToF(Load(s)); }
  VF Mins() const { return HalfToF(Load(m)); }
  static VH Load(const uint16_t* p) {
    VH h;
    std::memcpy(&h, p, sizeof(h));
    return h;
  }
};

// K: the nc slots at ptr converted (raw) to kf[W][D]; slots past nc are zero.
template <int D, KvDtype DT>
inline void ConvertKChunkT(const uint8_t* const* ptr, int nc, float* kf, ChunkScales* cs) {
  if constexpr (kHasScale<DT>) {
    for (int s = 0; s < W; ++s) {
      cs->s[s] = cs->m[s] = 0;
      if (s < nc) ReadSlotScale<DT, D>(ptr[s], &cs->s[s], &cs->m[s]);
    }
  }
  for (int s = 0; s < W; ++s) {
    for (int i = 0; i < D; i += W) {
      StoreF(kf + s * D + i, s < nc ? LoadKvRaw<DT, D>(ptr[s], i) : VF{});
    }
  }
}
template <int D, KvDtype DT>
__attribute__((noinline)) void ConvertKChunkOutOfLine(const uint8_t* const* ptr, int nc, float* kf,
                                                      ChunkScales* cs) {
  ConvertKChunkT<D, DT>(ptr, nc, kf, cs);
}

// V: slots [c0, c0 + nc) converted to vf[nc][D], each slot as its pointer is found (keeping the
// row pointer in a register measurably beats gathering the pointers first).
template <int D, KvDtype DT>
inline void ConvertVChunkT(const PagedKvLayerView& kv, std::span<const BlockId> table, int kv_head,
                           int c0, int nc, float* vf, ChunkScales* cs) {
  if constexpr (kHasScale<DT>) {
    for (int s = 0; s < W; ++s) cs->s[s] = cs->m[s] = 0;
  }
  ForSlots<false>(kv, table, kv_head, c0, nc, [&](int s, const uint8_t* row) {
    if constexpr (kHasScale<DT>) ReadSlotScale<DT, D>(row, &cs->s[s], &cs->m[s]);
    for (int i = 0; i < D; i += W) StoreF(vf + s * D + i, LoadKvRaw<DT, D>(row, i));
  });
}
template <int D, KvDtype DT>
__attribute__((noinline)) void ConvertVChunkOutOfLine(const PagedKvLayerView& kv,
                                                      std::span<const BlockId> table, int kv_head,
                                                      int c0, int nc, float* vf, ChunkScales* cs) {
  ConvertVChunkT<D, DT>(kv, table, kv_head, c0, nc, vf, cs);
}

// Calls fn.template operator()<DT>() for the run-time dtype.
template <typename Fn>
inline void WithKvDtype(KvDtype dtype, Fn&& fn) {
  switch (dtype) {
    case KvDtype::kF32: return fn.template operator()<KvDtype::kF32>();
    case KvDtype::kF16: return fn.template operator()<KvDtype::kF16>();
    case KvDtype::kBF16: return fn.template operator()<KvDtype::kBF16>();
    case KvDtype::kInt8: return fn.template operator()<KvDtype::kInt8>();
    case KvDtype::kFp8E4M3: return fn.template operator()<KvDtype::kFp8E4M3>();
    case KvDtype::kFp8E5M2: return fn.template operator()<KvDtype::kFp8E5M2>();
    case KvDtype::kInt4: return fn.template operator()<KvDtype::kInt4>();
  }
}
inline bool IsPlain(KvDtype d) { return d == KvDtype::kF32 || d == KvDtype::kF16; }
// RunPartition's conversion mode: f32/f16 (decided per chunk), any types (out-of-line calls),
// or a KvDtype's value: K and V both of that type, inlined.
constexpr int kConvPlain = -1, kConvAny = -2;
inline bool HasScale(KvDtype d) {
  return d == KvDtype::kInt8 || d == KvDtype::kFp8E4M3 || d == KvDtype::kInt4;
}
inline bool HasMin(KvDtype d) { return d == KvDtype::kInt4; }

// The rows [first, end) of a tile that see slots of partition p.
struct RowRange {
  int first = 0, end = 0;
};

// Tokens [j0, j1) of the tile that see a slot of [s0, s1): token j sees
// [AttentionFirstSlot(first_slots + j, window), first_slots + j).
inline void TokensSeeing(const AttentionTile& t, int s0, int s1, int* j0, int* j1) {
  *j0 = std::max(0, s0 - t.first_slots + 1);
  *j1 = t.num_tokens;
  if (t.window > 0) *j1 = std::clamp(s1 - t.first_slots + t.window, 0, t.num_tokens);
}

// Runs partition `p` for every row of the tile that has slots in it, leaving each such row's
// partial state (acc[D], m, l) at state + r * (D + 2). Returns those rows. `alone`: the calling
// thread runs no other partition of the tile after this one (AttendTilePartition), so the
// prefetch stops at the partition's end; otherwise (TileAll, partitions in order) it runs on into
// the next partition.
template <int D, int kConv>
RowRange RunPartition(const AttentionTile& t, const PagedKvLayerView& kv, float scale, int p,
                      bool alone, TileScratch& sc, const float* const* qrows) {
  const int n_max = t.first_slots + t.num_tokens - 1;  // slots seen by the last token
  const int s0 = p * kAttentionPartition;
  const int s1 = std::min(n_max, s0 + kAttentionPartition);
  const int prefetch_end = alone ? s1 : n_max;
  // Rows of token j see first_slots + j slots (the last `window` of them); tokens outside
  // [j0, j1) see nothing of this partition.
  int j0 = 0, j1 = 0;
  TokensSeeing(t, s0, s1, &j0, &j1);
  const int r_first = j0 * t.group, r_end = std::max(r_first, j1 * t.group);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int r = r_first; r < r_end; ++r) {
    float* st = sc.state.data() + static_cast<size_t>(r) * (D + 2);
    std::memset(st, 0, sizeof(float) * D);
    st[D] = kNegInf;
    st[D + 1] = 0.f;
  }
  const VI iota = Iota();
  float* kf = sc.kf.data();
  float* vf = sc.vf.data();
  // Quantized types: per-slot scales (and int4 minimums) are applied to the scores and to the
  // probabilities, once per slot and row, rather than to every element.
  constexpr bool kPlain = kConv == kConvPlain;
  const bool k_scaled = !kPlain && HasScale(kv.k_dtype), k_min = !kPlain && HasMin(kv.k_dtype);
  const bool v_scaled = !kPlain && HasScale(kv.v_dtype), v_min = !kPlain && HasMin(kv.v_dtype);
  const float k_factor = scale * RawFactor(kv.k_dtype), v_factor = RawFactor(kv.v_dtype);
  ChunkScales kcs, vcs;
  // f16, int8 and int4 values where each vector of W slots lies in one block: read and converted
  // where they are summed (vptr[g]: the vector's first slot), not through the f32 scratch; only
  // the slots' scales (and minimums) are read with the chunk. Exact either way.
  constexpr bool kCanDirect = D <= 128 && (kPlain || kConv == static_cast<int>(KvDtype::kInt8) ||
                                           kConv == static_cast<int>(KvDtype::kInt4));
  constexpr KvDtype kDirectV = kCanDirect && !kPlain ? static_cast<KvDtype>(kConv) : KvDtype::kF16;
  const bool v_direct = kCanDirect && kv.v_dtype == kDirectV && kv.block_size % W == 0;
  const uint8_t* vptr[kChunkVectors] = {};
  auto direct_values = [&](int b) {
    return [&vptr, &kv, b](int k, int i) {
      return LoadKvRaw<kDirectV, D>(vptr[k / W] + (k % W) * kv.v_head_bytes, b + i * W);
    };
  };
  auto scratch_values = [vf](int b) {
    return [vf, b](int k, int i) { return LoadF(vf + k * D + b + i * W); };
  };
  // Chunks start at multiples of kChunk from s0; with a window, the ones before the first row's
  // first slot are skipped.
  const int lo0 = AttentionFirstSlot(t.first_slots + j0, t.window);
  const int c_begin = lo0 > s0 ? s0 + (lo0 - s0) / kChunk * kChunk : s0;
  // The first chunk is asked for whole at once (each later one a vector at a time, one chunk
  // ahead, below): a partition run alone starts cold, and past the first vector its loads then
  // wait on memory together rather than one vector after another. From the first vector any row
  // sees, as the loop below reads it (a window's earlier blocks may be gone from the table).
  if (r_first < r_end) {
    const int first = std::max(c_begin, lo0 / W * W);
    PrefetchSlots(kv, t.block_table, t.kv_head, first, std::min(c_begin + kChunk, s1));
  }
  for (int c0 = c_begin; c0 < s1 && r_first < r_end; c0 += kChunk) {
    const int nc = std::min(kChunk, s1 - c0);  // slots of the chunk any row sees
    // The rows that see a slot of the chunk.
    int jc = 0, je = 0;
    TokensSeeing(t, c0, c0 + nc, &jc, &je);
    const int rc = jc * t.group, re = std::min(r_end, je * t.group);
    // Its vectors of W slots, from the first one with a slot any row sees (a window's first
    // slot rounded down to W): K converted to kf[W][D] (slots past the end zero,
    // and masked below) and scored for the rows that see one of its slots, into
    // scores[r * kChunk + g * W]; V converted to vf[g * W + slot][D]. The scores and scales of
    // the vectors before that one are never read unmasked.
    VF vs[kChunkVectors], vm[kChunkVectors];
    for (int g = 0; g < kChunkVectors; ++g) vs[g] = vm[g] = VF{};
    const int g_first = std::max(0, lo0 - c0) / W;
    for (int g = g_first; g * W < nc; ++g) {
      const int cg = c0 + g * W, ng = std::min(W, nc - g * W);
      // The same vector of the next chunk's K and V (the next partition's at the end, unless the
      // partition runs alone) loads while this one computes. (Distances of 16 to 256 slots, a
      // second prefetch into L2 further ahead, and K and V asked for at two points of a vector's
      // work measured within a nanosecond of this.)
      PrefetchSlots(kv, t.block_table, t.kv_head, cg + kChunk,
                    std::min(cg + kChunk + W, prefetch_end));
      {
        const uint8_t* ptr[W] = {};
        ForSlots<true>(kv, t.block_table, t.kv_head, cg, ng,
                       [&](int i, const uint8_t* s) { ptr[i] = s; });
        if constexpr (kPlain) {
          if (kv.k_dtype == KvDtype::kF16) {
            ConvertKChunkT<D, KvDtype::kF16>(ptr, ng, kf, &kcs);
          } else {
            ConvertKChunkT<D, KvDtype::kF32>(ptr, ng, kf, &kcs);
          }
        } else if constexpr (kConv >= 0) {
          ConvertKChunkT<D, static_cast<KvDtype>(kConv)>(ptr, ng, kf, &kcs);
        } else {
          WithKvDtype(kv.k_dtype,
                      [&]<KvDtype DT>() { ConvertKChunkOutOfLine<D, DT>(ptr, ng, kf, &kcs); });
        }
      }
      float* vg = vf + static_cast<size_t>(g) * W * D;
      if (v_direct) {
        vptr[g] = kv.VSlot(t.block_table[cg / kv.block_size], t.kv_head, cg % kv.block_size);
        if constexpr (kCanDirect && kHasScale<kDirectV>) {
          for (int s = 0; s < W; ++s) {
            vcs.s[s] = vcs.m[s] = 0;
            if (s < ng)
              ReadSlotScale<kDirectV, D>(vptr[g] + s * kv.v_head_bytes, &vcs.s[s], &vcs.m[s]);
          }
        }
      } else if constexpr (kPlain) {
        if (kv.v_dtype == KvDtype::kF16) {
          ConvertVChunkT<D, KvDtype::kF16>(kv, t.block_table, t.kv_head, cg, ng, vg, &vcs);
        } else {
          ConvertVChunkT<D, KvDtype::kF32>(kv, t.block_table, t.kv_head, cg, ng, vg, &vcs);
        }
      } else if constexpr (kConv >= 0) {
        ConvertVChunkT<D, static_cast<KvDtype>(kConv)>(kv, t.block_table, t.kv_head, cg, ng, vg,
                                                       &vcs);
      } else {
        WithKvDtype(kv.v_dtype, [&]<KvDtype DT>() {
          ConvertVChunkOutOfLine<D, DT>(kv, t.block_table, t.kv_head, cg, ng, vg, &vcs);
        });
      }
      vs[g] = v_scaled ? vcs.Scales() * v_factor : SplatF(1.f);
      vm[g] = v_min ? vcs.Mins() : VF{};
      int jg = 0, jge = 0;
      TokensSeeing(t, cg, cg + ng, &jg, &jge);
      const int rg = jg * t.group, rge = std::min(r_end, jge * t.group);
      const VF ks = k_scaled ? kcs.Scales() * k_factor : SplatF(scale);
      const VF km = k_min ? kcs.Mins() * scale : VF{};
      float* scores_g = sc.scores.data() + g * W;
      ScoreChunk<D>(rg, rge, qrows, kf, ks, km, k_min, sc.qsum.data(), scores_g, kChunk);
      if (t.softcap > 0.f) {
        for (int r = rg; r < rge; ++r) {
          float* sr = scores_g + static_cast<size_t>(r) * kChunk;
          StoreF(sr, SoftCap(LoadF(sr), t.softcap));
        }
      }
    }
    // Rows go in pairs of one token's rows (the same visible slots), so that each value vector
    // loaded serves both (AccumulateValues, where kAccRows allows). Long vectors (D > 128): every
    // row's softmax step first, then the values a block of kAccVectors vectors of columns at a
    // time for all rows, so that block of the chunk's values stays in L1 while the rows use it.
    // Each element's arithmetic is the same either way.
    float* probs_rows = sc.probs.data();
    for (int r = rc; r < re;) {
      const int n = t.first_slots + r / t.group;  // the row sees slots [lo, n)
      const int v = std::min(kChunk, n - c0);     // of the chunk's: [u, v), not empty
      const int u = std::max(0, AttentionFirstSlot(n, t.window) - c0);
      const int nr = D <= 128 && r + 1 < re && (r + 1) / t.group == r / t.group ? 2 : 1;
      float* st[2];
      const float* probs[2];
      float alpha[2], pm[2] = {};
      for (int i = 0; i < nr; ++i) {
        const size_t ur = static_cast<size_t>(r + i);
        st[i] = sc.state.data() + ur * (D + 2);
        float* pr = probs_rows + (D > 128 ? ur : static_cast<size_t>(i)) * kChunk;
        probs[i] = pr;
        alpha[i] = SoftmaxStep<D>(st[i], sc.scores.data() + ur * kChunk, u, v, iota, v_scaled, vs,
                                  v_min, vm, pr, &pm[i]);
        if constexpr (D > 128) {
          sc.row_alpha[ur] = alpha[i];
          sc.row_pm[ur] = pm[i];
          sc.row_v[ur] = v;
          sc.row_u[ur] = u;
        }
      }
      if constexpr (D <= 128) {
        ForAccumulateBlocks<D>([&]<int NB>(int b) {
          float* const stb[2] = {st[0] + b, nr > 1 ? st[1] + b : nullptr};
          auto run = [&](auto values) {
            if (kAccRows<NB> == 2 && nr == 2) {
              AccumulateValues<D, NB, 2>(stb, values, probs, u, v, alpha, v_min, pm);
            } else {
              for (int i = 0; i < nr; ++i) {
                AccumulateValues<D, NB, 1>(stb + i, values, probs + i, u, v, alpha + i, v_min,
                                           pm + i);
              }
            }
          };
          if (v_direct) {
            run(direct_values(b));
          } else {
            run(scratch_values(b));
          }
        });
      }
      r += nr;
    }
    if constexpr (D > 128) {
      ForAccumulateBlocks<D>([&]<int NB>(int b) {
        for (int r = rc; r < re;) {
          const size_t ur = static_cast<size_t>(r);
          const int nr =
              kAccRows<NB> == 2 && r + 1 < re && (r + 1) / t.group == r / t.group ? 2 : 1;
          float* const stb[2] = {sc.state.data() + ur * (D + 2) + b,
                                 nr > 1 ? sc.state.data() + (ur + 1) * (D + 2) + b : nullptr};
          const float* const probs[2] = {probs_rows + ur * kChunk,
                                         nr > 1 ? probs_rows + (ur + 1) * kChunk : nullptr};
          if (nr == 2) {
            AccumulateValues<D, NB, 2>(stb, scratch_values(b), probs, sc.row_u[ur], sc.row_v[ur],
                                       sc.row_alpha.data() + ur, v_min, sc.row_pm.data() + ur);
          } else {
            AccumulateValues<D, NB, 1>(stb, scratch_values(b), probs, sc.row_u[ur], sc.row_v[ur],
                                       sc.row_alpha.data() + ur, v_min, sc.row_pm.data() + ur);
          }
          r += nr;
        }
      });
    }
  }
  // Rotated values: the partial sums are in the rotated basis; map them back (linear, so doing
  // it per partition equals doing it after the merge, and both paths do the same).
  if (!kPlain && KvDtypeIsRotated(kv.v_dtype)) {
    for (int r = r_first; r < r_end; ++r) {
      UnrotateAcc<D>(sc.state.data() + static_cast<size_t>(r) * (D + 2));
    }
  }
  return RowRange{r_first, r_end};
}

// The instantiation of RunPartition for the tile's K/V types.
template <int D>
RowRange RunPartitionFor(const AttentionTile& t, const PagedKvLayerView& kv, float scale, int p,
                         bool alone, TileScratch& sc, const float* const* qrows) {
  if (IsPlain(kv.k_dtype) && IsPlain(kv.v_dtype)) {
    return RunPartition<D, kConvPlain>(t, kv, scale, p, alone, sc, qrows);
  }
  if (kv.k_dtype == kv.v_dtype) {
    switch (kv.k_dtype) {
      case KvDtype::kInt8:
        return RunPartition<D, static_cast<int>(KvDtype::kInt8)>(t, kv, scale, p, alone, sc, qrows);
      case KvDtype::kFp8E4M3:
        return RunPartition<D, static_cast<int>(KvDtype::kFp8E4M3)>(t, kv, scale, p, alone, sc,
                                                                    qrows);
      case KvDtype::kInt4:
        return RunPartition<D, static_cast<int>(KvDtype::kInt4)>(t, kv, scale, p, alone, sc, qrows);
      default:
        break;
    }
  }
  return RunPartition<D, kConvAny>(t, kv, scale, p, alone, sc, qrows);
}

// Query row pointers; against rotated keys, the rows rotated into sc.qrot.
template <int D>
void RowPointers(const AttentionTile& t, const PagedKvLayerView& kv, TileScratch& sc,
                 std::vector<const float*>& q) {
  const int rows = t.num_tokens * t.group;
  q.resize(rows);
  for (int r = 0; r < rows; ++r) {
    q[r] = t.q + (r / t.group) * t.q_stride + static_cast<int64_t>(r % t.group) * D;
  }
  if (KvDtypeIsRotated(kv.k_dtype)) {
    for (int r = 0; r < rows; ++r) {
      float* out = sc.qrot.data() + static_cast<size_t>(r) * D;
      RotateQuery<D>(q[r], out);
      q[r] = out;
    }
  }
  // Keys with a per-slot minimum (int4) add m · Σ_i q_i to each score.
  if (HasMin(kv.k_dtype)) {
    for (int r = 0; r < rows; ++r) {
      VF sum{};
      for (int i = 0; i < D; i += W) sum += LoadF(q[r] + i);
      sc.qsum[r] = HSum(sum);
    }
  }
}

// The calling thread's scratch, reserved for the tile, with its query row pointers in qrows.
template <int D>
TileScratch& PrepareTile(const AttentionTile& t, const PagedKvLayerView& kv) {
  TileScratch& sc = Scratch();
  sc.Reserve(t.num_tokens * t.group, D);
  RowPointers<D>(t, kv, sc, sc.qrows);
  return sc;
}

template <int D>
void TileAll(const AttentionTile& t, const PagedKvLayerView& kv, float scale) {
  TileScratch& sc = PrepareTile<D>(t, kv);
  const int rows = t.num_tokens * t.group;
  const std::vector<const float*>& q = sc.qrows;
  const int np = AttentionPartitions(t.first_slots + t.num_tokens - 1);
  for (int p = AttentionTileFirstPartition(t); p < np; ++p) {
    const RowRange rr = RunPartitionFor<D>(t, kv, scale, p, /*alone=*/false, sc, q.data());
    for (int r = rr.first; r < rr.end; ++r) {
      float* merged = sc.merged.data() + static_cast<size_t>(r) * (D + 2);
      const float* part = sc.state.data() + static_cast<size_t>(r) * (D + 2);
      if (p == AttentionRowFirstPartition(t, r / t.group)) {
        std::memcpy(merged, part, sizeof(float) * (D + 2));
      } else {
        FoldPartial<D>(merged, part);
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    float* out = t.out + (r / t.group) * t.out_stride + static_cast<int64_t>(r % t.group) * D;
    FinishRow<D>(sc.merged.data() + static_cast<size_t>(r) * (D + 2), out,
                 t.lse != nullptr ? t.lse + r : nullptr,
                 t.sinks != nullptr ? t.sinks[r % t.group] : kNoAttentionSink);
  }
}

template <int D>
void TilePartition(const AttentionTile& t, const PagedKvLayerView& kv, float scale, int p,
                   float* partials) {
  TileScratch& sc = PrepareTile<D>(t, kv);
  const std::vector<const float*>& q = sc.qrows;
  const RowRange rr = RunPartitionFor<D>(t, kv, scale, p, /*alone=*/true, sc, q.data());
  std::memcpy(partials + static_cast<size_t>(rr.first) * (D + 2),
              sc.state.data() + static_cast<size_t>(rr.first) * (D + 2),
              sizeof(float) * (rr.end - rr.first) * (D + 2));
}

template <int D>
void MergeRow(const float* partials, int num_partitions, int64_t stride, float* out, float* lse,
              float sink) {
  float merged[D + 2];
  std::memcpy(merged, partials, sizeof(merged));
  for (int p = 1; p < num_partitions; ++p) FoldPartial<D>(merged, partials + p * stride);
  FinishRow<D>(merged, out, lse, sink);
}

// AccumulateAttentionScores: the K side of RunPartition over all the tile's slots, then each
// row's probabilities from its log-sum-exp, summed per slot over the rows in fixed point.
template <int D>
void TileScores(const AttentionTile& t, const PagedKvLayerView& kv, float scale, int first_token,
                int64_t* acc) {
  TileScratch& sc = PrepareTile<D>(t, kv);
  const int rows = t.num_tokens * t.group;
  const std::vector<const float*>& q = sc.qrows;
  const int n_max = t.first_slots + t.num_tokens - 1;
  const bool k_scaled = HasScale(kv.k_dtype), k_min = HasMin(kv.k_dtype);
  const float k_factor = scale * RawFactor(kv.k_dtype);
  const VI iota = Iota();
  float* kf = sc.kf.data();
  ChunkScales kcs;
  for (int c0 = 0; c0 < n_max; c0 += W) {
    const int nc = std::min(W, n_max - c0);
    const int jc = std::max(first_token, c0 - t.first_slots + 1);
    if (jc >= t.num_tokens) break;
    const uint8_t* ptr[W] = {};
    ForSlots<true>(kv, t.block_table, t.kv_head, c0, nc,
                   [&](int i, const uint8_t* s) { ptr[i] = s; });
    WithKvDtype(kv.k_dtype,
                [&]<KvDtype DT>() { ConvertKChunkOutOfLine<D, DT>(ptr, nc, kf, &kcs); });
    const int rc = jc * t.group;
    const VF ks = k_scaled ? kcs.Scales() * k_factor : SplatF(scale);
    const VF km = k_min ? kcs.Mins() * scale : VF{};
    ScoreChunk<D>(rc, rows, q.data(), kf, ks, km, k_min, sc.qsum.data(), sc.scores.data());
    int64_t sums[W] = {};
    for (int r = rc; r < rows; ++r) {
      const int n = t.first_slots + r / t.group;
      const int v = std::min(W, n - c0);
      const int u = AttentionFirstSlot(n, t.window) - c0;
      const VI valid = (iota < (VI{} + v)) & (iota >= (VI{} + u));
      float* sr = sc.scores.data() + static_cast<size_t>(r) * W;
      if (t.softcap > 0.f) StoreF(sr, SoftCap(LoadF(sr), t.softcap));
      const VF p = Exp(LoadF(sc.scores.data() + static_cast<size_t>(r) * W) - t.lse[r]);
      const VI fixed = __builtin_convertvector(p * kAttentionScoreFixedOne, VI);
      const VI kept = valid ? fixed : VI{};
      for (int k = 0; k < W; ++k) sums[k] += kept[k];
    }
    for (int k = 0; k < nc; ++k) {
      if (sums[k] != 0) __atomic_fetch_add(acc + c0 + k, sums[k], __ATOMIC_RELAXED);
    }
  }
}

// The kernels of this TU: head dims that are a multiple of W (up to 256, and MLA's 576 latent
// and 192 decompressed heads) take the fast path.
using attn::TileKernels;

template <int D>
TileKernels KernelsFor() {
  return TileKernels{&TileAll<D>, &TilePartition<D>, &MergeRow<D>, &TileScores<D>};
}

inline TileKernels KernelsForHeadDim(int d) {
  switch (d) {
#if KVSERVE_ATTN_LANES <= 16
    case 16: return KernelsFor<16>();
    case 48: return KernelsFor<48>();
    case 80: return KernelsFor<80>();
    case 96: return KernelsFor<96>();
    case 112: return KernelsFor<112>();
#endif
    case 32: return KernelsFor<32>();
    case 64: return KernelsFor<64>();
    case 128: return KernelsFor<128>();
    case 192: return KernelsFor<192>();
    case 256: return KernelsFor<256>();
    case 576: return KernelsFor<576>();
    default: return TileKernels{};
  }
}

}  // namespace
}  // namespace kvserve
