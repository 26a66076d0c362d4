#include "kv/kv_storage.h"

#include <fmt/format.h>

#include <cstring>

#include "util/byte_size.h"
#include "util/check.h"

namespace kvserve {

KvStorage::KvStorage(const KvLayout& layout, int num_blocks, int num_window_blocks)
    : layout_(layout), num_blocks_(num_blocks), num_window_blocks_(num_window_blocks) {
  KV_CHECK_GT(layout.num_layers, 0);
  KV_CHECK_GT(layout.block_size, 0);
  KV_CHECK(layout.window_layers.empty() ||
               static_cast<int>(layout.window_layers.size()) == layout.num_layers,
           "a window flag for each layer");
  KV_CHECK((num_window_blocks > 0) == (layout.num_window_layers() > 0),
           "window blocks for a window group");
  // One arena: each layer's K then V, every array starting on a cache line.
  const auto line = [](size_t bytes) { return (bytes + 63) / 64 * 64; };
  std::vector<size_t> k_at, v_at;
  size_t arena = 0;
  for (int l = 0; l < layout.num_layers; ++l) {
    const size_t tiles =
        static_cast<size_t>(num_blocks_of(l)) * layout.num_kv_heads * layout.block_size;
    k_at.push_back(arena);
    arena += line(tiles * layout.k_head_bytes());
    v_at.push_back(arena);
    arena += line(tiles * layout.v_head_bytes());
    total_bytes_ += tiles * (layout.k_head_bytes() + layout.v_head_bytes());
  }
  arena_ = PageBuffer(arena);
  // Committed now, as a preallocated cache should be (PageBuffer's pages are zero until written).
  if (arena > 0) std::memset(arena_.data(), 0, arena);
  for (int l = 0; l < layout.num_layers; ++l) {
    k_.push_back(arena_.data() + k_at[static_cast<size_t>(l)]);
    v_.push_back(arena_.data() + v_at[static_cast<size_t>(l)]);
  }
}

std::string KvCapacitySummary(const KvLayout& layout, int64_t num_blocks,
                              int64_t num_window_blocks) {
  std::string line = KvCapacitySummary(layout.k_dtype, layout.v_dtype, layout.bytes_per_token(),
                                       KvCapacityTokens(layout, num_blocks), layout.v_from_k);
  if (num_window_blocks > 0) {
    line += fmt::format(
        ", + {} window layers in {}", layout.num_window_layers(),
        FormatByteSize(layout.window_bytes_per_block() * static_cast<uint64_t>(num_window_blocks)));
  }
  return line;
}

std::string KvCapacitySummary(KvDtype k_dtype, KvDtype v_dtype, size_t bytes_per_token,
                              int64_t capacity_tokens, bool latent) {
  const std::string dtypes = latent ? fmt::format("latent {}", KvDtypeName(k_dtype))
                                    : fmt::format("{}/{}", KvDtypeName(k_dtype), KvDtypeName(v_dtype));
  return fmt::format("KV cache {}: {} bytes/token, {} tokens in {}", dtypes,
                     bytes_per_token, capacity_tokens,
                     FormatByteSize(bytes_per_token * static_cast<uint64_t>(capacity_tokens)));
}

void KvStorage::CopyBlock(BlockId src, BlockId dst, bool window) {
  const int n = window ? num_window_blocks_ : num_blocks_;
  KV_CHECK(src != dst && src.value() >= 0 && dst.value() >= 0 && src.value() < n && dst.value() < n,
           "bad block copy {} -> {}", src.value(), dst.value());
  for (int l = 0; l < layout_.num_layers; ++l) {
    if (layout_.in_window_group(l) != window) continue;
    std::memcpy(KTile(l, dst, 0), KTile(l, src, 0), BlockKBytes());
    if (!layout_.v_from_k) std::memcpy(VTile(l, dst, 0), VTile(l, src, 0), BlockVBytes());
  }
}

void KvStorage::ReadBlock(BlockId block, uint8_t* out) const {
  KV_CHECK(num_window_blocks_ == 0, "lower tiers with a window group");
  KV_CHECK(block.value() >= 0 && block.value() < num_blocks_, "bad block {}", block.value());
  const size_t k_bytes = BlockKBytes(), v_bytes = BlockVBytes();
  for (int l = 0; l < layout_.num_layers; ++l) {
    std::memcpy(out, KTile(l, block, 0), k_bytes);
    if (v_bytes > 0) std::memcpy(out + k_bytes, VTile(l, block, 0), v_bytes);
    out += k_bytes + v_bytes;
  }
}

void KvStorage::WriteBlock(BlockId block, const uint8_t* in) {
  KV_CHECK(num_window_blocks_ == 0, "lower tiers with a window group");
  KV_CHECK(block.value() >= 0 && block.value() < num_blocks_, "bad block {}", block.value());
  const size_t k_bytes = BlockKBytes(), v_bytes = BlockVBytes();
  for (int l = 0; l < layout_.num_layers; ++l) {
    std::memcpy(KTile(l, block, 0), in, k_bytes);
    if (v_bytes > 0) std::memcpy(VTile(l, block, 0), in + k_bytes, v_bytes);
    in += k_bytes + v_bytes;
  }
}

}  // namespace kvserve
