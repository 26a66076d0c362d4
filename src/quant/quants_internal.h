// Per-format reference kernels behind DequantizeRow / QuantizeRow (types.h). Internal to quant/:
// other modules call the dispatchers in types.h.
//
// Contract: pure functions; `n` is a multiple of the format's block size (REQUIRES, checked by
// the dispatchers); `src` / `dst` point at n elements or n / block_elems blocks.
#pragma once

#include <cstdint>

namespace kvserve::quant_internal {

// Legacy 32-element block formats and MXFP4 (legacy_quants.cc).
void DequantizeQ4_0(const void* src, float* dst, int64_t n);
void DequantizeQ4_1(const void* src, float* dst, int64_t n);
void DequantizeQ5_0(const void* src, float* dst, int64_t n);
void DequantizeQ5_1(const void* src, float* dst, int64_t n);
void DequantizeQ8_0(const void* src, float* dst, int64_t n);
void QuantizeQ4_0(const float* src, void* dst, int64_t n);
void QuantizeQ4_1(const float* src, void* dst, int64_t n);
void QuantizeQ5_0(const float* src, void* dst, int64_t n);
void QuantizeQ5_1(const float* src, void* dst, int64_t n);
void QuantizeQ8_0(const float* src, void* dst, int64_t n);
void DequantizeMXFP4(const void* src, float* dst, int64_t n);
// ggml's quantize_row_mxfp4_ref: e = floor(log2(amax)) - 2 + 127, each value the first code
// nearest to it.
void QuantizeMXFP4(const float* src, void* dst, int64_t n);

// 256-element super-block K-quants (k_quants.cc).
void DequantizeQ4_K(const void* src, float* dst, int64_t n);
void DequantizeQ5_K(const void* src, float* dst, int64_t n);
void DequantizeQ6_K(const void* src, float* dst, int64_t n);
void DequantizeQ8_K(const void* src, float* dst, int64_t n);
void QuantizeQ4_K(const float* src, void* dst, int64_t n);
void QuantizeQ5_K(const float* src, void* dst, int64_t n);
void QuantizeQ6_K(const float* src, void* dst, int64_t n);

// The inverse of UnpackScaleMinK4 (types.h): eight scales and eight mins into 12 bytes.
void PackScaleMinK4(const uint8_t* scales, const uint8_t* mins, uint8_t* packed);

}  // namespace kvserve::quant_internal
