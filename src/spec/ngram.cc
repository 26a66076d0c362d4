#include "spec/ngram.h"

#include <algorithm>

namespace kvserve {

int ProposeNgram(std::span<const TokenId> tokens, int min_n, int max_n, int k,
                 std::vector<TokenId>* out) {
  const int len = static_cast<int>(tokens.size());
  if (k <= 0) return 0;
  for (int n = std::min(max_n, len - 1); n >= std::max(min_n, 1); --n) {
    const std::span<const TokenId> suffix = tokens.subspan(static_cast<size_t>(len - n));
    // Candidate starts i: tokens[i, i + n) == suffix, with i + n < len (something follows).
    for (int i = len - n - 1; i >= 0; --i) {
      if (tokens[static_cast<size_t>(i)] != suffix[0]) continue;
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + i)) continue;
      // What followed the match, read on into the proposal itself where the text ends: a
      // repeating pattern (period len - n - i) goes on repeating.
      const int from = i + n;
      const size_t start = out->size();
      for (int j = 0; j < k; ++j) {
        const int idx = from + j;
        out->push_back(idx < len ? tokens[static_cast<size_t>(idx)]
                                 : (*out)[start + static_cast<size_t>(idx - len)]);
      }
      return k;
    }
  }
  return 0;
}

}  // namespace kvserve
