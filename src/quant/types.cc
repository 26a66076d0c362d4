// Type traits table, name parsing and the DequantizeRow / QuantizeRow dispatchers.
#include "quant/types.h"

#include <array>
#include <cmath>
#include <cstring>

#include "quant/quants_internal.h"
#include "util/check.h"
#include "util/fp16.h"

namespace kvserve {
namespace {

namespace qi = quant_internal;

// NOTE: the single source of truth for every type id we know. Sizes follow ggml's block structs
// (ggml-common.h); `supported` means DequantizeRow handles it, so tensors of it can be loaded.
constexpr std::array<TypeTraits, 21> kTraits = {{
    {GgmlType::kF32, "F32", 1, 4, true},
    {GgmlType::kF16, "F16", 1, 2, true},
    {GgmlType::kQ4_0, "Q4_0", kQK, sizeof(BlockQ4_0), true},
    {GgmlType::kQ4_1, "Q4_1", kQK, sizeof(BlockQ4_1), true},
    {GgmlType::kQ5_0, "Q5_0", kQK, sizeof(BlockQ5_0), true},
    {GgmlType::kQ5_1, "Q5_1", kQK, sizeof(BlockQ5_1), true},
    {GgmlType::kQ8_0, "Q8_0", kQK, sizeof(BlockQ8_0), true},
    {GgmlType::kQ8_1, "Q8_1", kQK, sizeof(BlockQ8_1), false},
    // Q2_K: scales[16] + qs[64] + d + dmin; Q3_K: hmask[32] + qs[64] + scales[12] + d.
    {GgmlType::kQ2_K, "Q2_K", kQKK, 16 + 64 + 2 + 2, false},
    {GgmlType::kQ3_K, "Q3_K", kQKK, 32 + 64 + 12 + 2, false},
    {GgmlType::kQ4_K, "Q4_K", kQKK, sizeof(BlockQ4_K), true},
    {GgmlType::kQ5_K, "Q5_K", kQKK, sizeof(BlockQ5_K), true},
    {GgmlType::kQ6_K, "Q6_K", kQKK, sizeof(BlockQ6_K), true},
    {GgmlType::kQ8_K, "Q8_K", kQKK, sizeof(BlockQ8_K), true},
    {GgmlType::kI8, "I8", 1, 1, false},
    {GgmlType::kI16, "I16", 1, 2, false},
    {GgmlType::kI32, "I32", 1, 4, false},
    {GgmlType::kI64, "I64", 1, 8, false},
    {GgmlType::kF64, "F64", 1, 8, false},
    {GgmlType::kBF16, "BF16", 1, 2, true},
    {GgmlType::kMXFP4, "MXFP4", kQK, sizeof(BlockMXFP4), true},
}};
static_assert(sizeof(BlockQ8_K) == 292);

char ToUpperAscii(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }

void DequantizeF16(const void* src, float* dst, int64_t n) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes + 2 * i, 2);
    dst[i] = F16ToF32(h);
  }
}

void DequantizeBF16(const void* src, float* dst, int64_t n) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes + 2 * i, 2);
    dst[i] = BF16ToF32(h);
  }
}

void QuantizeF16(const float* src, void* dst, int64_t n) {
  auto* bytes = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = F32ToF16(src[i]);
    std::memcpy(bytes + 2 * i, &h, 2);
  }
}

void QuantizeBF16(const float* src, void* dst, int64_t n) {
  auto* bytes = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = F32ToBF16(src[i]);
    std::memcpy(bytes + 2 * i, &h, 2);
  }
}

}  // namespace

float Mxfp4Scale(uint8_t e) { return std::ldexp(1.0f, static_cast<int>(e) - 128); }

std::optional<TypeTraits> GetTypeTraits(uint32_t raw_type) {
  for (const TypeTraits& t : kTraits) {
    if (static_cast<uint32_t>(t.type) == raw_type) return t;
  }
  return std::nullopt;
}

TypeTraits Traits(GgmlType type) {
  std::optional<TypeTraits> t = GetTypeTraits(static_cast<uint32_t>(type));
  KV_CHECK(t.has_value(), "unknown ggml type id {}", static_cast<uint32_t>(type));
  return *t;
}

