#include "sched/step_cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace kvserve {
namespace {

// A machine whose steps cost exactly base + row * d + token * p + kilo * context / 1000, with
// +-2% multiplicative noise.
struct FakeMachine {
  double base = 0.020, row = 0.0010, token = 0.0040, kilo = 0.0005;
  std::mt19937_64 rng{11};
  double Exact(const StepShape& s) const {
    return base + row * s.decode_rows + token * s.prefill_tokens + kilo * s.decode_context / 1e3;
  }
  double Measure(const StepShape& s) {
    return Exact(s) * std::uniform_real_distribution<double>(0.98, 1.02)(rng);
  }
  StepShape RandomStep() {
    StepShape s;
    const int kind = std::uniform_int_distribution<int>(0, 2)(rng);
    if (kind != 1) s.decode_rows = std::uniform_int_distribution<int>(1, 16)(rng);
    if (kind != 0) s.prefill_tokens = std::uniform_int_distribution<int>(16, 512)(rng);
    s.decode_context = s.decode_rows * std::uniform_int_distribution<int>(10, 2000)(rng);
    return s;
  }
};

TEST(StepCostModel, ShapeOfCountsOneTokenSequencesAsDecodeRows) {
  const std::vector<ScheduledSeq> seqs = {{SeqId(1), 40, 1, true},
                                          {SeqId(2), 0, 64, false},
                                          {SeqId(3), 9, 1, true},
                                          {SeqId(4), 64, 30, true}};
  const StepShape s = ShapeOf(seqs);
  EXPECT_EQ(s.decode_rows, 2);
  EXPECT_EQ(s.decode_context, 41 + 10);
  EXPECT_EQ(s.prefill_tokens, 94);
}

TEST(StepCostModel, RecoversTheCostsOfAMachineAndPredictsBeforeSeeingASample) {
  FakeMachine m;
  StepCostModel model;
  EXPECT_FALSE(model.Predict(StepShape{1, 0, 10}).has_value());
  EXPECT_FALSE(model.PrefillBudget(1, 10, 0.1).has_value());
  for (int i = 0; i < 400; ++i) {
    const StepShape s = m.RandomStep();
    model.Observe(s, m.Measure(s));
  }
  const StepCostFit f = model.fit();
  ASSERT_TRUE(f.ready);
  EXPECT_EQ(f.samples, 400);
  EXPECT_NEAR(f.base, m.base, 0.1 * m.base);
  EXPECT_NEAR(f.per_decode_row, m.row, 0.1 * m.row);
  EXPECT_NEAR(f.per_prefill_token, m.token, 0.03 * m.token);
  // The context term is small next to the noise of long prefills; what matters is prediction.
  const StepShape decodes{16, 0, 16 * 2000};
  EXPECT_NEAR(*model.Predict(decodes), m.Exact(decodes), 0.05 * m.Exact(decodes));
  EXPECT_LT(f.mean_relative_error, 0.03);  // the noise is 1% on average
  const StepShape probe{8, 100, 8000};
  EXPECT_NEAR(*model.Predict(probe), m.Exact(probe), 0.02 * m.Exact(probe));
  // 8 decodes over 8000 tokens of context alone: 0.020 + 0.008 + 0.004 = 0.032 s; a 0.1 s target
  // leaves 0.068 s, or 17 tokens at 4 ms.
  EXPECT_NEAR(*model.PrefillBudget(8, 8000, 0.1), 17, 1);
  EXPECT_EQ(*model.PrefillBudget(8, 8000, 0.01), 0);  // even the decodes take longer
}

TEST(StepCostModel, FollowsAMachineThatSlowsDown) {
  FakeMachine m;
  StepCostModel model;
  for (int i = 0; i < 300; ++i) {
    const StepShape s = m.RandomStep();
    model.Observe(s, m.Measure(s));
  }
  m.token *= 2;  // another process took a core
  m.base *= 2;
  for (int i = 0; i < 300; ++i) {
    const StepShape s = m.RandomStep();
    model.Observe(s, m.Measure(s));
  }
  EXPECT_NEAR(model.fit().per_prefill_token, m.token, 0.05 * m.token);
  EXPECT_NEAR(model.fit().base, m.base, 0.15 * m.base);
}

TEST(StepCostModel, NeedsDecodeAndPrefillStepsAndIgnoresBadTimes) {
  StepCostModel model;
  for (int i = 1; i <= 50; ++i) model.Observe(StepShape{0, 10 * i, 0}, 0.01 + 0.001 * i);
  EXPECT_FALSE(model.fit().ready);  // prefill only: a decode row's cost is unknown
  model.Observe(StepShape{2, 0, 20}, std::nan(""));
  model.Observe(StepShape{2, 0, 20}, -1);
  model.Observe(StepShape{2, 0, 20}, 0);
  EXPECT_EQ(model.fit().samples, 50);
  for (int i = 1; i <= 10; ++i) model.Observe(StepShape{i, 0, 100 * i}, 0.01 + 0.002 * i);
  EXPECT_TRUE(model.fit().ready);
}

}  // namespace
}  // namespace kvserve
