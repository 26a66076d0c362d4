// StepCostModel: how long an engine step takes as a function of what it carries, fitted online
// from the steps the engine times, so that the scheduler can size prefill chunks for an
// inter-token latency target (--max-itl-ms).
//
//   seconds ~ base + per_decode_row * decode_rows + per_prefill_token * prefill_tokens
//                  + per_decode_context * decode_context / 1000
//
// decode_rows counts the sequences that compute one token, prefill_tokens the other tokens, and
// decode_context the tokens the decode rows attend over (attention grows with it). Prefill
// tokens' own attention is folded into per_prefill_token. The fit is recursive least squares on
// relative errors (each step weighted by 1 / seconds^2) with exponential forgetting (old steps
// fade, so the model follows the machine: other load on shared cores, another weight type), lightly
// regularised towards zero so that it stays defined before the steps have varied. The weights read
// once per step are what `base` measures.
//
// Thread safety: none; the engine thread owns it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>

#include "sched/schedule_output.h"

namespace kvserve {

struct StepShape {
  int decode_rows = 0;
  int prefill_tokens = 0;
  int64_t decode_context = 0;  // sum over decode rows of the tokens each attends over
};

// The shape of scheduled work: a sequence computing one token is a decode row.
StepShape ShapeOf(std::span<const ScheduledSeq> seqs);

struct StepCostFit {
  double base = 0, per_decode_row = 0, per_prefill_token = 0, per_decode_kilocontext = 0;
  // Mean of |predicted - measured| / measured over recent steps, each predicted before it was
  // observed (an honest out-of-sample error), exponentially weighted like the fit.
  double mean_relative_error = 0;
  int64_t samples = 0;
  bool ready = false;  // enough varied steps seen to trust the fit
};

class StepCostModel {
 public:
  // forgetting: weight kept by the past per observed step (0.98: ~50 steps of memory).
  explicit StepCostModel(double forgetting = 0.98);

  void Observe(const StepShape& shape, double seconds);
  // Predicted seconds; nullopt until ready.
  std::optional<double> Predict(const StepShape& shape) const;
  // The most prefill tokens a step with these decodes may carry and still be predicted to take
  // at most target_seconds (0 when even the decodes alone take longer); nullopt until ready.
  std::optional<int> PrefillBudget(int decode_rows, int64_t decode_context,
                                   double target_seconds) const;
  StepCostFit fit() const;

 private:
  static constexpr int kTerms = 4;
  using Vec = std::array<double, kTerms>;
  static Vec Features(const StepShape& shape);
  bool Ready() const;
  void Solve();

  double forgetting_;
  std::array<Vec, kTerms> xtx_{};  // sum of weighted x x^T
  Vec xty_{};                      // sum of weighted x y
  Vec w_{};                        // the current solution
  int64_t samples_ = 0;
  int64_t decode_steps_ = 0, prefill_steps_ = 0, mixed_steps_ = 0;
  double error_ = 0;
  int64_t errors_seen_ = 0;
};

}  // namespace kvserve
