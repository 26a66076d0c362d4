// The packed Q8_0 layout (PackWeights) that the tile kernels read. Internal to ops/.
//
// Rows in groups of kGroupRows (16; a last partial group is padded with zero rows). A group is
// GroupBytes(cols) bytes, 64-byte aligned, holding for its nb = cols / 32 blocks:
//   values: nb x 512 bytes. Block b's 32 columns as 8 slices of 4: byte
//           b * 512 + k * 64 + r * 4 + j holds row r's weight at column b * 32 + k * 4 + j,
//           stored as an unsigned byte w + 128. That is an AMX tile's second operand (8 rows of
//           64 bytes) and a VNNI operand (one 64-byte slice: 16 rows x 4 columns).
//   scales: nb x 16 halves after the values: block b's scale for each of the 16 rows.
// The same bytes per block as the file's Q8_0 (16 x 34), read in one stream per group.
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
constexpr int64_t kBlockBytes = 512;  // one block of a group's values

inline int64_t Groups(int64_t rows) { return (rows + kGroupRows - 1) / kGroupRows; }

inline size_t GroupBytes(int64_t cols) {
  const size_t nb = static_cast<size_t>(cols / 32);
  return (nb * (kBlockBytes + 2 * kGroupRows) + 63) / 64 * 64;
}

inline const uint8_t* GroupValues(const WeightMatrix& w, int64_t g) {
  return w.packed + static_cast<size_t>(g) * GroupBytes(w.cols);
}

inline const uint16_t* GroupScales(const WeightMatrix& w, int64_t g) {
  return reinterpret_cast<const uint16_t*>(GroupValues(w, g) +
                                           static_cast<size_t>(w.cols / 32) * kBlockBytes);
}

}  // namespace kvserve::packed
