// Draft verification. The target's logits rows 0..k of one speculating sequence follow its
// last token and each of its k drafts. Row j is sampled with the sequence's own sampler (the
// whole logits-processor chain, with the history of the tokens accepted before it), exactly as
// decoding without speculation would sample that position; the draft is accepted while the
// sampled token equals it, and the first sampled token that differs (or the one after the last
// draft) is the step's own token.
//
// NOTE (exactness): the proposers here are deterministic (n-gram lookup, a draft model's
// argmax), so the draft distribution q is one-hot. The standard rule (accept with min(1, p/q),
// else sample from the normalised max(0, p - q)) then accepts the draft d with probability p(d)
// and otherwise samples from p without d, which is what sampling from p and comparing with d
// does. Sampling this way draws one random number per emitted token, as decoding without
// speculation does, so a seeded request gives the same tokens with speculation on or off, and
// a greedy one the same bytes.
#pragma once

#include <functional>
#include <span>

#include "util/strong_id.h"

namespace kvserve {

struct Emitted {
  TokenId token;
  bool ended = false;  // the sequence finished with this token (a stop, max_tokens)
};

// `emit(j)` samples row j and emits the token. Returns the number of drafts accepted (a draft
// that the sampled token equals counts even when the sequence ends with it).
int VerifyDrafts(std::span<const TokenId> drafts, const std::function<Emitted(int row)>& emit);

}  // namespace kvserve
