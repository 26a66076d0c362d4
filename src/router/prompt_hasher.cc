#include "router/prompt_hasher.h"

#include "util/check.h"

namespace kvserve::router {

std::vector<uint64_t> PromptHasher::Hash(std::span<const int32_t> tokens, int block_size,
                                         std::string_view cache_salt) const {
  KV_CHECK(block_size >= 1, "block_size {}", block_size);
  const size_t num_blocks = tokens.size() / static_cast<size_t>(block_size);
  std::vector<uint64_t> out;
  out.reserve(num_blocks);
  VllmBlockHash parent = none_hash_;
  for (size_t i = 0; i < num_blocks; ++i) {
    parent = VllmHashBlock(
        parent,
        tokens.subspan(i * static_cast<size_t>(block_size), static_cast<size_t>(block_size)),
        i == 0 ? cache_salt : std::string_view());
    out.push_back(VllmHashToU64(parent));
  }
  return out;
}

}  // namespace kvserve::router
