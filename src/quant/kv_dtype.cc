#include "quant/kv_dtype.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "util/check.h"
#include "util/fp16.h"

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#define KVSERVE_KV_F16C 1
#endif

namespace kvserve {
namespace {

// Largest finite f16, so that scales never become infinite.
constexpr float kMaxF16 = 65504.f;

uint16_t ScaleToF16(float s) { return F32ToF16(std::min(s, kMaxF16)); }

float ReadF16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return F16ToF32(h);
}
void WriteF16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, sizeof(h)); }

float AbsMax(const float* x, int n) {
  float m = 0.f;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// Round to nearest even and clamp to [lo, hi]; NaN becomes lo.
int RoundClamp(float v, float lo, float hi) {
  return static_cast<int>(std::fmin(std::fmax(std::nearbyint(v), lo), hi));
}

// Element i of an int4 slot (see the nibble order in the header): its byte and bit shift.
int Int4Group(int head_dim) { return std::min(32, head_dim); }
size_t Int4Byte(int i, int group) {
  const int g = i / group, o = i % group, half = group / 2;
  return static_cast<size_t>(g) * half + o % half;
}
int Int4Shift(int i, int group) { return i % group < group / 2 ? 0 : 4; }

template <int E, int M>
uint8_t F32ToFp8(float x, uint8_t max_code) {
  constexpr int bias = (1 << (E - 1)) - 1;
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  const uint8_t sign = static_cast<uint8_t>((b >> 24) & 0x80u);
  b &= 0x7FFFFFFFu;
  float a;
  std::memcpy(&a, &b, sizeof(a));
  if (std::isnan(a)) return 0;
  const float min_normal = std::ldexp(1.f, 1 - bias);
  if (a < min_normal) {
    // Subnormal: steps of 2^(1 - bias - M); 2^M steps round up to the smallest normal's code.
    const float q = std::nearbyint(std::ldexp(a, bias - 1 + M));
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(q));
  }
  if (b >= 0x7F800000u) return static_cast<uint8_t>(sign | max_code);  // infinity saturates
  constexpr int drop = 23 - M;
  const uint32_t r = (b + ((1u << (drop - 1)) - 1) + ((b >> drop) & 1u)) >> drop;
  uint32_t code = r - (static_cast<uint32_t>(127 - bias) << M);
  code = std::min<uint32_t>(code, max_code);
  return static_cast<uint8_t>(sign | code);
}

void Fwht(float* x, int n) {
  for (int h = 1; h < n; h *= 2) {
    for (int i = 0; i < n; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
}

}  // namespace

std::string_view KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32: return "f32";
    case KvDtype::kF16: return "f16";
    case KvDtype::kBF16: return "bf16";
    case KvDtype::kInt8: return "int8";
    case KvDtype::kFp8E4M3: return "fp8_e4m3";
    case KvDtype::kFp8E5M2: return "fp8_e5m2";
    case KvDtype::kInt4: return "int4";
  }
  return "?";
}

std::string KvDtypeNames() {
  std::string out;
  for (KvDtype d : kAllKvDtypes) {
    if (!out.empty()) out += ", ";
    out += KvDtypeName(d);
  }
  return out;
}

std::optional<KvDtype> ParseKvDtype(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "float32") return KvDtype::kF32;
  if (lower == "float16") return KvDtype::kF16;
  if (lower == "bfloat16") return KvDtype::kBF16;
  for (KvDtype d : kAllKvDtypes) {
    if (lower == KvDtypeName(d)) return d;
  }
  return std::nullopt;
}

Result<KvDtype> ParseKvDtypeOrError(std::string_view name, std::string_view what) {
  if (auto d = ParseKvDtype(name)) return *d;
  return InvalidArgument(
      fmt::format("{}: unknown KV cache type '{}'; valid types: {}", what, name, KvDtypeNames()));
}

