#include "quant/kv_dtype.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>

#include "util/fp16.h"

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
      for (int i = 0; i < head_dim; ++i) out[i] = F32ToF16(src[i]);
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
      for (int i = 0; i < head_dim; ++i) dst[i] = F16ToF32(in[i]);
      return;
    }
  }
}

}  // namespace kvserve
