// Instruction-set specific matmul panels, chosen once at run time (see matmul.cc).
//
// A panel computes y[t, r] for rows [r0, r1) of one weight matrix and every token t in
// [0, num_tokens). Each (row, token) output is always summed in the same order, whatever tile it
// falls in, so results are bit-identical however tokens are batched.
// Internal to ops/.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ops/act_quant.h"
#include "ops/matmul.h"

namespace kvserve::kernels {

struct PanelArgs {
  const WeightMatrix* w;
  int64_t num_tokens;
  float* y;  // [num_tokens, w->rows]
};

using Q8_0Panel = void (*)(const PanelArgs& a, const ActQ8_0& x, int64_t r0, int64_t r1);
// Fills x.pair_q / x.pair_d for tokens [t0, t1) (x's pointers address token 0).
using Q8_0Prepare = void (*)(const ActQ8_0& x, int64_t t0, int64_t t1);
using Q8KPanel = void (*)(const PanelArgs& a, const ActQ8K& x, int64_t r0, int64_t r1);
using F16RowToF32 = void (*)(const uint16_t* src, float* dst, int64_t n);
// F16 / BF16 weights times float activations x [num_tokens, w->cols], no activation rounding.
// Every (row, token) output is one vector accumulator (16 lanes on AVX-512, 8 on AVX2) of FMAs
// over the columns in order (a partial last vector zero-filled), then a fixed horizontal sum:
// the decode path (weights converted in registers) and the prefill path (weights converted
// once per panel into per-thread scratch) do the same arithmetic, bit for bit.
using HalfPanel = void (*)(const PanelArgs& a, const float* x, int64_t r0, int64_t r1);
// Activation quantization: act_quant.h's functions, or vector versions that write the same bytes
// (the same float operations per value: the product x * (1 / d) rounded on its own, then the
// +-0.5 added and truncated).
using QuantizeQ8_0 = void (*)(const float* x, int64_t num_tokens, ActQ8_0& out);
using QuantizeQ8K = void (*)(const float* x, int64_t num_tokens, ActQ8K& out);

struct KernelTable {
  const char* isa = "generic";
  QuantizeQ8_0 quantize_q8_0 = &QuantizeActQ8_0;
  QuantizeQ8K quantize_q8k = &QuantizeActQ8K;
  Q8_0Panel q8_0 = nullptr;  // Q8_0 weights x ActQ8_0
  // When set, MatMul prepares ActQ8_0's paired layout for q8_0 for batches of
  // [q8_0_prepare_min_tokens, q8_0_prepare_max_tokens] tokens.
  Q8_0Prepare q8_0_prepare = nullptr;
  int64_t q8_0_prepare_min_tokens = 0;
  int64_t q8_0_prepare_max_tokens = 0;
  // Q8_0 / Q4_0 weights packed by PackWeights (ops/matmul_packed.h) x ActQ8_0 with its block
  // sums, rows [r0, r1) in whole groups (r0 a multiple of 16, r1 too or w->rows).
  Q8_0Panel q8_0_packed = nullptr;
  Q8_0Panel q4_0_packed = nullptr;
  Q8_0Panel mxfp4_packed = nullptr;
  // The same product with AMX tiles, for num_tokens a multiple of 16; the same bits as
  // q8_0_packed (MatMul gives it whole tiles and q8_0_packed the rest).
  Q8_0Panel q8_0_packed_tiles = nullptr;
  Q8_0Panel q4_0 = nullptr;   // Q4_0 weights x ActQ8_0
  Q8_0Panel q5_0 = nullptr;   // Q5_0 weights x ActQ8_0
  Q8_0Panel q4_1 = nullptr;   // Q4_1 weights x ActQ8_0 with its block sums
  Q8_0Panel q5_1 = nullptr;   // Q5_1 weights x ActQ8_0 with its block sums
  Q8_0Panel mxfp4 = nullptr;  // MXFP4 weights x ActQ8_0
  Q8KPanel q4_k = nullptr;   // Q4_K weights x ActQ8K
  Q8KPanel q5_k = nullptr;   // Q5_K weights x ActQ8K
  Q8KPanel q6_k = nullptr;   // Q6_K weights x ActQ8K
  // Q4_K / Q5_K / Q6_K weights packed by PackWeights x ActQ8K with its sum32_pairs, rows [r0, r1)
  // in whole groups of 16 (as q8_0_packed).
  Q8KPanel q4_k_packed = nullptr;
  Q8KPanel q5_k_packed = nullptr;
  Q8KPanel q6_k_packed = nullptr;
  F16RowToF32 f16_to_f32 = nullptr;
  HalfPanel f16 = nullptr;   // F16 weights x float activations
  HalfPanel bf16 = nullptr;  // BF16 weights x float activations
};

// Token tiles for the ISA files' panels. Each call passes a lambda of its own file, so no
// instantiation is shared between files compiled for different instruction sets.

// Calls tile(std::integral_constant<int, N>, t) for N = n (1 <= n < kTile) at token t.
template <int N, typename TileCall>
void LastTile(int64_t n, int64_t t, TileCall& tile) {
  if constexpr (N > 0) {
    if (n == N) {
      tile(std::integral_constant<int, N>{}, t);
    } else {
      LastTile<N - 1>(n, t, tile);
    }
  }
}

// Calls tile(std::integral_constant<int, NT>, t) over tokens [t0, t1) in tiles of kTile, then
// one tile of the remaining tokens, so small batches also read each weight tile only once.
template <int kTile, typename TileCall>
void ForTokenTiles(int64_t t0, int64_t t1, TileCall&& tile) {
  int64_t t = t0;
  for (; t + kTile <= t1; t += kTile) tile(std::integral_constant<int, kTile>{}, t);
  LastTile<kTile - 1>(t1 - t, t, tile);
}
template <int kTile, typename TileCall>
void ForTokenTiles(int64_t num_tokens, TileCall&& tile) {
  ForTokenTiles<kTile>(0, num_tokens, tile);
}

// Each returns false (and leaves the table) when the CPU or the compiler lacks the ISA.
bool InitAvx512(KernelTable& table);
bool InitAvx2(KernelTable& table);
// After InitAvx512: adds the AMX tile kernels where the CPU has AMX-INT8 and Linux grants the
// process its tile state (asked once per process; the log says why when it is refused).
bool InitAmx(KernelTable& table);

}  // namespace kvserve::kernels
