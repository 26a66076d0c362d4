// Helpers shared by the KV manager's tests: block ids as ints, runs of token ids, a whole
// sequence run through the manager.
#pragma once

#include <numeric>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "prefix/kv_cache_manager.h"
#include "util/strong_id.h"

namespace kvserve::testing_util {

inline std::vector<int> Ids(std::span<const BlockId> v) {
  std::vector<int> out;
  for (BlockId b : v) out.push_back(b.value());
  return out;
}

// The tokens begin, begin + 1, ..., begin + n - 1.
inline std::vector<TokenId> Range(int begin, int n) {
  std::vector<TokenId> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), begin);
  return v;
}

// Runs a whole sequence: begin, allocate, "compute" every token, commit, end, with
// CheckInvariants() after each step. Returns the cached tokens it began with.
inline int RunSequence(KvCacheManager& kv, CacheNamespace ns, SeqId seq,
                       const std::vector<TokenId>& tokens) {
  const int cached = kv.BeginSequence(seq, ns, tokens, 0);
  kv.CheckInvariants();
  EXPECT_TRUE(kv.Allocate(seq, static_cast<int>(tokens.size())));
  kv.CheckInvariants();
  kv.Commit(seq, tokens, static_cast<int>(tokens.size()));
  kv.CheckInvariants();
  kv.EndSequence(seq);
  kv.CheckInvariants();
  return cached;
}

}  // namespace kvserve::testing_util
