#include "kv/kv_storage.h"

#include "util/check.h"

namespace kvserve {

KvStorage::KvStorage(const KvLayout& layout, int num_blocks)
    : layout_(layout), num_blocks_(num_blocks) {
  KV_CHECK_GT(layout.num_layers, 0);
  KV_CHECK_GT(layout.block_size, 0);
  const size_t tiles = static_cast<size_t>(num_blocks) * layout.num_kv_heads * layout.block_size;
  k_.reserve(layout.num_layers);
  v_.reserve(layout.num_layers);
  for (int l = 0; l < layout.num_layers; ++l) {
    k_.emplace_back(tiles * layout.k_head_bytes());
    v_.emplace_back(tiles * layout.v_head_bytes());
    total_bytes_ += tiles * (layout.k_head_bytes() + layout.v_head_bytes());
  }
}

}  // namespace kvserve
