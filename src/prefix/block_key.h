// BlockKey: the identity of one full KV block in every tier, in every process, on every machine.
//
// NOTE (chained keys): key(block i) = SHA-256(key(block i-1) || the block's token ids as
// little-endian int32), and the chain starts from RootKey(namespace) = SHA-256(format version ||
// namespace digest || namespace value). A key therefore names the whole token prefix up to the
// block's end plus everything in the namespace (the exact weights, KV dtypes, block size, RoPE
// settings, salt); two blocks with equal keys hold the same bytes, because batch-invariant
// kernels make K/V a function of exactly those inputs. SHA-256 makes aliasing (a collision)
// infeasible even for chosen prompts. Changing the record format or the K/V math bumps
// kBlockKeyVersion, so old entries simply stop matching.
#pragma once

#include <span>

#include "prefix/cache_namespace.h"
#include "util/digest.h"
#include "util/strong_id.h"

namespace kvserve {

using BlockKey = Digest256;

inline constexpr uint32_t kBlockKeyVersion = 1;

inline BlockKey RootKey(const CacheNamespace& ns) {
  Sha256 h;
  h.Update("kvserve-kv-root").UpdateLe(kBlockKeyVersion);
  h.Update(ns.digest.bytes.data(), ns.digest.bytes.size()).UpdateLe(ns.value);
  return h.Final();
}

inline BlockKey ChainKey(const BlockKey& parent, std::span<const TokenId> block_tokens) {
  Sha256 h;
  h.Update(parent.bytes.data(), parent.bytes.size());
  uint8_t le[4 * 64];  // tokens as little-endian int32, 64 at a time
  for (size_t i = 0; i < block_tokens.size();) {
    size_t n = 0;
    for (; n < 64 && i < block_tokens.size(); ++n, ++i) {
      const uint32_t t = static_cast<uint32_t>(block_tokens[i]);
      for (int b = 0; b < 4; ++b) le[4 * n + b] = static_cast<uint8_t>(t >> (8 * b));
    }
    h.Update(le, 4 * n);
  }
  return h.Final();
}

}  // namespace kvserve
