#include "spec/draft_policy.h"

#include <algorithm>
#include <cmath>

namespace kvserve {

void AcceptanceStats::Observe(int drafted, int accepted) {
  // Drafts 1..accepted were hits; the next one (if drafted) was the miss that ended it.
  const int decided = std::min(drafted, accepted + 1);
  for (int i = 0; i < decided; ++i) {
    hits_ = hits_ * kForget + (i < accepted ? 1.0 : 0.0);
    trials_ = trials_ * kForget + 1.0;
  }
}

namespace {

// Greedy allocation under a depth cap; returns expected tokens / seconds and fills *lens.
double Allocate(std::span<const DraftCandidate> c, const DraftCosts& costs, int cap,
                std::vector<int>* lens) {
  lens->assign(c.size(), 0);
  double seconds = costs.step_seconds + cap * costs.draft_step_seconds;
  double tokens = std::max(costs.num_decode_rows, 1);
  std::vector<double> next(c.size());  // a^(len+1): the next draft's expected tokens
  for (size_t i = 0; i < c.size(); ++i) next[i] = c[i].max_len > 0 && cap > 0 ? c[i].rate : 0;
  for (;;) {
    size_t best = c.size();
    for (size_t i = 0; i < c.size(); ++i) {
      if (next[i] > 0 && (best == c.size() || next[i] > next[best])) best = i;
    }
    if (best == c.size()) break;
    const double gain = next[best];
    if (gain * seconds <= costs.per_token_seconds * tokens) break;
    tokens += gain;
    seconds += costs.per_token_seconds;
    int& len = (*lens)[best];
    ++len;
    next[best] = len < std::min(c[best].max_len, cap) ? next[best] * c[best].rate : 0;
  }
  return seconds > 0 ? tokens / seconds : 0;
}

}  // namespace

std::vector<int> ChooseDraftLengths(std::span<const DraftCandidate> candidates,
                                    const DraftCosts& costs, int max_k) {
  std::vector<int> best(candidates.size(), 0), lens;
  if (costs.draft_step_seconds <= 0) {
    Allocate(candidates, costs, max_k, &best);
    return best;
  }
  double best_rate = Allocate(candidates, costs, 0, &best);
  for (int cap = 1; cap <= max_k; ++cap) {
    const double rate = Allocate(candidates, costs, cap, &lens);
    if (rate > best_rate) {
      best_rate = rate;
      best = lens;
    }
  }
  return best;
}

}  // namespace kvserve
