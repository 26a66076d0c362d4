#include "sample/truncation.h"

#include <algorithm>
#include <cmath>

#include "util/check.h"

namespace kvserve {

void SortDescending(std::span<Candidate> candidates) {
  std::sort(candidates.begin(), candidates.end(), Before);
}

size_t TopK(std::span<Candidate> candidates, int k) {
  KV_CHECK_GT(k, 0);
  const size_t keep = std::min(static_cast<size_t>(k), candidates.size());
  if (keep < candidates.size()) {
    std::nth_element(candidates.begin(), candidates.begin() + static_cast<ptrdiff_t>(keep),
                     candidates.end(), Before);
  }
  SortDescending(candidates.first(keep));
  return keep;
}

size_t TopP(std::span<const Candidate> sorted, float p) {
  KV_CHECK(!sorted.empty());
  if (p >= 1.0f) return sorted.size();
  // NOTE: sums in double over exp(logit - max); the max is sorted[0] since the span is sorted.
  const double max_logit = sorted[0].logit;
  double total = 0.0;
  for (const Candidate& c : sorted) total += std::exp(static_cast<double>(c.logit) - max_logit);
  const double target = static_cast<double>(p) * total;
  double mass = 0.0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    mass += std::exp(static_cast<double>(sorted[i].logit) - max_logit);
    if (mass >= target) return i + 1;
  }
  return sorted.size();  // rounding left the sum a hair below target: keep all
}

size_t MinP(std::span<Candidate> candidates, float min_p) {
  if (candidates.empty() || min_p <= 0.0f) return candidates.size();
  float max_logit = candidates[0].logit;
  for (const Candidate& c : candidates) max_logit = std::max(max_logit, c.logit);
  // p_i / p_max = exp(l_i - l_max) >= min_p  <=>  l_i - l_max >= log(min_p).
  const double threshold = std::log(static_cast<double>(min_p));
  // In-place compaction (stable for the survivors, no allocation unlike std::stable_partition).
  size_t kept = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (static_cast<double>(candidates[i].logit) - static_cast<double>(max_logit) >= threshold) {
      std::swap(candidates[kept++], candidates[i]);
    }
  }
  return kept;
}

}  // namespace kvserve
