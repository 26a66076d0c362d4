// N-gram prompt lookup: propose the tokens that followed the most recent earlier occurrence of
// the sequence's last n tokens (n from max_n down to min_n), in its prompt and generated text.
// Text that copies or edits its input (summaries, code edits, extraction) repeats long runs of
// it, which this finds without a second model.
#pragma once

#include <span>
#include <vector>

#include "util/strong_id.h"

namespace kvserve {

// Appends up to k proposed tokens to *out; returns how many (k, or 0 without a match). The
// match must end before the suffix itself, and the longest n that matches wins; among its
// matches the most recent one. Where the text after the match runs out, the proposal goes on
// copying itself, so a repeating pattern is proposed for all k tokens. O(len(tokens) * max_n).
int ProposeNgram(std::span<const TokenId> tokens, int min_n, int max_n, int k,
                 std::vector<TokenId>* out);

}  // namespace kvserve
