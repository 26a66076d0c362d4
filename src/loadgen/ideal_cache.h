// The ideal number of cached prompt tokens: what a perfect prefix cache at token granularity,
// unbounded and never evicting, would serve, given the order requests were sent.
//
// NOTE: a request can reuse (a) the longest run of leading segments it shares with any request
// sent before it (a shared system prompt, a repeated prefix, a document), counted in the
// segments' measured tokens, and (b) for a later multi-turn round, everything the server
// computed for the previous round: its prompt plus all answer tokens but the last (the last
// sampled token is never fed back). Both are capped at the prompt length minus one, because a
// server must compute at least the last prompt token to produce logits. Chat-template tokens
// (role markers) are not segment tokens, so (a) slightly undercounts chat prompts; (b) uses the
// server's reported counts and includes them.
#pragma once

#include <vector>

#include "loadgen/workload.h"

namespace kvserve::loadgen {

struct SentPrompt {
  const std::vector<Segment>* segments = nullptr;  // the full prompt as sent
  int prompt_tokens = -1;       // reported by the server; -1 = unknown (sum of segments used)
  int completion_tokens = -1;   // reported; -1 = unknown
  int prev = -1;                // multi-turn: index in the same vector of the previous round
};

// Ideal cached tokens of each prompt; `sent` is in the order the requests were sent.
std::vector<int> IdealCachedTokens(const std::vector<SentPrompt>& sent);

// The same at block granularity: a cache of `block_size`-token blocks shares only full blocks.
// REQUIRES: block_size >= 1.
int RoundDownToBlock(int tokens, int block_size);

}  // namespace kvserve::loadgen
