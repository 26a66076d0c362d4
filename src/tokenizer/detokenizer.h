// StreamingDetokenizer: turns a stream of token ids into text pieces that are always complete
// UTF-8: a multi-byte character split over several tokens (byte-fallback or byte-level pieces)
// is held back until its last byte arrives, so no output ever ends inside a character.
//
// Contract: one instance per stream (not thread-safe); the Tokenizer must outlive it. Invalid
// byte sequences are emitted as U+FFFD as soon as they are known to be invalid; Flush() emits
// whatever is left, an unfinished tail as U+FFFD. With strip_leading_space the concatenated
// output equals Tokenizer::Decode of the same ids; without it (the default, for continuing a
// prompt) every token's piece is kept whole.
#pragma once

#include <string>

#include "tokenizer/tokenizer.h"

namespace kvserve {

class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tok, bool skip_special = true,
                                bool strip_leading_space = false);

  // Returns the text that became complete with this token (may be empty).
  std::string Push(TokenId id);
  // Returns everything still held back and resets the pending state.
  std::string Flush();

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  bool strip_pending_;   // the next non-empty piece loses one leading space
  std::string pending_;  // bytes not yet emitted (an incomplete UTF-8 tail)
};

}  // namespace kvserve
