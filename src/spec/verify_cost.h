// VerifyCostTable: the seconds of an engine step whose rows are all decodes or verified drafts
// (no prefill), as a function of its row count M. It is the cost model behind adaptive draft
// lengths.
//
// Verifying k drafts adds k rows to a step. Where decode is bound by memory bandwidth, those rows
// ride on the weights the step reads anyway. Where it is not (a small model that sits in cache, a
// large batch, a kernel whose tiling changes at some M), each row costs nearly a step of its own.
// The relation is not linear (see the verify table in docs/speculative.md), so it is kept as a
// table, not as a slope:
//   - the engine measures M = 1, 2, ... at start-up (SetPrior: one sequence at a short context,
//     so these are priors);
//   - it then keeps measuring the steps it runs (Observe). A row count's first step replaces its
//     prior outright (real steps attend over longer contexts); later ones are averaged in
//     exponentially, each clamped to within 2x of the current value so that one stall cannot
//     swing it.
// Seconds(M) interpolates between measured row counts. Past the largest one it extrapolates with
// the last measured slope; below the smallest it takes the smallest's value.
//
// Thread safety: none; the engine thread owns it.
#pragma once

#include <optional>
#include <vector>

namespace kvserve {

class VerifyCostTable {
 public:
  // Keeps row counts 1..max_rows; Observe ignores others.
  explicit VerifyCostTable(int max_rows = 0);

  void SetPrior(int rows, double seconds);
  void Observe(int rows, double seconds);
  // nullopt until some row count has been measured; 0 for rows <= 0.
  std::optional<double> Seconds(int rows) const;
  int max_rows() const { return static_cast<int>(seconds_.size()); }
  bool measured(int rows) const {
    return rows >= 1 && rows <= max_rows() && seconds_[static_cast<size_t>(rows - 1)] > 0;
  }

 private:
  static constexpr double kWeight = 0.2;  // of each new sample
  std::vector<double> seconds_;           // [rows - 1]; 0 = not measured
  std::vector<bool> prior_;               // [rows - 1]: seconds_ is a start-up measurement
};

}  // namespace kvserve