std::optional<uint64_t> RowBytes(GgmlType type, int64_t n) {
  std::optional<TypeTraits> t = GetTypeTraits(static_cast<uint32_t>(type));
  if (!t.has_value() || n < 0 || n % t->block_elems != 0) return std::nullopt;
  return static_cast<uint64_t>(n / t->block_elems) * static_cast<uint64_t>(t->block_bytes);
}

std::optional<GgmlType> ParseGgmlType(std::string_view name) {
  for (const TypeTraits& t : kTraits) {
    if (t.name.size() != name.size()) continue;
    bool equal = true;
    for (size_t i = 0; i < name.size() && equal; ++i) {
      equal = ToUpperAscii(name[i]) == t.name[i];
    }
    if (equal) return t.type;
  }
  return std::nullopt;
}

void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  const TypeTraits t = Traits(type);
  KV_CHECK(t.supported, "DequantizeRow: type {} is not supported", t.name);
  KV_CHECK(n >= 0 && n % t.block_elems == 0, "DequantizeRow: n={} not a multiple of {} for {}", n,
           t.block_elems, t.name);
  if (n == 0) return;
  switch (type) {
    case GgmlType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case GgmlType::kF16: DequantizeF16(src, dst, n); return;
    case GgmlType::kBF16: DequantizeBF16(src, dst, n); return;
    case GgmlType::kQ4_0: qi::DequantizeQ4_0(src, dst, n); return;
    case GgmlType::kQ4_1: qi::DequantizeQ4_1(src, dst, n); return;
    case GgmlType::kQ5_0: qi::DequantizeQ5_0(src, dst, n); return;
    case GgmlType::kQ5_1: qi::DequantizeQ5_1(src, dst, n); return;
    case GgmlType::kQ8_0: qi::DequantizeQ8_0(src, dst, n); return;
    case GgmlType::kQ4_K: qi::DequantizeQ4_K(src, dst, n); return;
    case GgmlType::kQ5_K: qi::DequantizeQ5_K(src, dst, n); return;
    case GgmlType::kQ6_K: qi::DequantizeQ6_K(src, dst, n); return;
    case GgmlType::kQ8_K: qi::DequantizeQ8_K(src, dst, n); return;
    case GgmlType::kMXFP4: qi::DequantizeMXFP4(src, dst, n); return;
    default: KV_CHECK(false, "DequantizeRow: no kernel for {}", t.name);
  }
}

bool CanQuantize(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kMXFP4:
      return true;
    default:
      return false;
  }
}

bool QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n) {
  if (!CanQuantize(type)) return false;
  const TypeTraits t = Traits(type);
  KV_CHECK(n >= 0 && n % t.block_elems == 0, "QuantizeRow: n={} not a multiple of {} for {}", n,
           t.block_elems, t.name);
  if (n == 0) return true;
  switch (type) {
    case GgmlType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); break;
    case GgmlType::kF16: QuantizeF16(src, dst, n); break;
    case GgmlType::kBF16: QuantizeBF16(src, dst, n); break;
    case GgmlType::kQ4_0: qi::QuantizeQ4_0(src, dst, n); break;
    case GgmlType::kQ4_1: qi::QuantizeQ4_1(src, dst, n); break;
    case GgmlType::kQ5_0: qi::QuantizeQ5_0(src, dst, n); break;
    case GgmlType::kQ5_1: qi::QuantizeQ5_1(src, dst, n); break;
    case GgmlType::kQ8_0: qi::QuantizeQ8_0(src, dst, n); break;
    case GgmlType::kQ4_K: qi::QuantizeQ4_K(src, dst, n); break;
    case GgmlType::kQ5_K: qi::QuantizeQ5_K(src, dst, n); break;
    case GgmlType::kQ6_K: qi::QuantizeQ6_K(src, dst, n); break;
    case GgmlType::kMXFP4: qi::QuantizeMXFP4(src, dst, n); break;
    default: return false;
  }
  return true;
}

}  // namespace kvserve
