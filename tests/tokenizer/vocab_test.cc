#include "tokenizer/vocab.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer_spec.h"

namespace kvserve {
namespace {

TokenizerSpec SpecOf(std::vector<std::string> tokens, std::vector<TokenType> types = {}) {
  TokenizerSpec spec;
  spec.tokens = std::move(tokens);
  spec.types = std::move(types);
  spec.types.resize(spec.tokens.size(), TokenType::kNormal);
  return spec;
}

TEST(VocabTest, TheFirstTokenOfATextWinsAndOnlyMergeableTypesAreMergeable) {
  const Vocab v(
      SpecOf({"a", "<s>", "ab", "a", "", "<0x41>", "ab", "x"},
             {TokenType::kNormal, TokenType::kControl, TokenType::kUserDefined, TokenType::kNormal,
              TokenType::kNormal, TokenType::kByte, TokenType::kControl, TokenType::kUnused}));
  EXPECT_EQ(v.size(), 8);
  EXPECT_EQ(v.Find("a"), 0);   // not 3
  EXPECT_EQ(v.Find("ab"), 2);  // not 6
  EXPECT_EQ(v.Find(""), 4);
  EXPECT_EQ(v.Find("<s>"), 1);
  EXPECT_EQ(v.Find("x"), 7);
  EXPECT_EQ(v.Find("b"), -1);
  EXPECT_EQ(v.Find("abc"), -1);
  EXPECT_EQ(v.FindMergeable("a"), 0);
  EXPECT_EQ(v.FindMergeable("ab"), 2);  // user-defined merges
  EXPECT_EQ(v.FindMergeable("<s>"), -1);
  EXPECT_EQ(v.FindMergeable("<0x41>"), -1);
  EXPECT_EQ(v.FindMergeable("x"), -1);
  EXPECT_EQ(v.ByteToken(0x41), 5);
  EXPECT_EQ(v.ByteToken(0x42), -1);
  EXPECT_EQ(v.type(6), TokenType::kControl);
}

TEST(VocabTest, LookupsAgreeWithAMapOverAManyTokenVocabulary) {
  // Random short texts over a small alphabet: many duplicates and many shared prefixes, and
  // tables grown well past their first size.
  std::mt19937_64 rng(7);
  std::vector<std::string> tokens;
  std::unordered_map<std::string, TokenId> first;
  for (int i = 0; i < 50000; ++i) {
    std::string t;
    for (int n = static_cast<int>(rng() % 5); n > 0; --n) t += "abcd\xe2\x96\x81"[rng() % 7];
    first.try_emplace(t, static_cast<TokenId>(tokens.size()));
    tokens.push_back(std::move(t));
  }
  const Vocab v(SpecOf(tokens));
  for (const auto& [text, id] : first) ASSERT_EQ(v.Find(text), id) << text;
  for (int i = 0; i < 1000; ++i) {
    const std::string absent = "z" + std::to_string(i);
    ASSERT_EQ(v.Find(absent), -1);
    ASSERT_EQ(v.FindMergeable(absent), -1);
  }
}

TEST(VocabTest, AnEmptyVocabularyFindsNothing) {
  const Vocab v(SpecOf({}));
  EXPECT_EQ(v.size(), 0);
  EXPECT_EQ(v.Find(""), -1);
  EXPECT_EQ(v.FindMergeable("a"), -1);
}

}  // namespace
}  // namespace kvserve
