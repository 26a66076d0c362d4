// Causal attention of one token's query heads over a sequence's paged K/V.
//
// K and V are read only through the sequence's block table: slot s lives in block
// block_table[s / block_size] at offset s % block_size. Each (block, kv_head) is a contiguous
// [block_size, head vector] tile (see kv/kv_storage.h); this kernel receives the layer's arena
// base pointers and strides, so ops/ stays independent of the KV bookkeeping.
//
// Pure function; thread-safe for disjoint outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "quant/kv_dtype.h"
#include "util/strong_id.h"

namespace kvserve {

struct PagedKvLayerView {
  const uint8_t* k = nullptr;  // layer arena base: [num_blocks, num_kv_heads, block_size, head]
  const uint8_t* v = nullptr;
  KvDtype k_dtype = KvDtype::kF16;
  KvDtype v_dtype = KvDtype::kF16;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  size_t k_head_bytes = 0;  // bytes of one head vector in a slot
  size_t v_head_bytes = 0;

  const uint8_t* KSlot(BlockId b, int kv_head, int offset) const {
    return k + ((static_cast<size_t>(b.value()) * num_kv_heads + kv_head) * block_size + offset) *
                   k_head_bytes;
  }
  const uint8_t* VSlot(BlockId b, int kv_head, int offset) const {
    return v + ((static_cast<size_t>(b.value()) * num_kv_heads + kv_head) * block_size + offset) *
                   v_head_bytes;
  }
};

// Scratch floats AttendGroup needs for `num_slots` slots and `group` query heads.
size_t AttentionScratchFloats(int num_slots, int group, int head_dim);

// Attends the `group` query heads that share kv_head (q: [group, head_dim]) over slots
// [0, num_slots) of the sequence, writing out: [group, head_dim].
// scores: softmax(q·k * scale) over the slots; out = sum scores * v.
void AttendGroup(const float* q, int group, int kv_head, const PagedKvLayerView& kv,
                 std::span<const BlockId> block_table, int num_slots, float scale, float* scratch,
                 float* out);

}  // namespace kvserve
