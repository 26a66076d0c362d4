// Adaptive draft lengths: how many drafts each speculating sequence gets this step.
//
// A sequence's drafts are accepted one after another until the first miss; with a per-draft
// acceptance rate a, the j-th draft adds a^j expected tokens. Verifying a draft costs the step
// `per_token_seconds` more (one more row through the weights already being read), and a draft
// model costs `draft_step_seconds` per draft depth (one batched draft forward for all sequences
// drafting that deep). The policy maximises the batch's expected tokens per second:
//   - with no draft depth cost (n-gram), drafts are added greedily by largest a^j while
//     a^j * step_seconds > per_token_seconds * tokens (the marginal draft beats the step's
//     average rate), updating step_seconds and tokens as they are added;
//   - with a draft model, the same for each depth cap K = 0..max_k with step_seconds raised by
//     K * draft_step_seconds, and the best K wins.
// So speculation turns itself off for a sequence whose acceptance is too low to pay, and for the
// whole batch when it is compute-bound (many decode rows make a row cost as much as a step).
//
// AcceptanceStats estimates a from verifications (and, for n-gram sequences not speculating,
// from proposals compared with the token actually generated, which costs nothing), with a
// Beta(1, 1) prior and exponential forgetting so that it follows the text.
#pragma once

#include <span>
#include <vector>

namespace kvserve {

class AcceptanceStats {
 public:
  // One verification of `drafted` drafts of which the first `accepted` were accepted.
  void Observe(int drafted, int accepted);
  // The rate per draft (the probability that a draft is accepted when the ones before it were).
  double rate() const { return (hits_ + 1.0) / (trials_ + 2.0); }
  double trials() const { return trials_; }

 private:
  static constexpr double kForget = 0.9;  // per observation: ~10 verifications of memory
  double hits_ = 0;
  double trials_ = 0;
};

struct DraftCandidate {
  double rate = 0;   // AcceptanceStats::rate()
  int max_len = 0;   // drafts available (n-gram proposal length, or the draft cap)
};

struct DraftCosts {
  double step_seconds = 0;        // the step without drafts
  double per_token_seconds = 0;   // one more token verified
  double draft_step_seconds = 0;  // one draft-model depth (0 for n-gram)
  int num_decode_rows = 1;        // tokens the step yields without drafts
};

// Drafts per candidate (same order), each in [0, max_len], depth at most max_k.
std::vector<int> ChooseDraftLengths(std::span<const DraftCandidate> candidates,
                                    const DraftCosts& costs, int max_k);

}  // namespace kvserve
