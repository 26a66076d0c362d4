// CacheNamespace: the part of a prefix-cache key that is not tokens. Two sequences share KV
// blocks only when their namespaces are equal, so the namespace must capture everything that
// changes the bytes of K/V for the same tokens: the model (a fingerprint of its weights and
// shape), the KV dtypes, the block size, RoPE settings, and an optional per-request cache salt
// (tenant isolation). The radix tree keeps one root per namespace.
//
// Plain value; thread-safe to copy.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace kvserve {

struct CacheNamespace {
  uint64_t value = 0;
  friend bool operator==(CacheNamespace a, CacheNamespace b) { return a.value == b.value; }
};

// FNV-1a over the parts with a separator between them, so ("ab", "c") != ("a", "bc").
inline CacheNamespace MakeCacheNamespace(std::initializer_list<std::string_view> parts) {
  uint64_t h = 1469598103934665603ull;
  for (std::string_view p : parts) {
    for (unsigned char c : p) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xffu) * 1099511628211ull;
  }
  return CacheNamespace{h};
}

}  // namespace kvserve
