// Truncation steps of sampling over a candidate list: top-k, top-p (nucleus), min-p.
//
// Contract: pure functions on a caller-owned span of candidates; they reorder the span and
// return how many leading candidates survive. No allocation. Candidates carry finite logits
// (the Sampler drops -inf tokens before truncation and clamps +inf to the largest float).
//
// NOTE: order is part of the result. "Descending" means by logit, ties by lower id first, so
// that results do not depend on the standard library's sort or nth_element.
#pragma once

#include <cstddef>
#include <span>

#include "util/strong_id.h"

namespace kvserve {

struct Candidate {
  TokenId id;
  float logit;
};

// True if a comes before b in descending order (higher logit; ties: lower id).
inline bool Before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Sorts descending.
void SortDescending(std::span<Candidate> candidates);

// Moves the k best candidates to the front, sorted descending; returns min(k, size).
// Cost O(n + k log k) via nth_element. REQUIRES: k > 0.
size_t TopK(std::span<Candidate> candidates, int k);

// REQUIRES: candidates sorted descending, non-empty, 0 < p <= 1.
// Returns the length of the shortest prefix whose softmax mass (softmax over all given
// candidates) is >= p; at least 1. p == 1 keeps everything.
size_t TopP(std::span<const Candidate> sorted, float p);

// Keeps candidates whose probability is >= min_p * (max probability), i.e.
// logit >= max_logit + log(min_p); moves them to the front preserving their relative order.
// Returns the count (>= 1 for a non-empty span). REQUIRES: 0 <= min_p <= 1.
size_t MinP(std::span<Candidate> candidates, float min_p);

}  // namespace kvserve
