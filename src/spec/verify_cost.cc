#include "spec/verify_cost.h"

#include <algorithm>

namespace kvserve {

VerifyCostTable::VerifyCostTable(int max_rows)
    : seconds_(static_cast<size_t>(std::max(max_rows, 0)), 0.0),
      prior_(seconds_.size(), false) {}

void VerifyCostTable::SetPrior(int rows, double seconds) {
  if (rows < 1 || rows > max_rows() || !(seconds > 0)) return;
  seconds_[static_cast<size_t>(rows - 1)] = seconds;
  prior_[static_cast<size_t>(rows - 1)] = true;
}

void VerifyCostTable::Observe(int rows, double seconds) {
  if (rows < 1 || rows > max_rows() || !(seconds > 0)) return;
  double& s = seconds_[static_cast<size_t>(rows - 1)];
  if (s == 0 || prior_[static_cast<size_t>(rows - 1)]) {
    s = seconds;
    prior_[static_cast<size_t>(rows - 1)] = false;
    return;
  }
  s += kWeight * (std::clamp(seconds, 0.5 * s, 2.0 * s) - s);
}

std::optional<double> VerifyCostTable::Seconds(int rows) const {
  if (rows <= 0) return 0.0;
  // The measured row counts nearest `rows` on each side (0 = none), searched outwards from it:
  // the policy asks for consecutive counts every step, and the table is dense where it asks.
  const auto below = [this](int m) {  // the largest measured count <= m, or 0
    m = std::min(m, max_rows());
    while (m >= 1 && !measured(m)) --m;
    return std::max(m, 0);
  };
  const auto at = [this](int m) { return seconds_[static_cast<size_t>(m - 1)]; };
  const int lo = below(rows);
  if (lo == rows) return at(lo);
  int hi = rows + 1;
  while (hi <= max_rows() && !measured(hi)) ++hi;
  if (hi > max_rows()) hi = 0;
  if (lo == 0) return hi == 0 ? std::nullopt : std::optional<double>(at(hi));
  if (hi != 0) {
    const double f = static_cast<double>(rows - lo) / (hi - lo);
    return at(lo) + f * (at(hi) - at(lo));
  }
  // Past the largest measured count: its slope from the one before (a lone measurement scales
  // in proportion to its rows, as a compute-bound step would).
  const int before = below(lo - 1);
  const double slope =
      before > 0 ? std::max(0.0, (at(lo) - at(before)) / (lo - before)) : at(lo) / lo;
  return at(lo) + slope * (rows - lo);
}

}  // namespace kvserve
