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

// The best allocation under a depth cap: expected tokens / seconds, and the lengths in *lens.
double Allocate(std::span<const DraftCandidate> c, const DraftCosts& costs, int cap,
                std::vector<int>* lens) {
  lens->assign(c.size(), 0);
  const double fixed = cap * costs.draft_step_seconds;
  const double rows = std::max(costs.num_decode_rows, 1);
  // Every draft the cap allows, by its expected tokens a^j; ties keep candidate order.
  struct Unit {
    double gain;
    size_t seq;
  };
  std::vector<Unit> units;
  for (size_t i = 0; i < c.size(); ++i) {
    double g = c[i].rate;
    for (int j = 0; j < std::min(c[i].max_len, cap); ++j, g *= c[i].rate) units.push_back({g, i});
  }
  std::stable_sort(units.begin(), units.end(),
                   [](const Unit& x, const Unit& y) { return x.gain > y.gain; });
  double tokens = rows;
  size_t best_n = 0;
  double best_rate = rows / (costs.step_seconds(0) + fixed);
  for (size_t n = 1; n <= units.size(); ++n) {
    tokens += units[n - 1].gain;
    const double rate = tokens / (costs.step_seconds(static_cast<int>(n)) + fixed);
    if (rate > best_rate) {
      best_rate = rate;
      best_n = n;
    }
  }
  // The n largest gains of one candidate are its first drafts (a^j falls with j).
  for (size_t n = 0; n < best_n; ++n) ++(*lens)[units[n].seq];
  return best_rate;
}

}  // namespace

std::vector<int> ChooseDraftLengths(std::span<const DraftCandidate> candidates,
                                    const DraftCosts& costs, int max_k) {
  std::vector<int> best(candidates.size(), 0), lens;
  double best_rate = Allocate(candidates, costs, 0, &best);
  // Without a draft model the cap costs nothing, so only the largest matters.
  for (int cap = costs.draft_step_seconds > 0 ? 1 : max_k; cap <= max_k; ++cap) {
    const double rate = Allocate(candidates, costs, cap, &lens);
    if (rate > best_rate) {
      best_rate = rate;
      best = lens;
    }
  }
  return best;
}

}  // namespace kvserve
