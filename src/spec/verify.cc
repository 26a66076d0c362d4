#include "spec/verify.h"

namespace kvserve {

int VerifyDrafts(std::span<const TokenId> drafts, const std::function<Emitted(int row)>& emit) {
  int accepted = 0;
  for (size_t j = 0; j <= drafts.size(); ++j) {
    const Emitted e = emit(static_cast<int>(j));
    if (j == drafts.size() || e.token != drafts[j]) break;
    ++accepted;
    if (e.ended) break;
  }
  return accepted;
}

}  // namespace kvserve
