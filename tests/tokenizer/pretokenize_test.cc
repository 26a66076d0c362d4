#include "tokenizer/pretokenize.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvserve {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Split(std::string_view pre, std::string_view text) {
  auto config = LookupPreTokenizer(pre, TokenizerModel::kBpe);
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  auto pt = PreTokenizer::Create(*config);
  EXPECT_TRUE(pt.ok()) << pt.status().ToString();
  std::vector<std::string> out;
  for (std::string_view p : pt->Split(text)) out.emplace_back(p);
  return out;
}

TEST(PreTokenizerTest, Llama3SplitsContractionsInBothCases) {
  EXPECT_THAT(Split("llama-bpe", "I'm you'LL we'Re"),
              ElementsAre("I", "'m", " you", "'LL", " we", "'Re"));
}

TEST(PreTokenizerTest, Llama3GroupsDigitsByThree) {
  EXPECT_THAT(Split("llama-bpe", "1234567 x"), ElementsAre("123", "456", "7", " x"));
}

TEST(PreTokenizerTest, Qwen2SplitsEveryDigit) {
  EXPECT_THAT(Split("qwen2", "123"), ElementsAre("1", "2", "3"));
}

TEST(PreTokenizerTest, Llama3KeepsNewlineRunsAndTrailingSpace) {
  EXPECT_THAT(Split("llama-bpe", "a\n\n\nb  c "), ElementsAre("a", "\n\n\n", "b", " ", " c", " "));
  EXPECT_THAT(Split("llama-bpe", "x.\n\ny"), ElementsAre("x", ".\n\n", "y"));
}

TEST(PreTokenizerTest, Gpt2SplitsLettersDigitsAndPunctuation) {
  EXPECT_THAT(Split("gpt2", "Hello, world 42!"), ElementsAre("Hello", ",", " world", " 42", "!"));
  EXPECT_THAT(Split("gpt2", "don't"), ElementsAre("don", "'t"));
}

TEST(PreTokenizerTest, UnicodeLettersUseProperties) {
  EXPECT_THAT(Split("llama-bpe", "Привет мир"), ElementsAre("Привет", " мир"));
}

TEST(PreTokenizerTest, PiecesAlwaysConcatenateToInput) {
  const std::string text = "  mixed\t\ttabs \r\n and \xF0\x9F\x98\x80 emoji 12345678 ''' ";
  for (std::string_view pre :
       {"gpt2", "llama-bpe", "qwen2", "smollm", "deepseek-llm", "deepseek-v3"}) {
    std::string joined;
    for (const auto& p : Split(pre, text)) joined += p;
    EXPECT_EQ(joined, text) << pre;
  }
}

TEST(PreTokenizerTest, VeryLongRunsSplitLikeShortOnes) {
  const std::string spaces(200000, ' ');
  EXPECT_THAT(Split("llama-bpe", spaces + "a"), ElementsAre(spaces.substr(1), " a"));
  const std::string letters(200000, 'x');
  EXPECT_THAT(Split("gpt2", letters + "!"), ElementsAre(letters, "!"));
}

// deepseek-llm (DeepSeek-LLM, V2): six Split regexes in sequence. Newlines alone, Latin-script
// letter runs with one leading space, ASCII/full-width punctuation runs, trailing whitespace,
// CJK runs, then digit runs (whole, not by three). No reference tokenizer package exists for it,
// so these follow HF's Split(Isolated) semantics by hand; deepseek-v3 is checked against a
// reference tokenizer in tests/tokenizer/conformance.
TEST(PreTokenizerTest, DeepseekLlmSplitsScriptsPunctuationAndDigitRuns) {
  EXPECT_THAT(Split("deepseek-llm", "Hello world 12345"),
              ElementsAre("Hello", " world", " ", "12345"));
  EXPECT_THAT(Split("deepseek-llm", "中文abc"), ElementsAre("中文", "abc"));
  EXPECT_THAT(Split("deepseek-llm", "a\nb"), ElementsAre("a", "\n", "b"));
  EXPECT_THAT(Split("deepseek-llm", "x, y!!  "), ElementsAre("x", ",", " y", "!!", "  "));
  EXPECT_THAT(Split("deepseek-llm", "１２，ｘ"), ElementsAre("１２", "，", "ｘ"));
}

TEST(PreTokenizerTest, DeepseekV3GroupsDigitsByThreeAndKeepsCjkRuns) {
  EXPECT_THAT(Split("deepseek-v3", "abc1234中文x"), ElementsAre("abc", "123", "4", "中文", "x"));
  EXPECT_THAT(Split("deepseek-v3", "it's ok"), ElementsAre("it", "'s", " ok"));
}

TEST(PreTokenizerTest, DeepseekSequencesAreRecognisedFromTokenizerJson) {
  for (std::string_view pre : {"deepseek-llm", "deepseek-v3"}) {
    auto config = LookupPreTokenizer(pre, TokenizerModel::kBpe);
    ASSERT_TRUE(config.ok());
    EXPECT_EQ(PreNameForRegexes(config->regexes), pre);
  }
  EXPECT_EQ(PreNameForRegexes({"x", "y"}), "");
}

TEST(PreTokenizerTest, UnknownPreIsUnimplemented) {
  EXPECT_EQ(LookupPreTokenizer("nope", TokenizerModel::kBpe).status().code(),
            StatusCode::kUnimplemented);
  EXPECT_TRUE(LookupPreTokenizer("anything", TokenizerModel::kSpm).ok());
}

}  // namespace
}  // namespace kvserve
