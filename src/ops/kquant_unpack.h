// Unpacking of K-quant blocks shared by the SIMD matmul files. Each including file is compiled
// for at least AVX2 (see CMakeLists.txt); internal to ops/.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/types.h"

// NOTE: the functions are in an anonymous namespace: each including file is compiled for its
// own instruction set, and one inline definition shared by the linker across them could run an
// AVX-512 copy on an AVX2-only CPU (SIGILL where a build did not inline it).
namespace kvserve::kernels {
namespace {

// Q4_K's 12 scale bytes -> bytes 0-7: the eight 6-bit scales, bytes 8-15: the eight 6-bit mins.
inline __m128i Q4KScalesAndMins(const uint8_t* s) {
  uint32_t u[4];
  std::memcpy(u, s, 12);
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  u[3] = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);
  const uint32_t mins_lo = u[1] & kLow6;
  u[1] = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);
  u[2] = mins_lo;
  u[0] &= kLow6;
  __m128i out;
  std::memcpy(&out, u, sizeof(out));
  return out;
}

// Q6_K half h (128 values): the four 32-value groups of elements 128h + 32g .. + 32, as unsigned
// 6-bit values (meaning value - 32), assembled from the low nibbles (ql) and 2 high bits (qh).
inline void Q6KUnpackHalf(const BlockQ6_K& blk, int h, __m256i out[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
  const uint8_t* ql = blk.ql + 64 * h;
  const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
  const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
  auto high = [&](int shift) {
    return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, shift), m2), 4);
  };
  out[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), high(0));
  out[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), high(2));
  out[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), high(4));
  out[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), high(6));
}

}  // namespace
}  // namespace kvserve::kernels
