// SpecialTokenMatcher: finds special and added tokens in raw text before normal tokenization.
//
// Contract: immutable after construction, thread-safe. Matching is leftmost, then longest (HF's
// added-token splitter); control/unknown tokens take part only when parse_special is set,
// user-defined tokens always.
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace kvserve {

// One piece of the input: either raw text to tokenize, or a token matched verbatim.
struct Fragment {
  std::string_view text;  // the raw text, or the matched token's text
  TokenId token = -1;     // >= 0 for a matched special token
};

class SpecialTokenMatcher {
 public:
  SpecialTokenMatcher(const std::vector<std::string>& tokens, const Vocab& vocab);

  std::vector<Fragment> Partition(std::string_view text, bool parse_special) const;

 private:
  struct Candidate {
    std::string_view text;
    TokenId id;
    bool always;  // user-defined: matched even without parse_special
  };
  // [256] candidates by first byte, longest first.
  std::vector<std::vector<Candidate>> by_first_byte_;
};

}  // namespace kvserve
