// Tensor element types as GGUF numbers them (ggml's type ids), their block layouts, and the
// reference (scalar, obviously correct) quantize / dequantize routines.
//
// Contract: every function here is a pure function on raw spans, thread-safe. `n` counts
// elements and must be a multiple of the type's block size (REQUIRES). Fast kernels live in
// ops/ and are tested against these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvserve {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
  kMXFP4 = 39,  // OCP microscaling FP4 (gpt-oss experts)
};

struct TypeTraits {
  GgmlType type;
  std::string_view name;   // "F32", "Q4_K", ... as GGUF tools print them
  int64_t block_elems;     // elements per block (1 for plain types)
  int64_t block_bytes;     // bytes per block
  bool supported;          // we can dequantize it (and so load tensors of it)
};

// Traits of a raw GGUF type id; nullopt for ids that name no type we know.
std::optional<TypeTraits> GetTypeTraits(uint32_t raw_type);
TypeTraits Traits(GgmlType type);  // REQUIRES: a known type
// Bytes of a row of n elements, or nullopt if n is not a multiple of the block size.
std::optional<uint64_t> RowBytes(GgmlType type, int64_t n);
// Parses "F32", "f16", "Q8_0", "q4_k", ...; nullopt if unknown.
std::optional<GgmlType> ParseGgmlType(std::string_view name);

// REQUIRES: Traits(type).supported, n % block_elems == 0.
void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);
// Quantizes with the usual ggml reference rounding. Supported for F32, F16, BF16, Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4; returns false for other types.
bool QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n);
bool CanQuantize(GgmlType type);

// Block layouts (little-endian, packed exactly as in GGUF files). f16 fields are uint16_t bits.
constexpr int kQK = 32;    // elements per block of the *_0 / *_1 types
constexpr int kQKK = 256;  // elements per super-block of the K-quants
constexpr int kKScaleBytes = 12;

#pragma pack(push, 1)
struct BlockQ4_0 { uint16_t d; uint8_t qs[kQK / 2]; };
struct BlockQ4_1 { uint16_t d; uint16_t m; uint8_t qs[kQK / 2]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[kQK]; };
struct BlockQ8_1 { uint16_t d; uint16_t s; int8_t qs[kQK]; };
struct BlockQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[kKScaleBytes]; uint8_t qs[kQKK / 2]; };
struct BlockQ5_K {
  uint16_t d; uint16_t dmin; uint8_t scales[kKScaleBytes]; uint8_t qh[kQKK / 8]; uint8_t qs[kQKK / 2];
};
struct BlockQ6_K { uint8_t ql[kQKK / 2]; uint8_t qh[kQKK / 4]; int8_t scales[kQKK / 16]; uint16_t d; };
struct BlockQ8_K { float d; int8_t qs[kQKK]; int16_t bsums[kQKK / 16]; };
// MXFP4: 32 E2M1 values, stored doubled as kMxfp4Values[code], times 2^(e - 128) (the E8M0
// scale 2^(e - 127) halved for the doubling). Low nibbles hold values 0..15, high 16..31.
struct BlockMXFP4 { uint8_t e; uint8_t qs[kQK / 2]; };
#pragma pack(pop)

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockMXFP4) == 17);

// Twice the E2M1 values of the 16 MXFP4 codes (sign bit 3).
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};
// The scale of an MXFP4 block with exponent byte e: 2^(e - 128), exact (subnormal for e < 2).
float Mxfp4Scale(uint8_t e);

// Q4_K / Q5_K pack eight 6-bit scales and eight 6-bit mins into 12 bytes:
//   bytes 0..3:  scale[0..3] low 6 bits, bits 6..7 = scale[4..7] bits 4..5
//   bytes 4..7:  min[0..3]   low 6 bits, bits 6..7 = min[4..7]   bits 4..5
//   bytes 8..11: low nibble = scale[4..7] bits 0..3, high nibble = min[4..7] bits 0..3
// Unpacks the scale and min of sub-block j (j < 8).
void UnpackScaleMinK4(const uint8_t* packed, int j, uint8_t* scale, uint8_t* min);

}  // namespace kvserve
