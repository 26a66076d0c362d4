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
// The window group: layers that attend to their last tokens only (sliding windows) may hold
// their K/V in arenas of their own, of num_window_blocks blocks, so that they need not keep
// blocks for the whole context. A window layer's block ids then index those arenas (each
// sequence has a second block table for them: KvCacheManager); the others' the main arenas.
// Without a window group every layer is in the main arenas.
//
// Allocated once at construction; move-only. Not thread-safe for concurrent writes to the same
// slot; kernels write disjoint slots in parallel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "quant/kv_dtype.h"
#include "util/page_buffer.h"
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
  // 1 for each layer in the window group; empty = no window group.
  std::vector<uint8_t> window_layers;

  bool in_window_group(int layer) const {
    return !window_layers.empty() && window_layers[static_cast<size_t>(layer)] != 0;
  }
  int num_window_layers() const {
    int n = 0;
    for (uint8_t w : window_layers) n += w != 0;
    return n;
  }
  int num_main_layers() const { return num_layers - num_window_layers(); }

  size_t k_head_bytes() const { return KvBytesPerHeadVector(k_dtype, head_dim); }
  // 0 for a latent layout (nothing stored besides K).
  size_t v_head_bytes() const { return v_from_k ? 0 : KvBytesPerHeadVector(v_dtype, head_dim); }
  // Bytes of one block of one layer (K plus V).
  size_t block_bytes_per_layer() const {
    return static_cast<size_t>(num_kv_heads) * block_size * (k_head_bytes() + v_head_bytes());
  }
  // Bytes of KV for one token across the main arenas' layers (all layers without a window
  // group): what each further token of context costs.
  size_t bytes_per_token() const {
    return static_cast<size_t>(num_main_layers()) * num_kv_heads *
           (k_head_bytes() + v_head_bytes());
  }
  size_t bytes_per_block() const { return bytes_per_token() * block_size; }
  // Bytes of one block of the window group's arenas (0 without one).
  size_t window_bytes_per_block() const {
    return static_cast<size_t>(num_window_layers()) * block_bytes_per_layer();
  }
};

// Capacity of a cache of num_blocks blocks: tokens = num_blocks * block_size.
inline int64_t KvCapacityTokens(const KvLayout& layout, int64_t num_blocks) {
  return num_blocks * layout.block_size;
}
// The start-up line: "KV cache int8/int8: 1584 bytes/token, 87376 tokens in 132.0 MiB" (bytes per
// token over all layers, K and V, scales included; the tokens that fit; their memory). A latent
// layout reads "KV cache latent int8: ...". With a window group the bytes per token are the
// main arenas' and the line goes on with the group's: ", + 22 window layers in 40.0 MiB".
std::string KvCapacitySummary(KvDtype k_dtype, KvDtype v_dtype, size_t bytes_per_token,
                              int64_t capacity_tokens, bool latent = false);
std::string KvCapacitySummary(const KvLayout& layout, int64_t num_blocks,
                              int64_t num_window_blocks = 0);

class KvStorage {
 public:
  // REQUIRES: num_window_blocks > 0 iff the layout has a window group.
  KvStorage(const KvLayout& layout, int num_blocks, int num_window_blocks = 0);
  KvStorage(KvStorage&&) = default;
  KvStorage& operator=(KvStorage&&) = default;

  const KvLayout& layout() const { return layout_; }
  int num_blocks() const { return num_blocks_; }
  int num_window_blocks() const { return num_window_blocks_; }
  // Blocks of the arenas that layer's block ids index.
  int num_blocks_of(int layer) const {
    return layout_.in_window_group(layer) ? num_window_blocks_ : num_blocks_;
  }
  size_t total_bytes() const { return total_bytes_; }

  // Copies K and V of block `src` into block `dst` (copy-on-write of a shared partial block):
  // the main arenas' layers, or with `window` the window group's. REQUIRES: src != dst, both
  // in range.
  void CopyBlock(BlockId src, BlockId dst, bool window = false);
  // A block's bytes in one flat buffer of layout().bytes_per_block() bytes, in the order
  //   [num_layers][K: num_kv_heads, block_size, k head vector][V: same with v head vector]
  // (what lower cache tiers store). REQUIRES: no window group, block in range, out/in that
  // large.
  void ReadBlock(BlockId block, uint8_t* out) const;
  void WriteBlock(BlockId block, const uint8_t* in);

  // Start of the [block_size, head_dim] tile of (layer, block, kv_head).
  uint8_t* KTile(int layer, BlockId block, int kv_head) {
    return k_[layer] + TileOffset(block, kv_head, layout_.k_head_bytes());
  }
  uint8_t* VTile(int layer, BlockId block, int kv_head) {
    return v_[layer] + TileOffset(block, kv_head, layout_.v_head_bytes());
  }
  const uint8_t* KTile(int layer, BlockId block, int kv_head) const {
    return k_[layer] + TileOffset(block, kv_head, layout_.k_head_bytes());
  }
  const uint8_t* VTile(int layer, BlockId block, int kv_head) const {
    return v_[layer] + TileOffset(block, kv_head, layout_.v_head_bytes());
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
  int num_window_blocks_ = 0;
  size_t total_bytes_ = 0;
  // The cache's memory: one run of pages for every layer's K and V, backed by transparent huge
  // pages where Linux grants them (a decode step's attention visits a new 4 KiB page at every
  // block of every head; on 2 MiB pages it stops waiting on page walks: 2.4 -> 3.0 GB/s of f16
  // KV on one Zen 3 thread at 32768 cached).
  PageBuffer arena_;
  std::vector<uint8_t*> k_, v_;  // [num_layers], into arena_
};

}  // namespace kvserve
