// Matrix products on weights stored in any supported GGUF type.
//
// Contract: pure functions over raw memory; the weight bytes are read-only and may be shared by
// any number of threads. Work is split over the given ThreadPool; each call returns when done.
// Scratch space is per thread and kept between calls (no allocation after warm-up).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "quant/types.h"
#include "util/aligned_buffer.h"
#include "util/thread_pool.h"

namespace kvserve {

struct ActQ8_0;  // ops/act_quant.h
struct ActQ8K;

// A 2-D weight as GGUF stores it: `rows` rows of `cols` elements (GGUF dims [cols, rows]),
// each row `row_bytes` long, rows contiguous.
struct WeightMatrix {
  GgmlType type = GgmlType::kF32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;  // output features
  int64_t cols = 0;  // input features
  size_t row_bytes = 0;
  // Optional: the same weights repacked by PackWeights for this CPU's kernels (owned by the
  // caller, who keeps it alive with `data`). MatMul reads it where the running kernels take it
  // and `data` otherwise; everything else (rows, dequantization) reads `data`.
  const uint8_t* packed = nullptr;

  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
  uint64_t bytes() const { return static_cast<uint64_t>(rows) * row_bytes; }
};

// y[t, r] = sum_c w[r, c] * x[t, c]
//   x: [num_tokens, w.cols] row-major, y: [num_tokens, w.rows] row-major.
// NOTE: weights are read once per call whatever num_tokens is: integer and half-precision paths
// read the blocks directly (see docs/architecture.md); the remaining types are dequantized a
// tile at a time into per-thread scratch and multiplied with every token before the next tile.
// Batch invariance: y[t, :] is bit-identical whatever num_tokens is and whatever the other rows
// of x hold (tests check it), so batching never changes a sequence's numbers.
void MatMul(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y, ThreadPool& pool);

// Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4, Q4_K, Q5_K and Q6_K weights take an integer path: the activations are quantized
// per token (ActQ8_0 / ActQ8K, see act_quant.h) and multiplied in integer arithmetic with SIMD
// kernels chosen at run time (AVX-512 VNNI, AVX2, or the portable float path). Other types, and
// CPUs without those instructions, dequantize tiles of rows to floats.

// Packed weights (PackWeights): Q8_0, Q4_K, Q5_K and Q6_K matrices on AVX-512 VNNI CPUs, and
// Q4_0 and MXFP4 ones on AVX2 CPUs too, are repacked once at load into groups of 16 rows whose blocks interleave the
// rows 4 bytes at a time: a VNNI (or maddubs) product then yields 16 (8) rows' block sums in one
// register, and for Q8_0 it is the layout of an AMX tile's second operand. Every kernel sums each
// (row, token) the same way: per block the exact integer dot product, then acc = fma(float(sum),
// d_w * d_x, acc) over the blocks in order (the K-quants: per super-block, ops/matmul_packed.h),
// so AMX tiles (16 tokens at a time) and VNNI (the
// rest, and decode) give the same bits and batching never changes a result. See
// docs/architecture.md.
//
// The bytes of w in the layout the running kernels want (a multiple of 64), or 0 when they take
// w as it is stored (other types, or a CPU without a packed kernel).
size_t PackedWeightBytes(const WeightMatrix& w);
// Writes that layout to out (64-byte aligned, PackedWeightBytes(w) bytes); then set
// w.packed = out.
void PackWeightsInto(const WeightMatrix& w, uint8_t* out);
// Both in a buffer of its own (empty when PackedWeightBytes is 0).
AlignedBuffer<uint8_t> PackWeights(const WeightMatrix& w);

// The instruction set in use: "avx512-amx", "avx512-vnni", "avx2" or "generic". The
// KVSERVE_ISA environment variable (generic, avx2, avx512, amx) caps it at start-up; AMX is
// used only where Linux grants the process its tile state (asked once; the log says so if not).
std::string_view MatMulIsa();
// Switches the kernels ("generic", "avx2", "avx512", "amx", "best"); false if the CPU lacks
// it. For tests and benchmarks; not thread-safe against running matmuls.
bool SetMatMulIsa(std::string_view isa);

// The activation quantization MatMul runs under the chosen kernels: act_quant.h's, or a vector
// version that writes the same bytes (tests check it).
void QuantizeActQ8_0ForIsa(const float* x, int64_t num_tokens, ActQ8_0& out);
void QuantizeActQ8KForIsa(const float* x, int64_t num_tokens, ActQ8K& out);

// Reference: dequantize every row and take plain dot products (tests compare against it).
void MatMulReference(const WeightMatrix& w, const float* x, int64_t num_tokens, float* y);

// Dequantizes row r of w into out[0..cols).
void DequantizeWeightRow(const WeightMatrix& w, int64_t r, float* out);

}  // namespace kvserve
