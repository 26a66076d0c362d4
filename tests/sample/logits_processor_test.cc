#include "sample/logits_processor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace kvserve {
namespace {

using ::testing::ElementsAre;

TEST(RepetitionPenalty, DividesPositiveAndMultipliesNegativeOncePerDistinctToken) {
  TokenHistory h(6);
  h.SetPrompt(std::vector<TokenId>{1, 2, 2});
  h.Append(4);
  h.Append(4);
  std::vector<float> logits = {1.0f, 3.0f, -2.0f, 5.0f, 0.5f, 0.0f};
  RepetitionPenaltyProcessor(2.0f, -1).Process(logits, h);
  // 1: 3/2, 2: -2*2 (once, although it occurs twice), 4: 0.5/2; 0, 3, 5 untouched.
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 1.5f, -4.0f, 5.0f, 0.25f, 0.0f}));
}

TEST(RepetitionPenalty, OnlyLooksAtTheLastNTokensOfPromptAndOutput) {
  TokenHistory h(4);
  h.SetPrompt(std::vector<TokenId>{0, 1});
  h.Append(2);
  std::vector<float> logits = {4.0f, 4.0f, 4.0f, 4.0f};
  RepetitionPenaltyProcessor(2.0f, 2).Process(logits, h);  // window = {1, 2}
  EXPECT_EQ(logits, (std::vector<float>{4.0f, 2.0f, 2.0f, 4.0f}));
}

TEST(FrequencyPresencePenalty, MatchesOpenAiFormulaOverGeneratedTokensOnly) {
  TokenHistory h(4);
  h.SetPrompt(std::vector<TokenId>{3, 3, 3});  // the prompt is not penalised
  h.Append(1);
  h.Append(1);
  h.Append(1);
  h.Append(2);
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  FrequencyPresencePenaltyProcessor(0.5f, 0.25f).Process(logits, h);
  // logit - count * 0.5 - (count > 0) * 0.25
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 1.0f - 1.5f - 0.25f, 1.0f - 0.5f - 0.25f, 1.0f}));
}

TEST(FrequencyPresencePenalty, NegativeValuesEncourageRepetition) {
  TokenHistory h(2);
  h.Append(0);
  std::vector<float> logits = {0.0f, 0.0f};
  FrequencyPresencePenaltyProcessor(-1.0f, -0.5f).Process(logits, h);
  EXPECT_EQ(logits, (std::vector<float>{1.5f, 0.0f}));
}

TEST(Temperature, DividesEveryLogit) {
  TokenHistory h(3);
  std::vector<float> logits = {1.0f, -3.0f, 0.5f};
  TemperatureProcessor(0.5f).Process(logits, h);
  EXPECT_EQ(logits, (std::vector<float>{2.0f, -6.0f, 1.0f}));
}

TEST(TokenHistory, CountsGeneratedTokensIncrementallyAndResetsOnNewPrompt) {
  TokenHistory h(5);
  h.SetPrompt(std::vector<TokenId>{4});
  h.Append(2);
  h.Append(3);
  h.Append(2);
  EXPECT_THAT(h.distinct_generated(), ElementsAre(2, 3));
  EXPECT_EQ(h.generated_count(2), 2);
  EXPECT_EQ(h.generated_count(4), 0);
  EXPECT_EQ(h.size(), 4);
  EXPECT_EQ(h.at(0), 4);
  EXPECT_EQ(h.at(3), 2);
  h.SetPrompt(std::vector<TokenId>{1});
  EXPECT_TRUE(h.distinct_generated().empty());
  EXPECT_EQ(h.generated_count(2), 0);
}

}  // namespace
}  // namespace kvserve
