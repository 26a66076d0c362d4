// Adaptive draft lengths: how many drafts each speculating sequence gets this step.
//
// A sequence's drafts are accepted one after another until the first miss; with a per-draft
// acceptance rate a, its j-th draft adds a^j expected tokens. The step's cost is measured, not
// assumed: `step_seconds(n)` is the step carrying n drafts in all (VerifyCostTable: verification
// may be nearly free where decode is bandwidth-bound, or cost a row each where it is not, and the
// curve need not be straight). A draft model also costs `draft_step_seconds` per draft depth
// (one batched draft forward for all sequences drafting that deep).
//
// The policy maximises the batch's expected tokens per second. For a depth cap K (0..max_k; only
// 0 and max_k matter without a draft model), the drafts worth most are the ones with the largest
// a^j, so the best allocation of n drafts takes the n largest; the policy evaluates
//   (decode rows + sum of those n gains) / (step_seconds(n) + K * draft_step_seconds)
// for every n and K and keeps the best (ties go to fewer drafts). So speculation turns itself off
// for a sequence whose acceptance is too low to pay, and for the whole batch when verification
// costs as much as the tokens it may win (a compute-bound batch, or a draft model nearly as slow
// as the target).
//
// AcceptanceStats estimates a from verifications (and, for n-gram sequences not speculating,
// from proposals compared with the token actually generated, which costs nothing), with a
// Beta(1, 1) prior and exponential forgetting so that it follows the text.
#pragma once

#include <functional>
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
  // Seconds of the step when it carries n drafts in all (n = 0: the step without drafts).
  std::function<double(int n)> step_seconds;
  double draft_step_seconds = 0;  // one draft-model depth (0 for n-gram)
  int num_decode_rows = 1;        // tokens the step yields without drafts
};

// Drafts per candidate (same order), each in [0, max_len], depth at most max_k.
std::vector<int> ChooseDraftLengths(std::span<const DraftCandidate> candidates,
                                    const DraftCosts& costs, int max_k);

}  // namespace kvserve
