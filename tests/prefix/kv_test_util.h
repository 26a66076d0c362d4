// Helpers shared by the KV manager's tests: block ids as ints, runs of token ids.
#pragma once

#include <numeric>
#include <span>
#include <vector>

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

}  // namespace kvserve::testing_util
