#include "quant/kv_dtype.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>

#include "util/fp16.h"

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#define KVSERVE_KV_F16C 1
#endif

namespace kvserve {

std::string_view KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32: return "f32";
    case KvDtype::kF16: return "f16";
  }
  return "?";
}

std::optional<KvDtype> ParseKvDtype(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "f32" || lower == "float32") return KvDtype::kF32;
  if (lower == "f16" || lower == "float16") return KvDtype::kF16;
  return std::nullopt;
}

size_t KvBytesPerHeadVector(KvDtype dtype, int head_dim) {
  switch (dtype) {
    case KvDtype::kF32: return static_cast<size_t>(head_dim) * 4;
    case KvDtype::kF16: return static_cast<size_t>(head_dim) * 2;
  }
  return 0;
}

void StoreKvVector(KvDtype dtype, const float* src, int head_dim, void* dst) {
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(dst, src, static_cast<size_t>(head_dim) * sizeof(float));
      return;
    case KvDtype::kF16: {
      auto* out = static_cast<uint16_t*>(dst);
      int i = 0;
#ifdef KVSERVE_KV_F16C
      for (; i + 8 <= head_dim; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
      }
#endif
      for (; i < head_dim; ++i) out[i] = F32ToF16(src[i]);
      return;
    }
  }
}

void LoadKvVector(KvDtype dtype, const void* src, int head_dim, float* dst) {
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(dst, src, static_cast<size_t>(head_dim) * sizeof(float));
      return;
    case KvDtype::kF16: {
      const auto* in = static_cast<const uint16_t*>(src);
      int i = 0;
#ifdef KVSERVE_KV_F16C
      for (; i + 8 <= head_dim; i += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
      }
#endif
      for (; i < head_dim; ++i) dst[i] = F16ToF32(in[i]);
      return;
    }
  }
}

}  // namespace kvserve