Status CheckKvDtype(KvDtype dtype, int head_dim) {
  if (head_dim <= 0) return InvalidArgument(fmt::format("head_dim {} must be positive", head_dim));
  if (KvDtypeIsRotated(dtype) && (head_dim < 2 || (head_dim & (head_dim - 1)) != 0)) {
    return InvalidArgument(fmt::format(
        "KV cache type {} needs a head_dim that is a power of two (it rotates each head vector "
        "with a Hadamard transform); this model's head_dim is {}: use int8 or fp8_e4m3",
        KvDtypeName(dtype), head_dim));
  }
  return Status::Ok();
}

size_t KvBytesPerHeadVector(KvDtype dtype, int head_dim) {
  const size_t d = static_cast<size_t>(head_dim);
  switch (dtype) {
    case KvDtype::kF32: return d * 4;
    case KvDtype::kF16:
    case KvDtype::kBF16: return d * 2;
    case KvDtype::kInt8:
    case KvDtype::kFp8E4M3: return d + 2;  // values + f16 scale
    case KvDtype::kFp8E5M2: return d;
    case KvDtype::kInt4: return (d + 1) / 2 + 4;  // nibbles + f16 scale + f16 minimum
  }
  return 0;
}

void RotateKvVector(float* x, int head_dim) {
  KV_CHECK(head_dim >= 2 && (head_dim & (head_dim - 1)) == 0, "rotation of head_dim {}", head_dim);
  for (int i = 0; i < head_dim; ++i) {
    if (KvRotationFlips(i)) x[i] = -x[i];
  }
  Fwht(x, head_dim);
  const float s = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  for (int i = 0; i < head_dim; ++i) x[i] *= s;
}

void UnrotateKvVector(float* x, int head_dim) {
  KV_CHECK(head_dim >= 2 && (head_dim & (head_dim - 1)) == 0, "rotation of head_dim {}", head_dim);
  Fwht(x, head_dim);
  const float s = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  for (int i = 0; i < head_dim; ++i) {
    x[i] *= s;
    if (KvRotationFlips(i)) x[i] = -x[i];
  }
}

uint8_t F32ToFp8E4M3(float x) { return F32ToFp8<4, 3>(x, 0x7E); }
uint8_t F32ToFp8E5M2(float x) { return F32ToFp8<5, 2>(x, 0x7B); }
// e4m3's bits shifted into an f16 are the same number times 2^-8 (normals and subnormals alike).
float Fp8E4M3ToF32(uint8_t b) {
  return F16ToF32(static_cast<uint16_t>(((b & 0x80u) << 8) | ((b & 0x7Fu) << 7))) * 256.f;
}
float Fp8E5M2ToF32(uint8_t b) { return F16ToF32(static_cast<uint16_t>(b << 8)); }

void StoreKvVector(KvDtype dtype, const float* src, int head_dim, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  const int d = head_dim;
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(dst, src, static_cast<size_t>(d) * sizeof(float));
      return;
    case KvDtype::kF16: {
      auto* h = static_cast<uint16_t*>(dst);
      int i = 0;
#ifdef KVSERVE_KV_F16C
      for (; i + 8 <= d; i += 8) {
        const __m128i v = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), v);
      }
