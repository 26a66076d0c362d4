// API keys, as kvserve serve and kvserve route check them, and how a key keeps its tenant's
// cached KV apart: the key's digest joins the prefix-cache salt of each of its requests.
// kvserve serve salts its blocks so, and kvserve route hashes a prompt the same way to find the
// blocks a replica holds for that tenant (docs/kv_events.md).
#pragma once

#include <string>
#include <string_view>

#include "util/digest.h"

namespace kvserve {

// Whether a request to `path` must present a key when keys are configured: the API routes
// (/v1/*, /tokenize, /detokenize), not /health or /metrics.
inline bool PathNeedsApiKey(std::string_view path) {
  return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
}

// Compares a presented key `a` with a configured one `b` in time that depends on a.size() only.
inline bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

// A tenant's name: the first 32 hex digits of SHA-256 of its API key (never the key itself).
inline std::string TenantDigest(std::string_view api_key) {
  return Sha256().Update(api_key).Final().Hex().substr(0, 32);
}

// The prefix-cache salt of a request of `tenant` ("" without keys) with its own cache_salt.
inline std::string TenantCacheSalt(const std::string& tenant, const std::string& cache_salt) {
  return tenant.empty() ? cache_salt : tenant + '\x1f' + cache_salt;
}

}  // namespace kvserve
