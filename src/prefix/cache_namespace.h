// CacheNamespace: the part of a prefix-cache key that is not tokens. Two sequences share KV
// blocks only when their namespaces are equal, so the namespace must capture everything that
// changes the bytes of K/V for the same tokens: the model (a digest of its weights and shape),
// the KV dtypes, the block size, RoPE settings, and an optional per-request cache salt (tenant
// isolation). The radix tree keeps one root per namespace; lower tiers (disk, Redis) key blocks
// by a chain that starts from the namespace's digest (block_key.h), so the digest must be the
// same in every process and on every machine for the same model and settings.
//
// Plain value; thread-safe to copy.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "util/digest.h"

namespace kvserve {

struct CacheNamespace {
  uint64_t value = 0;  // digest.Prefix64() for namespaces made by MakeCacheNamespace
  Digest256 digest;    // SHA-256 of the parts (all zero for a bare test namespace)
  friend bool operator==(const CacheNamespace& a, const CacheNamespace& b) {
    return a.value == b.value && a.digest == b.digest;
  }
};

// SHA-256 over the length-prefixed parts, so ("ab", "c") != ("a", "bc").
inline CacheNamespace MakeCacheNamespace(std::initializer_list<std::string_view> parts) {
  Sha256 h;
  h.Update("kvserve-namespace");
  for (std::string_view p : parts) h.UpdateField(p);
  CacheNamespace ns;
  ns.digest = h.Final();
  ns.value = ns.digest.Prefix64();
  return ns;
}

}  // namespace kvserve
