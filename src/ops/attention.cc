#include "ops/attention.h"

#include <cstring>

#include "ops/elementwise.h"
#include "ops/simd.h"

namespace kvserve {

size_t AttentionScratchFloats(int num_slots, int group, int head_dim) {
  return static_cast<size_t>(num_slots) * group + head_dim;
}

void AttendGroup(const float* q, int group, int kv_head, const PagedKvLayerView& kv,
                 std::span<const BlockId> block_table, int num_slots, float scale, float* scratch,
                 float* out) {
  const int d = kv.head_dim;
  float* scores = scratch;                                // [group, num_slots]
  float* vec = scratch + static_cast<size_t>(group) * num_slots;  // [head_dim]
  for (int s = 0; s < num_slots; ++s) {
    const BlockId b = block_table[s / kv.block_size];
    const uint8_t* k = kv.KSlot(b, kv_head, s % kv.block_size);
    const float* kf;
    if (kv.k_dtype == KvDtype::kF32) {
      kf = reinterpret_cast<const float*>(k);
    } else {
      LoadKvVector(kv.k_dtype, k, d, vec);
      kf = vec;
    }
    for (int g = 0; g < group; ++g) {
      scores[static_cast<size_t>(g) * num_slots + s] = simd::Dot(q + g * d, kf, d) * scale;
    }
  }
  for (int g = 0; g < group; ++g) Softmax(scores + static_cast<size_t>(g) * num_slots, num_slots);
  std::memset(out, 0, sizeof(float) * group * d);
  for (int s = 0; s < num_slots; ++s) {
    const BlockId b = block_table[s / kv.block_size];
    const uint8_t* v = kv.VSlot(b, kv_head, s % kv.block_size);
    const float* vf;
    if (kv.v_dtype == KvDtype::kF32) {
      vf = reinterpret_cast<const float*>(v);
    } else {
      LoadKvVector(kv.v_dtype, v, d, vec);
      vf = vec;
    }
    for (int g = 0; g < group; ++g) {
      simd::Axpy(scores[static_cast<size_t>(g) * num_slots + s], vf, out + g * d, d);
    }
  }
}

}  // namespace kvserve
