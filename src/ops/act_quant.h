// Activations quantized on the fly for integer dot products with quantized weights.
//
// ActQ8_0 pairs with Q8_0 weights: per token, blocks of 32 int8 with one float scale
// (x ≈ d * q, q in [-127, 127]). ActQ8K pairs with K-quant weights: super-blocks of 256 int8 with
// one float scale, plus the integer sum of every 16 values (for the weights' mins and offsets).
// Quantization is per token, so a token's result never depends on the rest of the batch.
#pragma once

#include <cstdint>

namespace kvserve {

struct ActQ8_0 {
  int8_t* q = nullptr;  // [num_tokens, cols]
  float* d = nullptr;   // [num_tokens, cols / 32]
  int64_t cols = 0;
  // Optional, for kernels that read blocks in pairs (see KernelTable::q8_0_prepare): the same
  // activations laid out for them, filled after quantization. Per token and pair of blocks p
  // (blocks 2p and 2p+1; a missing last block reads as q = 0, d = 0):
  uint8_t* pair_q = nullptr;  // [num_tokens, pairs * 64]: q + 128, as unsigned bytes
  float* pair_d = nullptr;    // [num_tokens, pairs * 16]: d of block 2p in lanes 0-7, 2p+1 in 8-15
  // Optional, for the packed kernels (ops/matmul_packed.h): sum(q) of each block,
  // [num_tokens, cols / 32], filled by SumActQ8_0.
  int32_t* sum = nullptr;
  // Optional, for the AVX-512 packed tiles: per tile of kActTileTokens tokens (from token 0) and
  // block, the tile's tokens' d and -offset * sum(q) (offset: the packed weights', see
  // ops/matmul_packed.h) side by side, [ceil(num_tokens / 8), cols / 32, 8] each, filled by
  // TileActQ8_0. A tile's per-block scalars are then one line, read through one pointer.
  float* tile_d = nullptr;
  int32_t* tile_osum = nullptr;
};

constexpr int64_t kActTileTokens = 8;

// Where token t's entry for block 0 lies in ActQ8_0::tile_d / tile_osum (nb blocks per token);
// block b's is kActTileTokens * b further on.
inline int64_t ActTileOffset(int64_t t, int64_t nb) {
  return t / kActTileTokens * kActTileTokens * nb + t % kActTileTokens;
}

struct ActQ8K {
  int8_t* q = nullptr;      // [num_tokens, cols]
  float* d = nullptr;       // [num_tokens, cols / 256]
  // [num_tokens, cols / 16] sum of each 16 q values (|sum| <= 16 * 127 fits int16): Q6_K's
  // sub-blocks, and in adjacent pairs Q4_K's / Q5_K's.
  int16_t* bsum = nullptr;
  int64_t cols = 0;
  // Optional, for the packed K-quant kernels (ops/matmul_packed.h): per token and super-block
  // the 32-value sums s_j = b_2j + b_2j+1 of its 8 sub-blocks in 4 int32, each the int16 pair
  // (s_2p, s_2p+1) in memory order. [num_tokens, cols / 256 * 4], filled by PairSumsActQ8K.
  int32_t* sum32_pairs = nullptr;
  // Optional, for the packed Q6_K kernels' pair tiles: q + 128 as unsigned bytes (q ^ 0x80),
  // the dpbusd's unsigned operand where the weights are the signed one. [num_tokens, cols],
  // filled by QuantizeActQ8K when set.
  uint8_t* qu = nullptr;
};

// REQUIRES: cols % 32 == 0 (ActQ8_0), cols % 256 == 0 (ActQ8K); buffers sized as above.
void QuantizeActQ8_0(const float* x, int64_t num_tokens, ActQ8_0& out);
void QuantizeActQ8K(const float* x, int64_t num_tokens, ActQ8K& out);
// Fills out.sum for tokens [t0, t1) from out.q (out's pointers address token 0).
void SumActQ8_0(ActQ8_0& out, int64_t t0, int64_t t1);
// Tokens [t0, t1) of out.tile_d and out.tile_osum from out.d and out.sum (filled before).
void TileActQ8_0(ActQ8_0& out, int64_t t0, int64_t t1, int32_t offset);
// Fills out.sum32_pairs for tokens [t0, t1) from out.bsum.
void PairSumsActQ8K(ActQ8K& out, int64_t t0, int64_t t1);

}  // namespace kvserve
