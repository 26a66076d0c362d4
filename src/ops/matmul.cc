#include "ops/matmul.h"

#include <algorithm>
#include <vector>

#include "ops/simd.h"

namespace kvserve {
namespace {

using simd::kLanes;
using simd::Load;
using simd::VecF;

constexpr int64_t kRowTile = 16;   // rows dequantized together
constexpr int64_t kMicroRows = 4;  // micro-kernel: 4 rows x 4 tokens
constexpr int64_t kMicroTokens = 4;

std::vector<float>& ThreadScratch(size_t n) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < n) scratch.resize(n);
  return scratch;
}

// y[t, r0 + i] for i < nr, t < nt, from dequantized rows w (stride cols) and tokens x.
// NOTE: every output is summed in the same order (one vector accumulator over the columns, then
// its lanes, then the scalar tail) whatever nr and nt are, so a token's result never depends on
// which other tokens share the batch: a decode step alone, a decode batched with other requests
// and a prefill of the same tokens produce bit-identical K/V. Prefix caching relies on it.
void MicroKernel(const float* w, const float* x, int64_t cols, int64_t nr, int64_t nt, float* y,
                 int64_t y_stride) {
  VecF acc[kMicroTokens][kMicroRows] = {};
  int64_t c = 0;
  for (; c + kLanes <= cols; c += kLanes) {
    VecF wv[kMicroRows];
    for (int64_t i = 0; i < nr; ++i) wv[i] = Load(w + i * cols + c);
    for (int64_t t = 0; t < nt; ++t) {
      const VecF xv = Load(x + t * cols + c);
      for (int64_t i = 0; i < nr; ++i) acc[t][i] += wv[i] * xv;
    }
  }
  for (int64_t t = 0; t < nt; ++t) {
    for (int64_t i = 0; i < nr; ++i) {
      float s = simd::Sum(acc[t][i]);
      for (int64_t k = c; k < cols; ++k) s += w[i * cols + k] * x[t * cols + k];
      y[t * y_stride + i] = s;
    }
  }
}

void MatMulRows(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y, int64_t r0,
                int64_t r1) {
  float* tile = ThreadScratch(static_cast<size_t>(kRowTile * w.cols)).data();
  for (int64_t rt = r0; rt < r1; rt += kRowTile) {
    const int64_t nrows = std::min(kRowTile, r1 - rt);
    const float* rows;
    if (w.type == GgmlType::kF32) {
      rows = reinterpret_cast<const float*>(w.row(rt));
    } else {
      for (int64_t i = 0; i < nrows; ++i) DequantizeRow(w.type, w.row(rt + i), tile + i * w.cols, w.cols);
      rows = tile;
    }
    for (int64_t t = 0; t < num_tokens; t += kMicroTokens) {
      const int64_t nt = std::min(kMicroTokens, num_tokens - t);
      for (int64_t i = 0; i < nrows; i += kMicroRows) {
        const int64_t nr = std::min(kMicroRows, nrows - i);
        MicroKernel(rows + i * w.cols, x + t * w.cols, w.cols, nr, nt, y + t * w.rows + rt + i,
                    w.rows);
      }
    }
  }
}

}  // namespace

void DequantizeWeightRow(const WeightMatrix& w, int64_t r, float* out) {
  DequantizeRow(w.type, w.row(r), out, w.cols);
}

void MatMul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y, ThreadPool& pool) {
  pool.ParallelFor(
      w.rows, [&](int64_t r0, int64_t r1) { MatMulRows(w, x, num_tokens, y, r0, r1); }, kRowTile);
}

void MatMulReference(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y) {
  std::vector<float> row(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeWeightRow(w, r, row.data());
    for (int64_t t = 0; t < num_tokens; ++t) {
      double s = 0;
      for (int64_t c = 0; c < w.cols; ++c) s += static_cast<double>(row[c]) * x[t * w.cols + c];
      y[t * w.rows + r] = static_cast<float>(s);
    }
  }
}

}  // namespace kvserve
