// KV cache element types. Each type describes how one head's vector of head_dim values is stored
// in a block slot; quantized types (later) add per-slot scales after the values, which is why
// sizes are asked of the type rather than computed as elements × sizeof.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace kvserve {

enum class KvDtype { kF32, kF16 };

std::string_view KvDtypeName(KvDtype dtype);
// Accepts "f32", "f16" (case-insensitive); nullopt otherwise.
std::optional<KvDtype> ParseKvDtype(std::string_view name);
// Bytes that one head's vector of head_dim values takes in a block slot.
size_t KvBytesPerHeadVector(KvDtype dtype, int head_dim);

// Writes one head vector of head_dim floats into a slot of the given dtype.
void StoreKvVector(KvDtype dtype, const float* src, int head_dim, void* dst);
// Reads one head vector of head_dim values back as floats.
void LoadKvVector(KvDtype dtype, const void* src, int head_dim, float* dst);

}  // namespace kvserve
