// TokenHistory: the tokens one sequence has seen (prompt + generated), for logits processors.
//
// Contract: owned by one Sampler, used from one thread. Keeps per-token counts of the
// generated tokens incrementally (Append is O(1) amortised) so that frequency/presence
// penalties cost O(distinct generated tokens) per step, not O(history).
// Memory: a dense count array of vocab_size int32 (allocated once at construction).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "util/strong_id.h"

namespace kvserve {

class TokenHistory {
 public:
  explicit TokenHistory(int vocab_size);

  // Replaces the prompt; clears generated tokens and counts.
  // REQUIRES: every id in [0, vocab_size).
  void SetPrompt(std::span<const TokenId> prompt);
  // REQUIRES: 0 <= token < vocab_size.
  void Append(TokenId token);

  int vocab_size() const { return static_cast<int>(counts_.size()); }
  std::span<const TokenId> prompt() const { return prompt_; }
  std::span<const TokenId> generated() const { return generated_; }
  // Number of tokens of prompt + generated.
  int64_t size() const { return static_cast<int64_t>(prompt_.size() + generated_.size()); }
  // Token at position i of prompt + generated. REQUIRES: 0 <= i < size().
  TokenId at(int64_t i) const;

  // Distinct generated tokens in order of first appearance, and their counts.
  std::span<const TokenId> distinct_generated() const { return distinct_generated_; }
  int32_t generated_count(TokenId token) const { return counts_[static_cast<size_t>(token)]; }

 private:
  std::vector<TokenId> prompt_;
  std::vector<TokenId> generated_;
  std::vector<TokenId> distinct_generated_;
  std::vector<int32_t> counts_;  // [vocab_size] occurrences in generated_
};

}  // namespace kvserve
