#include "sample/token_history.h"

#include "util/check.h"

namespace kvserve {

TokenHistory::TokenHistory(int vocab_size) : counts_(static_cast<size_t>(vocab_size), 0) {
  KV_CHECK_GT(vocab_size, 0);
}

void TokenHistory::SetPrompt(std::span<const TokenId> prompt) {
  for (TokenId t : prompt) {
    KV_CHECK(t >= 0 && t < vocab_size(), "prompt token {} outside vocab of {}", t, vocab_size());
  }
  for (TokenId t : distinct_generated_) counts_[static_cast<size_t>(t)] = 0;
  distinct_generated_.clear();
  generated_.clear();
  prompt_.assign(prompt.begin(), prompt.end());
}

void TokenHistory::Append(TokenId token) {
  KV_CHECK(token >= 0 && token < vocab_size(), "token {} outside vocab of {}", token, vocab_size());
  generated_.push_back(token);
  if (counts_[static_cast<size_t>(token)]++ == 0) distinct_generated_.push_back(token);
}

TokenId TokenHistory::at(int64_t i) const {
  KV_DCHECK(i >= 0 && i < size(), "position {} of {}", i, size());
  const auto n = static_cast<int64_t>(prompt_.size());
  return i < n ? prompt_[static_cast<size_t>(i)] : generated_[static_cast<size_t>(i - n)];
}

}  // namespace kvserve
