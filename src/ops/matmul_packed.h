// The packed Q8_0 layout (PackWeights) that the tile kernels read. Internal to ops/.
//
// Rows in groups of kGroupRows (16; a last partial group is padded with zero rows). A group is
// GroupBytes(cols) bytes holding its nb = cols / 32 blocks in pairs of kPairBytes (17 cache
// lines; a missing last block of an odd nb is padding, never read):
//   values of block b: 512 bytes at PairOffset(b) + (b % 2) * 512. The block's 32 columns as 8
//           slices of 4: byte k * 64 + r * 4 + j holds row r's weight at column b * 32 + k * 4
//           + j, stored as an unsigned byte w + 128. That is an AMX tile's second operand (8
//           rows of 64 bytes) and a VNNI operand (one 64-byte slice: 16 rows x 4 columns).
//   scales of block b: 16 halves (one per row) at PairOffset(b) + 1024 + (b % 2) * 32.
// The same bytes per block as the file's Q8_0 (16 x 34), and a group, like the groups after
// it, is one stream read front to back: a decode prefetches it at a fixed distance.
//
// Arithmetic (every kernel, bit for bit): with x's Q8_0 block (q, d) and s = sum(q),
//   sum = sum_j (w_j + 128) * q_j - 128 * s            (exact in int32)
//   acc = fma(float(sum), d_w * d_x, acc)               (blocks in order, one lane per row)
// and y[t, r] = acc. ActQ8_0::neg_sum128 carries -128 * s per token and block.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/matmul.h"

namespace kvserve::packed {

constexpr int64_t kGroupRows = 16;
constexpr int64_t kBlockBytes = 512;  // one block's values
constexpr int64_t kPairBytes = 2 * kBlockBytes + 2 * kGroupRows * 2;

inline int64_t Groups(int64_t rows) { return (rows + kGroupRows - 1) / kGroupRows; }

inline size_t GroupBytes(int64_t cols) {
  return static_cast<size_t>((cols / 32 + 1) / 2 * kPairBytes);
}

inline const uint8_t* Group(const WeightMatrix& w, int64_t g) {
  return w.packed + static_cast<size_t>(g) * GroupBytes(w.cols);
}

inline int64_t PairOffset(int64_t b) { return b / 2 * kPairBytes; }

// Block b's values and scales within a group (const or not).
template <typename Byte>
Byte* BlockValues(Byte* group, int64_t b) {
  return group + PairOffset(b) + (b % 2) * kBlockBytes;
}

inline int64_t ScalesOffset(int64_t b) {
  return PairOffset(b) + 2 * kBlockBytes + (b % 2) * kGroupRows * 2;
}

inline const uint16_t* BlockScales(const uint8_t* group, int64_t b) {
  return reinterpret_cast<const uint16_t*>(group + ScalesOffset(b));
}

}  // namespace kvserve::packed
