// The paged attention kernel, written once over GCC/Clang vectors of KVSERVE_ATTN_LANES floats and
// compiled once per instruction set (attention.cc: portable, attention_avx2.cc,
// attention_avx512.cc), each TU with its own target flags. Everything here has internal linkage so
// the per-ISA copies never merge at link time. Internal to ops/; see attention.h for the contract.
//
// Per query row (one query head of one token) and per partition of kAttentionPartition slots:
//   for each chunk of W slots (W = lanes, chunk starts are multiples of W from slot 0):
//     scores = q · K^T over the chunk (K converted to f32 and transposed once per chunk for all
//     rows of the tile), slots the row may not see masked to -inf;
//     online softmax: m = max(m, max(scores)), rescale l and acc when m grows,
//     p = exp(scores - m), l += sum(p), acc += sum_s p[s] * V[s] over the row's visible slots
//     (even and odd slots summed separately, then added).
// Partition states are folded in partition order (FoldPartial) and normalised at the end.
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
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "ops/attention.h"
#include "ops/attention_isa.h"
#include "util/fp16.h"

namespace kvserve {
namespace {

constexpr int W = KVSERVE_ATTN_LANES;
typedef float VF __attribute__((vector_size(W * sizeof(float))));
typedef int32_t VI __attribute__((vector_size(W * sizeof(int32_t))));

inline VF LoadF(const float* p) {
  VF v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void StoreF(float* p, VF v) { std::memcpy(p, &v, sizeof(v)); }
inline VF SplatF(float x) { return VF{} + x; }
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
inline VF Fma(VF a, float b, VF c) { return Fma(a, VF{} + b, c); }
inline VF Fma(float a, VF b, VF c) { return Fma(VF{} + a, b, c); }

inline VI Iota() {
  VI v;
  for (int i = 0; i < W; ++i) v[i] = i;
  return v;
}

// W floats of a K/V head vector starting at element i.
inline VF LoadKv(KvDtype dtype, const uint8_t* row, int i) {
  if (dtype == KvDtype::kF32) return LoadF(reinterpret_cast<const float*>(row) + i);
  const uint16_t* h = reinterpret_cast<const uint16_t*>(row) + i;
#if KVSERVE_ATTN_LANES == 16 && defined(__AVX512F__)
  const __m512 f = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
  VF v;
  std::memcpy(&v, &f, sizeof(v));
  return v;
#elif KVSERVE_ATTN_LANES == 8 && defined(__F16C__)
  const __m256 f = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
  VF v;
  std::memcpy(&v, &f, sizeof(v));
  return v;
#else
  VF v;
  for (int k = 0; k < W; ++k) v[k] = F16ToF32(h[k]);
  return v;
#endif
}

// Permutation masks, built at compile time. Stage h of the transpose pairs rows i and i + h
// (i & h == 0) and, within every segment of 2h lanes, takes the low (lo) or high (hi) h lanes of
// both rows; swap<h> maps lane l to l ^ h.
constexpr int LoLane(int l, int h) {
  return (l & (2 * h - 1)) < h ? (l & ~(2 * h - 1)) + (l & (2 * h - 1))
                               : W + (l & ~(2 * h - 1)) + (l & (2 * h - 1)) - h;
}
constexpr int HiLane(int l, int h) {
  return (l & (2 * h - 1)) < h ? (l & ~(2 * h - 1)) + h + (l & (2 * h - 1))
                               : W + (l & ~(2 * h - 1)) + (l & (2 * h - 1));
}
template <int H, size_t... L>
constexpr VI LoMask(std::index_sequence<L...>) {
  return VI{LoLane(static_cast<int>(L), H)...};
}
template <int H, size_t... L>
constexpr VI HiMask(std::index_sequence<L...>) {
  return VI{HiLane(static_cast<int>(L), H)...};
}
template <int H, size_t... L>
constexpr VI SwapMask(std::index_sequence<L...>) {
  return VI{(static_cast<int>(L) ^ H)...};
}

// In-place transpose of a W x W matrix held as W row vectors: stages h = W/2, ..., 1.
template <int H>
inline void TransposeStages(VF* r) {
  constexpr VI lo = LoMask<H>(std::make_index_sequence<W>{});
  constexpr VI hi = HiMask<H>(std::make_index_sequence<W>{});
  for (int i = 0; i < W; ++i) {
    if (i & H) continue;
    const VF x = r[i], y = r[i + H];
    r[i] = __builtin_shuffle(x, y, lo);
    r[i + H] = __builtin_shuffle(x, y, hi);
  }
  if constexpr (H > 1) TransposeStages<H / 2>(r);
}
inline void Transpose(VF* r) { TransposeStages<W / 2>(r); }

// Fixed-order horizontal max / sum (a butterfly; every lane ends up with the result).
template <int H = 1>
inline VF AllMax(VF v) {
  constexpr VI sw = SwapMask<H>(std::make_index_sequence<W>{});
  const VF t = __builtin_shuffle(v, sw);
  v = v > t ? v : t;
  if constexpr (2 * H < W) {
    return AllMax<2 * H>(v);
  } else {
    return v;
  }
}
template <int H = 1>
inline VF AllSum(VF v) {
  constexpr VI sw = SwapMask<H>(std::make_index_sequence<W>{});
  v = v + __builtin_shuffle(v, sw);
  if constexpr (2 * H < W) {
    return AllSum<2 * H>(v);
  } else {
    return v;
  }
}
inline float HMax(VF v) { return AllMax(v)[0]; }
inline float HSum(VF v) { return AllSum(v)[0]; }

// exp(x) for x <= 0 (Cephes expf polynomial, ~1 ulp); x below -87 is clamped (result ~1e-38).
inline VF Exp(VF x) {
  x = x < -87.0f ? SplatF(-87.0f) : x;
  const VF magic = SplatF(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  VF t = Fma(x, 1.44269504088896341f, magic);
  const VF n = t - magic;
  VF r = Fma(n, -0.693359375f, x);
  r = Fma(n, 2.12194440e-4f, r);
  VF p = SplatF(1.9875691500e-4f);
  p = Fma(p, r, SplatF(1.3981999507e-3f));
  p = Fma(p, r, SplatF(8.3334519073e-3f));
  p = Fma(p, r, SplatF(4.1665795894e-2f));
  p = Fma(p, r, SplatF(1.6666665459e-1f));
  p = Fma(p, r, SplatF(5.0000001201e-1f));
  p = Fma(p, r * r, r + 1.0f);
  VI ti;
  std::memcpy(&ti, &t, sizeof(ti));
  const VI pow2 = ((ti - 0x4B400000) + 127) << 23;
  VF scale;
  std::memcpy(&scale, &pow2, sizeof(scale));
  return p * scale;
}
inline float ExpScalar(float x) { return Exp(SplatF(x))[0]; }

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

template <int D>
inline void FinishRow(const float* merged, float* out) {
  const float l = merged[D + 1];
  for (int i = 0; i < D; i += W) StoreF(out + i, LoadF(merged + i) / l);
}

// Per-thread buffers of the kernel.
struct TileScratch {
  std::vector<float> kt, vf, scores, probs, state, merged;
  void Reserve(int rows, int d) {
    auto grow = [](std::vector<float>& v, size_t n) {
      if (v.size() < n) v.resize(n);
    };
    grow(kt, static_cast<size_t>(d) * W);
    grow(vf, static_cast<size_t>(d) * W);
    grow(scores, static_cast<size_t>(rows) * W);
    grow(probs, W);
    grow(state, static_cast<size_t>(rows) * (d + 2));
    grow(merged, static_cast<size_t>(rows) * (d + 2));
  }
};
inline TileScratch& Scratch() {
  thread_local TileScratch s;
  return s;
}

// Scores of rows [r0, r0 + NR) against the chunk: scores[r] = (q_r · Kt) * scale.
template <int D, int NR>
inline void ScoreRows(const float* const* q, const float* kt, float scale, float* scores) {
  VF acc[NR] = {};
  for (int i = 0; i < D; ++i) {
    const VF k = LoadF(kt + i * W);
    for (int j = 0; j < NR; ++j) acc[j] = Fma(q[j][i], k, acc[j]);
  }
  for (int j = 0; j < NR; ++j) StoreF(scores + j * W, acc[j] * scale);
}

template <int D>
void ScoreRowsN(int nr, const float* const* q, const float* kt, float scale, float* scores) {
  switch (nr) {
    case 1: return ScoreRows<D, 1>(q, kt, scale, scores);
    case 2: return ScoreRows<D, 2>(q, kt, scale, scores);
    case 3: return ScoreRows<D, 3>(q, kt, scale, scores);
    case 4: return ScoreRows<D, 4>(q, kt, scale, scores);
    case 5: return ScoreRows<D, 5>(q, kt, scale, scores);
    case 6: return ScoreRows<D, 6>(q, kt, scale, scores);
    case 7: return ScoreRows<D, 7>(q, kt, scale, scores);
    default: return ScoreRows<D, 8>(q, kt, scale, scores);
  }
}

// Walks slots [s0, s0 + n) of the block table, calling fn(i, slot pointer) for K or V.
template <bool kIsK, typename Fn>
inline void ForSlots(const PagedKvLayerView& kv, std::span<const BlockId> table, int kv_head, int s0,
                     int n, Fn&& fn) {
  int blk = s0 / kv.block_size, off = s0 % kv.block_size;
  for (int i = 0; i < n; ++i) {
    fn(i, kIsK ? kv.KSlot(table[blk], kv_head, off) : kv.VSlot(table[blk], kv_head, off));
    if (++off == kv.block_size) {
      off = 0;
      ++blk;
    }
  }
}

// Runs partition `p` for every row of the tile that has slots in it, leaving each such row's
// partial state (acc[D], m, l) at state + r * (D + 2). Returns the first such row.
template <int D>
int RunPartition(const AttentionTile& t, const PagedKvLayerView& kv, float scale, int p,
                 TileScratch& sc, const float* const* qrows) {
  const int rows = t.num_tokens * t.group;
  const int n_max = t.first_slots + t.num_tokens - 1;  // slots seen by the last token
  const int s0 = p * kAttentionPartition;
  const int s1 = std::min(n_max, s0 + kAttentionPartition);
  // Rows of token j see first_slots + j slots; tokens before j0 see nothing of this partition.
  const int j0 = std::max(0, s0 - t.first_slots + 1);
  const int r_first = j0 * t.group;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int r = r_first; r < rows; ++r) {
    float* st = sc.state.data() + static_cast<size_t>(r) * (D + 2);
    std::memset(st, 0, sizeof(float) * D);
    st[D] = kNegInf;
    st[D + 1] = 0.f;
  }
  const VI iota = Iota();
  float* kt = sc.kt.data();
  float* vf = sc.vf.data();
  for (int c0 = s0; c0 < s1; c0 += W) {
    const int nc = std::min(W, s1 - c0);  // slots of the chunk any row sees
    // K: convert and transpose to kt[D][W]; slots past nc are zero (and masked below).
    {
      const uint8_t* ptr[W] = {};
      ForSlots<true>(kv, t.block_table, t.kv_head, c0, nc,
                     [&](int i, const uint8_t* s) { ptr[i] = s; });
      for (int i = 0; i < D; i += W) {
        VF r[W];
        for (int s = 0; s < W; ++s) r[s] = s < nc ? LoadKv(kv.k_dtype, ptr[s], i) : VF{};
        Transpose(r);
        for (int s = 0; s < W; ++s) StoreF(kt + (i + s) * W, r[s]);
      }
    }
    ForSlots<false>(kv, t.block_table, t.kv_head, c0, nc, [&](int s, const uint8_t* row) {
      for (int i = 0; i < D; i += W) StoreF(vf + s * D + i, LoadKv(kv.v_dtype, row, i));
    });
    // First row that sees slot c0.
    const int jc = std::max(0, c0 - t.first_slots + 1);
    const int rc = jc * t.group;
    for (int r = rc; r < rows; r += 8) {
      const int nr = std::min(8, rows - r);
      ScoreRowsN<D>(nr, qrows + r, kt, scale, sc.scores.data() + static_cast<size_t>(r) * W);
    }
    for (int r = rc; r < rows; ++r) {
      const int visible = t.first_slots + r / t.group;
      const int v = std::min(W, visible - c0);  // slots of this chunk the row sees, >= 1
      float* st = sc.state.data() + static_cast<size_t>(r) * (D + 2);
      const VI valid = iota < (VI{} + v);
      VF s = LoadF(sc.scores.data() + static_cast<size_t>(r) * W);
      s = valid ? s : SplatF(kNegInf);
      const float cm = HMax(s);
      float m = st[D], l = st[D + 1];
      VF acc[D / W];
      for (int i = 0; i < D / W; ++i) acc[i] = LoadF(st + i * W);
      if (cm > m) {
        if (m != kNegInf) {
          const float alpha = ExpScalar(m - cm);
          l *= alpha;
          for (int i = 0; i < D / W; ++i) acc[i] *= alpha;
        }
        m = cm;
      }
      VF pr = Exp(s - m);
      pr = valid ? pr : VF{};
      l += HSum(pr);
      float* probs = sc.probs.data();
      StoreF(probs, pr);
      // Two interleaved partial sums (even and odd slots) halve the FMA dependency chains;
      // acc += even + odd.
      VF even[D / W] = {}, odd[D / W] = {};
      int k = 0;
      for (; k + 2 <= v; k += 2) {
        const float p0 = probs[k], p1 = probs[k + 1];
        const float* v0 = vf + k * D;
        const float* v1 = v0 + D;
        for (int i = 0; i < D / W; ++i) {
          even[i] = Fma(p0, LoadF(v0 + i * W), even[i]);
          odd[i] = Fma(p1, LoadF(v1 + i * W), odd[i]);
        }
      }
      if (k < v) {
        const float* v0 = vf + k * D;
        for (int i = 0; i < D / W; ++i) even[i] = Fma(probs[k], LoadF(v0 + i * W), even[i]);
      }
      for (int i = 0; i < D / W; ++i) StoreF(st + i * W, acc[i] + (even[i] + odd[i]));
      st[D] = m;
      st[D + 1] = l;
    }
  }
  return r_first;
}

template <int D>
void RowPointers(const AttentionTile& t, std::vector<const float*>& q) {
  const int rows = t.num_tokens * t.group;
  q.resize(rows);
  for (int r = 0; r < rows; ++r) {
    q[r] = t.q + (r / t.group) * t.q_stride + static_cast<int64_t>(r % t.group) * D;
  }
}

template <int D>
void TileAll(const AttentionTile& t, const PagedKvLayerView& kv, float scale) {
  TileScratch& sc = Scratch();
  const int rows = t.num_tokens * t.group;
  sc.Reserve(rows, D);
  thread_local std::vector<const float*> q;
  RowPointers<D>(t, q);
  const int np = AttentionPartitions(t.first_slots + t.num_tokens - 1);
  for (int p = 0; p < np; ++p) {
    const int r0 = RunPartition<D>(t, kv, scale, p, sc, q.data());
    for (int r = r0; r < rows; ++r) {
      float* merged = sc.merged.data() + static_cast<size_t>(r) * (D + 2);
      const float* part = sc.state.data() + static_cast<size_t>(r) * (D + 2);
      if (p == 0) {
        std::memcpy(merged, part, sizeof(float) * (D + 2));
      } else {
        FoldPartial<D>(merged, part);
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    float* out = t.out + (r / t.group) * t.out_stride + static_cast<int64_t>(r % t.group) * D;
    FinishRow<D>(sc.merged.data() + static_cast<size_t>(r) * (D + 2), out);
  }
}

template <int D>
void TilePartition(const AttentionTile& t, const PagedKvLayerView& kv, float scale, int p,
                   float* partials) {
  TileScratch& sc = Scratch();
  const int rows = t.num_tokens * t.group;
  sc.Reserve(rows, D);
  thread_local std::vector<const float*> q;
  RowPointers<D>(t, q);
  const int r0 = RunPartition<D>(t, kv, scale, p, sc, q.data());
  std::memcpy(partials + static_cast<size_t>(r0) * (D + 2),
              sc.state.data() + static_cast<size_t>(r0) * (D + 2),
              sizeof(float) * (rows - r0) * (D + 2));
}

template <int D>
void MergeRow(const float* partials, int num_partitions, int64_t stride, float* out) {
  float merged[D + 2];
  std::memcpy(merged, partials, sizeof(merged));
  for (int p = 1; p < num_partitions; ++p) FoldPartial<D>(merged, partials + p * stride);
  FinishRow<D>(merged, out);
}

// The kernels of this TU: head dims that are a multiple of W (up to 256) take the fast path.
using attn::TileKernels;

template <int D>
TileKernels KernelsFor() {
  return TileKernels{&TileAll<D>, &TilePartition<D>, &MergeRow<D>};
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
    case 256: return KernelsFor<256>();
    default: return TileKernels{};
  }
}

}  // namespace
}  // namespace kvserve
