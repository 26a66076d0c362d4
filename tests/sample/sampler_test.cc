#include "sample/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace kvserve {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

Sampler Make(const SamplingParams& p, int vocab) {
  Result<Sampler> s = Sampler::Create(p, vocab);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

SamplingParams Greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

SamplingParams Seeded(uint64_t seed) {
  SamplingParams p;
  p.seed = seed;
  p.has_seed = true;
  return p;
}

TEST(Sampler, CreateRejectsInvalidParamsAndVocab) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_EQ(Sampler::Create(p, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Sampler::Create(SamplingParams{}, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(Sampler, GreedyPicksArgmaxAndLowestIdOnTies) {
  Sampler s = Make(Greedy(), 5);
  std::vector<float> a = {1.0f, 5.0f, 2.0f, 5.0f, -1.0f};
  EXPECT_EQ(s.Sample(a).token, 1);
  std::vector<float> b = {0.0f, 0.0f, 0.0f, 0.0f, 0.5f};
  EXPECT_EQ(s.Sample(b).token, 4);
}

// Dividing by a temperature of 1e-40 overflows every logit to infinity; below 1e-5 the
// sampler is greedy instead, whatever the seed, and from 1e-5 on it samples.
TEST(Sampler, TemperatureBelowGreedyThresholdIsGreedyForEverySeed) {
  std::vector<float> logits = {1.0f, 5.0f, 2.0f, 4.999f, -1.0f};
  for (float t : {1e-40f, 1e-30f, 1e-6f, 9.9e-6f}) {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      SamplingParams p = Seeded(seed);
      p.temperature = t;
      ASSERT_TRUE(p.greedy()) << t;
      std::vector<float> copy = logits;
      EXPECT_EQ(Make(p, 5).Sample(copy).token, 1) << "temperature " << t << " seed " << seed;
    }
  }
  SamplingParams p = Seeded(1);
  p.temperature = SamplingParams::kGreedyTemperature;
  EXPECT_FALSE(p.greedy());
}

TEST(Sampler, GreedyAppliesPenalties) {
  SamplingParams p = Greedy();
  p.presence_penalty = 0.5f;
  Sampler s = Make(p, 2);
  s.Accept(0);
  std::vector<float> logits = {1.0f, 0.9f};
  EXPECT_EQ(s.Sample(logits).token, 1);  // 1.0 - 0.5 < 0.9
}

TEST(Sampler, NanAndInfNeverCrashAndAllMaskedGivesTokenZero) {
  for (SamplingParams p : {Greedy(), Seeded(1)}) {
    Sampler s = Make(p, 4);
    std::vector<float> masked = {NAN, -kInf, NAN, -kInf};
    EXPECT_EQ(s.Sample(masked).token, 0);
    std::vector<float> with_inf = {NAN, 2.0f, kInf, 1.0f};
    EXPECT_EQ(s.Sample(with_inf).token, 2);
    std::vector<float> nan_and_finite = {NAN, 2.0f, NAN, 1.0f};
    const TokenId t = s.Sample(nan_and_finite).token;
    EXPECT_TRUE(t == 1 || t == 3);
  }
}

std::vector<TokenId> Draws(uint64_t seed, int n) {
  Sampler s = Make(Seeded(seed), 8);
  std::vector<TokenId> out;
  for (int i = 0; i < n; ++i) {
    std::vector<float> logits = {0.1f, 0.2f, 0.3f, 0.4f, 0.3f, 0.2f, 0.1f, 0.0f};
    out.push_back(s.Sample(logits).token);
    s.Accept(out.back());
  }
  return out;
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedsDiffer) {
  EXPECT_EQ(Draws(42, 64), Draws(42, 64));
  EXPECT_NE(Draws(42, 64), Draws(43, 64));
}

// Pearson chi-square of `draws` samples against `expected` probabilities (zeros must not occur).
double ChiSquare(Sampler& s, const std::vector<float>& logits, const std::vector<double>& expected,
                 int draws) {
  std::vector<int> counts(logits.size(), 0);
  std::vector<float> row(logits.size());
  for (int i = 0; i < draws; ++i) {
    row = logits;
    ++counts[static_cast<size_t>(s.Sample(row).token)];
  }
  double chi2 = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " should have been truncated";
      continue;
    }
    const double e = expected[i] * draws;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

std::vector<double> Softmax(const std::vector<float>& logits, double temperature) {
  std::vector<double> p;
  double sum = 0.0;
  for (float x : logits) sum += std::exp(x / temperature);
  for (float x : logits) p.push_back(std::exp(x / temperature) / sum);
  return p;
}

TEST(Sampler, EmpiricalDistributionMatchesSoftmaxOfLogitsOverTemperature) {
  SamplingParams p = Seeded(7);
  p.temperature = 0.7f;
  Sampler s = Make(p, 5);
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, -1.0f};
  // 4 degrees of freedom: P(chi2 > 18.47) = 0.001. Deterministic for the fixed seed.
  EXPECT_LT(ChiSquare(s, logits, Softmax(logits, 0.7), 100000), 18.47);
}

TEST(Sampler, TruncatedDistributionIsRenormalisedOverSurvivors) {
  SamplingParams p = Seeded(9);
  p.top_k = 3;
  Sampler s = Make(p, 5);
  const std::vector<float> logits = {-1.0f, 1.0f, 0.0f, 0.5f, -0.5f};
  std::vector<double> expected = Softmax({1.0f, 0.0f, 0.5f}, 1.0);
  expected = {0.0, expected[0], expected[1], expected[2], 0.0};
  EXPECT_LT(ChiSquare(s, logits, expected, 50000), 13.82);  // 2 dof, p = 0.001
}

TEST(Sampler, TopPAndMinPRestrictTheDrawnTokens) {
  // Probabilities 0.4, 0.3, 0.2, 0.1.
  const std::vector<float> logits = {std::log(0.3f), std::log(0.1f), std::log(0.4f),
                                     std::log(0.2f)};
  SamplingParams p = Seeded(3);
  p.top_p = 0.5f;  // keeps {2, 0}
  Sampler top_p = Make(p, 4);
  const double kept = 0.4 + 0.3;
  EXPECT_LT(ChiSquare(top_p, logits, {0.3 / kept, 0.0, 0.4 / kept, 0.0}, 20000), 10.83);
  SamplingParams q = Seeded(4);
  q.min_p = 0.45f;  // keeps p >= 0.18: {0, 2, 3}
  Sampler min_p = Make(q, 4);
  EXPECT_LT(ChiSquare(min_p, logits, {0.3 / 0.9, 0.0, 0.4 / 0.9, 0.2 / 0.9}, 20000), 13.82);
}

TEST(Sampler, LogprobsAreLogSoftmaxOfRawLogitsWithSortedTopN) {
  SamplingParams p = Greedy();
  p.logprobs = true;
  p.top_logprobs = 3;
  p.presence_penalty = 2.0f;  // changes the choice but not the reported logprobs
  Sampler s = Make(p, 4);
  s.Accept(2);
  std::vector<float> logits = {1.0f, 2.0f, 3.0f, 2.0f};
  const SampleOutput out = s.Sample(logits);
  const double lse = std::log(std::exp(1.0) + 2 * std::exp(2.0) + std::exp(3.0));
  EXPECT_EQ(out.token, 1);  // 3 - 2 = 1 < 2; tie 1 vs 3 -> 1
  EXPECT_NEAR(out.logprob, 2.0 - lse, 1e-6);
  ASSERT_EQ(out.top.size(), 3u);
  EXPECT_EQ(out.top[0].id, 2);
  EXPECT_NEAR(out.top[0].logprob, 3.0 - lse, 1e-6);
  EXPECT_EQ(out.top[1].id, 1);  // tie with id 3 -> lower id first
  EXPECT_EQ(out.top[2].id, 3);
  EXPECT_NEAR(out.top[2].logprob, 2.0 - lse, 1e-6);
}

TEST(Sampler, LogprobsIgnoreTemperatureAndReuseTheOutputBuffer) {
  SamplingParams p = Seeded(5);
  p.temperature = 0.25f;
  p.top_logprobs = 2;
  Sampler s = Make(p, 3);
  SampleOutput out;
  std::vector<float> logits = {0.0f, 0.0f, std::log(2.0f)};
  s.Sample(logits, &out);
  const TokenLogprob* data = out.top.data();
  EXPECT_NEAR(out.logprob, out.token == 2 ? std::log(0.5) : std::log(0.25), 1e-6);
  EXPECT_NEAR(out.top[0].logprob, std::log(0.5), 1e-6);
  EXPECT_NEAR(out.top[1].logprob, std::log(0.25), 1e-6);
  EXPECT_EQ(out.top[1].id, 0);
  logits = {0.0f, 0.0f, 1.0f};
  s.Sample(logits, &out);
  EXPECT_EQ(out.top.data(), data);  // no reallocation on the second step
}

TEST(Sampler, RepetitionPenaltyUsesPromptWindow) {
  SamplingParams p = Greedy();
  p.repetition_penalty = 2.0f;
  p.penalty_last_n = 1;
  Sampler s = Make(p, 3);
  s.SetPrompt(std::vector<TokenId>{0, 1});  // window = {1}
  std::vector<float> logits = {1.0f, 1.5f, 0.9f};
  EXPECT_EQ(s.Sample(logits).token, 0);  // 1.5 / 2 = 0.75
  EXPECT_FLOAT_EQ(logits[1], 0.75f);
}

}  // namespace
}  // namespace kvserve
