// The packed layouts (PackWeights) that the tile kernels read, for Q8_0, Q4_0 and MXFP4, and
// (below) for the K-quants Q4_K, Q5_K and Q6_K.
// Internal to ops/.
//
// Rows in groups of kGroupRows (16; a last partial group is padded with zero rows). A group is
// GroupBytes<F>(cols) bytes holding its nb = cols / 32 blocks in pairs of PairBytes<F>() (one
// pair: both blocks' values, then their scales; a missing last block of an odd nb is padding,
// never read):
//   values of block b at PairOffset<F>(b) + (b % 2) * F::kValueBytes, as 64-byte vectors of
//     16 rows x 4 bytes (byte r * 4 + j of a vector is row r's):
//     Q8_0: 8 vectors, slice k (columns b * 32 + k * 4 + j) in vector k, each weight stored as
//           the unsigned byte w + 128. That is also an AMX tile's second operand (8 rows of 64
//           bytes).
//     Q4_0: 4 vectors, the file's nibbles as stored (w + 8): vector m holds bytes 4m..4m+3 of
//           each row's block, so its low nibbles are slice m and its high nibbles slice m + 4.
//     MXFP4: as Q4_0, the E2M1 codes as stored; a kernel maps each code through a table to its
//           doubled value + 12 (0..24, unsigned).
//   scales of block b: 16 halves (one per row) at ScalesOffset<F>(b); for MXFP4 16 uint16 holding
//   each row's E8M0 exponent byte (its scale 2^(e - 128) covers the doubling).
// The same bytes per block as the file's (16 x 34 for Q8_0, 16 x 18 for Q4_0), and a group,
// like the groups after it, is one stream read front to back: a decode prefetches it at a
// fixed distance.
//
// Arithmetic (every kernel, bit for bit): with x's Q8_0 block (q, d), s = sum(q) and the
// format's offset o (128, 8 or 12),
//   sum = sum_j (w_j + o) * q_j - o * s                (exact in int32)
//   acc = fma(float(sum), d_w * d_x, acc)              (blocks in order, one lane per row)
// and y[t, r] = acc. ActQ8_0::sum carries s per token and block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ops/matmul.h"
#include "ops/prefetch.h"

namespace kvserve::packed {

constexpr int64_t kGroupRows = 16;

struct Q8_0 {
  static constexpr int64_t kValueBytes = 512;  // one block's values
  static constexpr int32_t kOffset = 128;
};

struct Q4_0 {
  static constexpr int64_t kValueBytes = 256;
  static constexpr int32_t kOffset = 8;
};

struct MXFP4 {
  static constexpr int64_t kValueBytes = 256;
  static constexpr int32_t kOffset = 12;
  // Each E2M1 code's doubled value (kMxfp4Values) + kOffset: the unsigned bytes the kernels
  // multiply, through a 16-entry shuffle table.
  alignas(16) static constexpr uint8_t kShiftedValues[16] = {12, 13, 14, 15, 16, 18, 20, 24,
                                                             12, 11, 10, 9,  8,  6,  4,  0};
};

// The offset of a packed 32-value type's weight bytes (0: not one).
inline int32_t OffsetOf(GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0:
      return Q8_0::kOffset;
    case GgmlType::kQ4_0:
      return Q4_0::kOffset;
    case GgmlType::kMXFP4:
      return MXFP4::kOffset;
    default:
      return 0;
  }
}

template <typename F>
constexpr int64_t PairBytes() {
  return 2 * F::kValueBytes + 2 * kGroupRows * 2;  // 17 (Q8_0) or 9 (Q4_0) cache lines
}

inline int64_t Groups(int64_t rows) { return (rows + kGroupRows - 1) / kGroupRows; }

// --- K-quants (Q4_K, Q5_K, Q6_K; AVX-512 VNNI) ----------------------------------------------
// The same groups of 16 rows, each its nsb = cols / 256 super-blocks one after another, a
// super-block kSuperBytes (a multiple of 64) holding the 16 rows' copies side by side. Vectors are
// 64 bytes of 16 rows x 4 bytes (byte 4r + k of a vector is row r's), as above:
//   Q4_K / Q5_K: vector 8c + m (c < 4, m < 8) holds bytes 32c + 4m .. + 3 of each
//     row's qs: its low nibbles are slice m (values 4m..4m+3) of sub-block 2c, its high nibbles
//     slice m of sub-block 2c + 1 (values 0..15 as stored);
//     kScales: the 6-bit scale of sub-block j of row r at 16j + r (one byte);
//     kMins: the 6-bit mins in pairs, min 2p + e of row r at 32p + 2r + e (one byte);
//     kD, kDmin: the 16 rows' d and dmin (halves);
//     Q5_K also kHigh: vector v holds bytes 4v..4v+3 of each row's qh, so bit j of its byte
//     4r + k is the fifth bit of value 4v + k of sub-block j.
//   Q6_K: kLow: vector 16h + m (h < 2, m < 16) holds bytes 64h + 4m .. + 3 of each row's ql;
//     kHigh: vector 8h + m (m < 8) bytes 32h + 4m .. + 3 of its qh; kScales: the 16 int8
//     scales in pairs, scale 2p + e of row r at 32p + 2r + e; kD: the 16 rows' d.
// 2.8% more bytes than the file's for Q4_K (2368 per 16 x 144), 2.3% for Q5_K, 1% for Q6_K.
//
// Arithmetic (every kernel, bit for bit): with x's super-block (q, d) and its 16-value sums b,
// per row and super-block the exact int32
//   Q4_K / Q5_K: S = sum_j sc_j * (sum_i q_ji * x_ji),  M = sum_j m_j * (b_2j + b_2j+1)
//                acc = fma(float(S), d * d_x, acc); acc = fnmadd(float(M), dmin * d_x, acc)
//   Q6_K:        S = sum_k sc_k * (sum_i q_ki * x_ki) - 32 * sum_k sc_k * b_k   (q unsigned)
//                acc = fma(float(S), d * d_x, acc)
// over the super-blocks in order, and y[t, r] = acc.
struct Q4K {
  static constexpr int64_t kScales = 2048;
  static constexpr int64_t kMins = 2176;
  static constexpr int64_t kD = 2304;
  static constexpr int64_t kDmin = 2336;
  static constexpr int64_t kHigh = 2368;  // Q5_K only
  static constexpr int64_t kSuperBytes = 2368;
};

