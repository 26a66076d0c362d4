// PromptHasher: a prompt's token ids → the block hashes a replica publishes for them in its KV
// events: vLLM's chained block hash (util/vllm_block_hash.h) of every full block, in the 64-bit
// form the events carry. The seed must be the replicas' --kv-events-hash-seed, the salt the
// request's cache_salt (it joins the first block's extra keys, as on the replica).
//
// Thread safety: immutable after construction; any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/vllm_block_hash.h"

namespace kvserve::router {

class PromptHasher {
 public:
  explicit PromptHasher(std::string_view seed) : none_hash_(VllmNoneHash(seed)) {}

  // [tokens.size() / block_size] hashes; a trailing partial block has none.
  // REQUIRES: block_size >= 1.
  std::vector<uint64_t> Hash(std::span<const int32_t> tokens, int block_size,
                             std::string_view cache_salt = {}) const;

 private:
  VllmBlockHash none_hash_;
};

}  // namespace kvserve::router
