// KvStorage: the bytes of the paged KV cache. For every layer there is one K and one V arena:
//   K[layer]: [num_blocks, num_kv_heads, block_size, head vector of k_dtype]
//   V[layer]: [num_blocks, num_kv_heads, block_size, head vector of v_dtype]
// A latent layout (v_from_k: DeepSeek's MLA) has no V arena: each slot holds one vector (the
// compressed KV latent, then the rotated key part) and attention reads its values from the
// same bytes, so the cache holds one copy.
// so one (block, head) is a contiguous [block_size, head_dim] tile that attention streams through.
// Which block belongs to which sequence is decided elsewhere (BlockPool + block tables);
// attention reaches K and V only through block tables.
//
// Allocated once at construction; move-only. Not thread-safe for concurrent writes to the same
// slot; kernels write disjoint slots in parallel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "quant/kv_dtype.h"
#include "util/aligned_buffer.h"
#include "util/strong_id.h"

namespace kvserve {

struct KvLayout {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;  // tokens per block
  KvDtype k_dtype = KvDtype::kF16;
  KvDtype v_dtype = KvDtype::kF16;
  // Latent (MLA) layout: values are read from the K vectors; there is no V arena and v_dtype
  // equals k_dtype.
  bool v_from_k = false;

  size_t k_head_bytes() const { return KvBytesPerHeadVector(k_dtype, head_dim); }
  // 0 for a latent layout (nothing stored besides K).
  size_t v_head_bytes() const { return v_from_k ? 0 : KvBytesPerHeadVector(v_dtype, head_dim); }
  // Bytes of one block of one layer (K plus V).
  size_t block_bytes_per_layer() const {
    return static_cast<size_t>(num_kv_heads) * block_size * (k_head_bytes() + v_head_bytes());
  }
  // Bytes of KV for one token across all layers.
  size_t bytes_per_token() const {
    return static_cast<size_t>(num_layers) * num_kv_heads * (k_head_bytes() + v_head_bytes());
  }
  size_t bytes_per_block() const { return bytes_per_token() * block_size; }
};

// Capacity of a cache of num_blocks blocks: tokens = num_blocks * block_size.
inline int64_t KvCapacityTokens(const KvLayout& layout, int64_t num_blocks) {
  return num_blocks * layout.block_size;
}
// The start-up line: "KV cache int8/int8: 1584 bytes/token, 87376 tokens in 132.0 MiB" (bytes per
// token over all layers, K and V, scales included; the tokens that fit; their memory). A latent
// layout reads "KV cache latent int8: ...".
std::string KvCapacitySummary(KvDtype k_dtype, KvDtype v_dtype, size_t bytes_per_token,
                              int64_t capacity_tokens, bool latent = false);
inline std::string KvCapacitySummary(const KvLayout& layout, int64_t num_blocks) {
  return KvCapacitySummary(layout.k_dtype, layout.v_dtype, layout.bytes_per_token(),
                           KvCapacityTokens(layout, num_blocks), layout.v_from_k);
}

class KvStorage {
 public:
  KvStorage(const KvLayout& layout, int num_blocks);
  KvStorage(KvStorage&&) = default;
  KvStorage& operator=(KvStorage&&) = default;

  const KvLayout& layout() const { return layout_; }
  int num_blocks() const { return num_blocks_; }
  size_t total_bytes() const { return total_bytes_; }

  // Copies every layer's K and V of block `src` into block `dst` (copy-on-write of a shared
  // partial block). REQUIRES: src != dst, both in range.
  void CopyBlock(BlockId src, BlockId dst);
  // A block's bytes in one flat buffer of layout().bytes_per_block() bytes, in the order
  //   [num_layers][K: num_kv_heads, block_size, k head vector][V: same with v head vector]
  // (what lower cache tiers store). REQUIRES: block in range, out/in that large.
  void ReadBlock(BlockId block, uint8_t* out) const;
  void WriteBlock(BlockId block, const uint8_t* in);

  // Start of the [block_size, head_dim] tile of (layer, block, kv_head).
  uint8_t* KTile(int layer, BlockId block, int kv_head) {
    return k_[layer].data() + TileOffset(block, kv_head, layout_.k_head_bytes());
  }
  uint8_t* VTile(int layer, BlockId block, int kv_head) {
    return v_[layer].data() + TileOffset(block, kv_head, layout_.v_head_bytes());
  }
  const uint8_t* KTile(int layer, BlockId block, int kv_head) const {
    return k_[layer].data() + TileOffset(block, kv_head, layout_.k_head_bytes());
  }
  const uint8_t* VTile(int layer, BlockId block, int kv_head) const {
    return v_[layer].data() + TileOffset(block, kv_head, layout_.v_head_bytes());
  }

 private:
  // Bytes of one block's K (V) in one layer: the heads of a block are contiguous,
  // [num_kv_heads, block_size, head vector].
  size_t BlockKBytes() const {
    return static_cast<size_t>(layout_.num_kv_heads) * layout_.block_size * layout_.k_head_bytes();
  }
  size_t BlockVBytes() const {
    return static_cast<size_t>(layout_.num_kv_heads) * layout_.block_size * layout_.v_head_bytes();
  }
  size_t TileOffset(BlockId block, int kv_head, size_t head_bytes) const {
    return (static_cast<size_t>(block.value()) * layout_.num_kv_heads + kv_head) *
           layout_.block_size * head_bytes;
  }

  KvLayout layout_;
  int num_blocks_;
  size_t total_bytes_ = 0;
  std::vector<AlignedBuffer<uint8_t>> k_, v_;  // [num_layers]
};

}  // namespace kvserve