struct Q5K : Q4K {
  static constexpr int64_t kSuperBytes = 2880;
};

struct Q6K {
  static constexpr int64_t kLow = 0;
  static constexpr int64_t kHigh = 2048;
  static constexpr int64_t kScales = 3072;
  static constexpr int64_t kD = 3328;
  static constexpr int64_t kSuperBytes = 3392;  // 32 bytes of padding keep the next aligned
};

template <typename F>
constexpr bool kIsKQuant = requires {
  F::kSuperBytes;
};

template <typename F>
size_t GroupBytes(int64_t cols) {
  if constexpr (kIsKQuant<F>) {
    return static_cast<size_t>(cols / 256 * F::kSuperBytes);
  } else {
    return static_cast<size_t>((cols / 32 + 1) / 2 * PairBytes<F>());
  }
}

template <typename F>
const uint8_t* Group(const WeightMatrix& w, int64_t g) {
  return w.packed + static_cast<size_t>(g) * GroupBytes<F>(w.cols);
}

template <typename F>
int64_t PairOffset(int64_t b) {
  return b / 2 * PairBytes<F>();
}

// Block b's values and scales within a group (const or not).
template <typename F, typename Byte>
Byte* BlockValues(Byte* group, int64_t b) {
  return group + PairOffset<F>(b) + (b % 2) * F::kValueBytes;
}

template <typename F>
int64_t ScalesOffset(int64_t b) {
  return PairOffset<F>(b) + 2 * F::kValueBytes + (b % 2) * kGroupRows * 2;
}

template <typename F>
const uint16_t* BlockScales(const uint8_t* group, int64_t b) {
  return reinterpret_cast<const uint16_t*>(group + ScalesOffset<F>(b));
}

// The kernels walk tokens in chunks whose activations stay in L2 while the groups pass.
constexpr int64_t kTokenChunk = 64;
// The AVX-512 K-quant kernels take groups in pairs in chunks of this many tokens or more (which
// pay for unpacking the pair's values first); Q6_K's pairs then read ActQ8K::qu.
constexpr int64_t kKPairChunk = 32;

// The walk of every packed kernel over rows [r0, r1) (whole groups) and tokens
// [0, num_tokens): fn(group, r, rows, c0, c1) for each chunk [c0, c1) of kTokenChunk tokens
// and, inside it, each group starting at row r with `rows` real rows (16, fewer in the last).
template <typename F, typename Fn>
void ForChunksAndGroups(const WeightMatrix& w, int64_t num_tokens, int64_t r0, int64_t r1,
                        Fn&& fn) {
  for (int64_t c0 = 0; c0 < num_tokens; c0 += kTokenChunk) {
    const int64_t c1 = c0 + kTokenChunk < num_tokens ? c0 + kTokenChunk : num_tokens;
    for (int64_t r = r0; r < r1; r += kGroupRows) {
      const int64_t rows = w.rows - r < kGroupRows ? w.rows - r : kGroupRows;
      fn(Group<F>(w, r / kGroupRows), r, rows, c0, c1);
    }
  }
}

// The first token tile over a group prefetches the group's stream a page ahead, a pair of
// blocks (or a K-quant super-block) at a time (the hardware prefetchers stop at page
// boundaries); the other tiles find the group in cache. The lines of [p, p + bytes) a page on.
inline void PrefetchPageAhead(const uint8_t* p, int64_t bytes) {
  const char* ahead = reinterpret_cast<const char*>(p) + 4096;
  for (int64_t k = 0; k < bytes; k += 64) PrefetchLine(ahead + k);
}

template <typename F>
void PrefetchPairAhead(const uint8_t* group, int64_t b) {
  PrefetchPageAhead(group + PairOffset<F>(b), PairBytes<F>());
}

template <typename F>
void PrefetchSuperAhead(const uint8_t* group, int64_t s) {
  PrefetchPageAhead(group + s * F::kSuperBytes, F::kSuperBytes);
}

// The 4 activation bytes of one slice as one int32 (for a broadcast to every row).
inline int32_t Slice4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace kvserve::packed
