// KV cache element types. Each type describes how one head's vector of head_dim values is stored
// in a block slot; quantized types add per-slot scales after the values, which is why sizes are
// asked of the type rather than computed as elements × sizeof.
//
// Slot layouts (d = head_dim; every quantity is per (token, head), so a slot's bytes are final
// when the token is written: prefix sharing and copy-on-write copy bytes and nothing else):
//   f32       d × float                                               4d bytes
//   f16       d × IEEE half                                           2d bytes
//   bf16      d × bfloat16                                            2d bytes
//   int8      d × int8 q, then f16 scale s = amax / 127; x ≈ q·s        d + 2 bytes
//   fp8_e4m3  d × e4m3 (bias 7, max 448, no inf), then f16 scale       d + 2 bytes
//             s = amax / 448; x ≈ e4m3(q)·s (the scale keeps small vectors out of subnormals)
//   fp8_e5m2  d × e5m2 (the top byte of an f16); no scale: e5m2 has f16's exponent range   d bytes
//   int4      the rotated vector y = R·x (R = Hadamard × fixed signs / sqrt(d), orthonormal),
//             asymmetric 4-bit: d/2 bytes of nibbles, then f16 scale s and f16 minimum m;
//             y ≈ q·s + m with q in [0, 15]                           d/2 + 4 bytes
// Nibble order of int4: elements go in groups of G = min(32, d); byte j of group g holds element
// g·G + j in its low nibble and g·G + G/2 + j in its high nibble, so W consecutive elements are
// the low (or high) nibbles of W consecutive bytes (one vector load in the attention kernel).
//
// NOTE (why int4 rotates): K vectors carry a few outlier channels (RoPE pairs with large
// magnitude); a per-token 4-bit grid sized by those outliers flattens every other channel to a
// handful of levels. Multiplying by an orthonormal Hadamard-type matrix spreads each outlier over
// all channels (QuaRot), so a per-(token, head) grid fits the whole vector. Because R is
// orthonormal, q·k = (Rq)·(Rk): attention rotates the query once per row, and since
// Σ p_i·(R v_i) = R·Σ p_i·v_i it un-rotates the output once per row (R⁻¹ = Rᵀ). KIVI's alternative
// (keys grouped per channel across tokens) needs a full-precision window until a group of tokens
// is complete, so a block's bytes would change after it is written; per-token rotation keeps
// writes final. Requires head_dim a power of two (CheckKvDtype). Measured (docs/kv_dtypes.md):
// on the 6-layer test model the rotation lowers int4 keys' KL against f16 by ~10% (its keys
// have no strong outliers); with one channel 60x the others the unit channels' RMS error drops
// from 1.36 to 0.37 (kv_dtype_test).
//
// NOTE (fp8 scales): e4m3's smallest normal is 2^-6 and its largest value 448, so without a
// scale small-valued heads fall into subnormals and K outliers saturate; the per-slot scale maps
// amax to 448 for the same 2 bytes int8 pays. e5m2 has f16's exponent range: no scale.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kvserve/status.h"

namespace kvserve {

enum class KvDtype { kF32, kF16, kBF16, kInt8, kFp8E4M3, kFp8E5M2, kInt4 };

inline constexpr KvDtype kAllKvDtypes[] = {KvDtype::kF32,  KvDtype::kF16,     KvDtype::kBF16,
                                           KvDtype::kInt8, KvDtype::kFp8E4M3, KvDtype::kFp8E5M2,
                                           KvDtype::kInt4};

// "f32", "f16", "bf16", "int8", "fp8_e4m3", "fp8_e5m2", "int4".
std::string_view KvDtypeName(KvDtype dtype);
// The names above, comma separated (for error messages).
std::string KvDtypeNames();
// Accepts the names above (case-insensitive; also "float32", "float16", "bfloat16"); nullopt
// otherwise.
std::optional<KvDtype> ParseKvDtype(std::string_view name);
// Like ParseKvDtype, but an unknown name is an InvalidArgument that lists the valid names;
// `what` names the setting in the message (e.g. "--cache-type-k").
Result<KvDtype> ParseKvDtypeOrError(std::string_view name, std::string_view what);
// Whether the type can store head vectors of head_dim values (int4 needs a power of two).
Status CheckKvDtype(KvDtype dtype, int head_dim);

// Bytes that one head's vector of head_dim values takes in a block slot, scales included.
size_t KvBytesPerHeadVector(KvDtype dtype, int head_dim);

// Whether slots of this type hold the rotated vector R·x (see the NOTE above).
constexpr bool KvDtypeIsRotated(KvDtype dtype) { return dtype == KvDtype::kInt4; }

// Writes one head vector of head_dim floats into a slot of the given dtype (quantizing and, for
// rotated types, rotating). REQUIRES: CheckKvDtype(dtype, head_dim) is ok.
void StoreKvVector(KvDtype dtype, const float* src, int head_dim, void* dst);
// Reads one head vector of head_dim values back as floats (un-rotated: LoadKvVector after
// StoreKvVector approximates the original vector).
void LoadKvVector(KvDtype dtype, const void* src, int head_dim, float* dst);
// The slot's values as stored, dequantized but not un-rotated (what attention multiplies with
// the rotated query); equals LoadKvVector for types that do not rotate.
void LoadKvVectorRaw(KvDtype dtype, const void* src, int head_dim, float* dst);

// The rotation R = H·S / sqrt(d) of rotated types: S flips the sign of channel i when
// KvRotationFlips(i) (a fixed pseudo-random pattern, so that vectors that happen to align with a
// Hadamard row still spread), H is the Sylvester-Hadamard matrix. REQUIRES: d a power of two.
constexpr bool KvRotationFlips(int i) {
  uint64_t z = static_cast<uint64_t>(i) + 0x9E3779B97F4A7C15ull;  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (z & 1u) != 0;
}
// x ← R·x and x ← Rᵀ·x, in place, O(d log d).
void RotateKvVector(float* x, int head_dim);
void UnrotateKvVector(float* x, int head_dim);

// FP8 encodings (round to nearest even, saturating to the largest finite value; NaN not
// produced). e4m3: 1 sign, 4 exponent (bias 7), 3 mantissa bits, max 448. e5m2: 1, 5 (bias 15),
// 2, max 57344.
uint8_t F32ToFp8E4M3(float x);
float Fp8E4M3ToF32(uint8_t b);
uint8_t F32ToFp8E5M2(float x);
float Fp8E5M2ToF32(uint8_t b);

}  // namespace kvserve