#endif
      for (; i < d; ++i) h[i] = F32ToF16(src[i]);
      return;
    }
    case KvDtype::kBF16: {
      for (int i = 0; i < d; ++i) {
        const uint16_t b = F32ToBF16(src[i]);
        std::memcpy(out + 2 * i, &b, sizeof(b));
      }
      return;
    }
    case KvDtype::kInt8: {
      const uint16_t sh = ScaleToF16(AbsMax(src, d) / 127.f);
      const float s = F16ToF32(sh);
      for (int i = 0; i < d; ++i) {
        const int q = s > 0.f ? RoundClamp(src[i] / s, -127.f, 127.f) : 0;
        out[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
      }
      WriteF16(out + d, sh);
      return;
    }
    case KvDtype::kFp8E4M3: {
      const uint16_t sh = ScaleToF16(AbsMax(src, d) / 448.f);
      const float s = F16ToF32(sh);
      for (int i = 0; i < d; ++i) out[i] = s > 0.f ? F32ToFp8E4M3(src[i] / s) : 0;
      WriteF16(out + d, sh);
      return;
    }
    case KvDtype::kFp8E5M2:
      for (int i = 0; i < d; ++i) out[i] = F32ToFp8E5M2(src[i]);
      return;
    case KvDtype::kInt4: {
      float stack[256];
      std::vector<float> heap;  // head dims above 256 (none in practice)
      float* rot = stack;
      if (d > 256) {
        heap.resize(static_cast<size_t>(d));
        rot = heap.data();
      }
      std::memcpy(rot, src, static_cast<size_t>(d) * sizeof(float));
      if (KvDtypeIsRotated(dtype)) RotateKvVector(rot, d);
      float lo = rot[0], hi = rot[0];
      for (int i = 1; i < d; ++i) {
        lo = std::min(lo, rot[i]);
        hi = std::max(hi, rot[i]);
      }
      const uint16_t mh = F32ToF16(std::clamp(lo, -kMaxF16, kMaxF16));
      const float m = F16ToF32(mh);
      const uint16_t sh = ScaleToF16((hi - m) / 15.f);
      const float s = F16ToF32(sh);
      const int group = Int4Group(d);
      std::memset(out, 0, static_cast<size_t>(d) / 2);
      for (int i = 0; i < d; ++i) {
        const int q = s > 0.f ? RoundClamp((rot[i] - m) / s, 0.f, 15.f) : 0;
        out[Int4Byte(i, group)] |= static_cast<uint8_t>(q << Int4Shift(i, group));
      }
      WriteF16(out + d / 2, sh);
      WriteF16(out + d / 2 + 2, mh);
      return;
    }
  }
}

void LoadKvVectorRaw(KvDtype dtype, const void* src, int head_dim, float* dst) {
  const auto* in = static_cast<const uint8_t*>(src);
  const int d = head_dim;
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(dst, src, static_cast<size_t>(d) * sizeof(float));
      return;
    case KvDtype::kF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      int i = 0;
#ifdef KVSERVE_KV_F16C
      for (; i + 8 <= d; i += 8) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(v));
      }
#endif
      for (; i < d; ++i) dst[i] = F16ToF32(h[i]);
      return;
    }
    case KvDtype::kBF16:
      for (int i = 0; i < d; ++i) {
        uint16_t b;
        std::memcpy(&b, in + 2 * i, sizeof(b));
        dst[i] = BF16ToF32(b);
      }
      return;
    case KvDtype::kInt8: {
      const float s = ReadF16(in + d);
      for (int i = 0; i < d; ++i) dst[i] = static_cast<float>(static_cast<int8_t>(in[i])) * s;
      return;
    }
    case KvDtype::kFp8E4M3: {
      const float s = ReadF16(in + d);
      for (int i = 0; i < d; ++i) dst[i] = Fp8E4M3ToF32(in[i]) * s;
      return;
    }
    case KvDtype::kFp8E5M2:
      for (int i = 0; i < d; ++i) dst[i] = Fp8E5M2ToF32(in[i]);
      return;
    case KvDtype::kInt4: {
      const float s = ReadF16(in + d / 2), m = ReadF16(in + d / 2 + 2);
      const int group = Int4Group(d);
      for (int i = 0; i < d; ++i) {
        const int q = (in[Int4Byte(i, group)] >> Int4Shift(i, group)) & 0xF;
        dst[i] = static_cast<float>(q) * s + m;  // not fused (see CMakeLists.txt), as in the kernel
      }
      return;
    }
  }
}

void LoadKvVector(KvDtype dtype, const void* src, int head_dim, float* dst) {
  LoadKvVectorRaw(dtype, src, head_dim, dst);
  if (KvDtypeIsRotated(dtype)) UnrotateKvVector(dst, head_dim);
}

}  // namespace kvserve
