#include "sched/step_cost_model.h"

#include <algorithm>
#include <cmath>

namespace kvserve {
namespace {

// Ridge weight on the non-intercept terms, relative to one observation.
constexpr double kRidge = 1e-6;
// Steps before the fit is trusted, and of those, steps carrying decodes and steps carrying
// prefill (either may be the same mixed step).
constexpr int64_t kMinSamples = 8;
constexpr int64_t kMinStepsOfEachKind = 2;

}  // namespace

StepShape ShapeOf(std::span<const ScheduledSeq> seqs) {
  StepShape shape;
  for (const ScheduledSeq& s : seqs) {
    if (s.num_new_tokens == 1) {
      ++shape.decode_rows;
      shape.decode_context += s.num_computed + 1;
    } else {
      shape.prefill_tokens += s.num_new_tokens;
    }
  }
  return shape;
}

StepCostModel::StepCostModel(double forgetting) : forgetting_(forgetting) {}

StepCostModel::Vec StepCostModel::Features(const StepShape& s) {
  return {1.0, static_cast<double>(s.decode_rows), static_cast<double>(s.prefill_tokens),
          static_cast<double>(s.decode_context) / 1000.0};
}

bool StepCostModel::Ready() const {
  // Decode-only and prefill-carrying steps separate per_decode_row from per_prefill_token; a
  // fit whose marginal costs are not positive is not trusted.
  return samples_ >= kMinSamples && decode_steps_ + mixed_steps_ >= kMinStepsOfEachKind &&
         prefill_steps_ + mixed_steps_ >= kMinStepsOfEachKind && w_[1] > 0 && w_[2] > 0;
}

void StepCostModel::Observe(const StepShape& shape, double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds)) return;
  if (const std::optional<double> predicted = Predict(shape)) {
    const double e = std::abs(*predicted - seconds) / seconds;
    error_ = errors_seen_ == 0 ? e : forgetting_ * error_ + (1 - forgetting_) * e;
    ++errors_seen_;
  }
  // Relative errors are what matter (a decode step of 25 ms must be predicted as well as a
  // prefill of 2 s), and the noise of a shared machine is multiplicative: each step is weighted
  // by 1 / seconds^2.
  const Vec x = Features(shape);
  const double w = 1.0 / (seconds * seconds);
  for (int i = 0; i < kTerms; ++i) {
    for (int j = 0; j < kTerms; ++j) xtx_[i][j] = forgetting_ * xtx_[i][j] + w * x[i] * x[j];
    xty_[i] = forgetting_ * xty_[i] + w * x[i] * seconds;
  }
  ++samples_;
  if (shape.decode_rows > 0 && shape.prefill_tokens > 0) {
    ++mixed_steps_;
  } else if (shape.decode_rows > 0) {
    ++decode_steps_;
  } else if (shape.prefill_tokens > 0) {
    ++prefill_steps_;
  }
  Solve();
}

// Gaussian elimination with partial pivoting on (X^T X + ridge) w = X^T y.
void StepCostModel::Solve() {
  std::array<std::array<double, kTerms + 1>, kTerms> a{};
  for (int i = 0; i < kTerms; ++i) {
    for (int j = 0; j < kTerms; ++j) a[i][j] = xtx_[i][j];
    if (i > 0) a[i][i] += kRidge * std::max(1.0, xtx_[i][i]);
    a[i][kTerms] = xty_[i];
  }
  for (int col = 0; col < kTerms; ++col) {
    int pivot = col;
    for (int r = col + 1; r < kTerms; ++r) {
      if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
    }
    if (std::abs(a[pivot][col]) < 1e-300) return;  // singular: keep the previous solution
    std::swap(a[col], a[pivot]);
    for (int r = 0; r < kTerms; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (int k = col; k <= kTerms; ++k) a[r][k] -= f * a[col][k];
    }
  }
  for (int i = 0; i < kTerms; ++i) w_[i] = a[i][kTerms] / a[i][i];
}

std::optional<double> StepCostModel::Predict(const StepShape& shape) const {
  if (!Ready()) return std::nullopt;
  const Vec x = Features(shape);
  // Attention never makes a step cheaper: a negative context term (noise while contexts were
  // short) is not extrapolated.
  return w_[0] + w_[1] * x[1] + w_[2] * x[2] + std::max(0.0, w_[3]) * x[3];
}

std::optional<int> StepCostModel::PrefillBudget(int decode_rows, int64_t decode_context,
                                                double target_seconds) const {
  const std::optional<double> decodes_alone = Predict(StepShape{decode_rows, 0, decode_context});
  if (!decodes_alone) return std::nullopt;
  const double room = target_seconds - *decodes_alone;
  if (room <= 0) return 0;
  return static_cast<int>(std::min(room / w_[2], 1e9));
}

StepCostFit StepCostModel::fit() const {
  StepCostFit f;
  f.base = w_[0];
  f.per_decode_row = w_[1];
  f.per_prefill_token = w_[2];
  f.per_decode_kilocontext = w_[3];
  f.mean_relative_error = error_;
  f.samples = samples_;
  f.ready = Ready();
  return f;
}

}  // namespace kvserve
