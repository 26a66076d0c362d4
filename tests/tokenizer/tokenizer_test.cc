#include "tokenizer/tokenizer.h"

#include <atomic>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tokenizer/detokenizer.h"
#include "tokenizer/test_vocabs.h"
#include "tokenizer/unicode.h"

namespace kvserve {
namespace {

using testing::BpeSpec;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using testing::SpmSpec;

constexpr TokenId kFirstPiece = 259;  // after <unk> <s> </s> and 256 byte tokens

Tokenizer MustCreate(TokenizerSpec spec) {
  auto tok = Tokenizer::Create(std::move(spec));
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return std::move(tok).value();
}

TEST(SpmTest, MergesHighestScoringPairFirst) {
  // "abc" with no "abc" piece: whichever of ab / bc scores higher is merged, the other never is.
  Tokenizer bc_first =
      MustCreate(SpmSpec({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -3}, {"bc", -2}}));
  EXPECT_THAT(bc_first.Encode("abc", false, false), ElementsAre(kFirstPiece, kFirstPiece + 4));
  Tokenizer ab_first =
      MustCreate(SpmSpec({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -2}, {"bc", -3}}));
  EXPECT_THAT(ab_first.Encode("abc", false, false), ElementsAre(kFirstPiece + 3, kFirstPiece + 2));
  // Any adjacent pair whose concatenation is a piece merges (no merge list): ab + c → abc.
  Tokenizer abc = MustCreate(SpmSpec({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -2}, {"abc", -4}}));
  EXPECT_THAT(abc.Encode("abc", false, false), ElementsAre(kFirstPiece + 4));
}

TEST(SpmTest, EqualScoresMergeLeftmostFirst) {
  Tokenizer tok = MustCreate(SpmSpec({{"a", -1}, {"aa", -2}}));
  EXPECT_THAT(tok.Encode("aaa", false, false), ElementsAre(kFirstPiece + 1, kFirstPiece));
}

TEST(SpmTest, UnknownCharactersFallBackToBytes) {
  Tokenizer tok = MustCreate(SpmSpec({{"a", -1}}));
  // "é" is C3 A9: byte tokens are 3 + byte value.
  EXPECT_THAT(tok.Encode("a\xC3\xA9", false, false), ElementsAre(kFirstPiece, 3 + 0xC3, 3 + 0xA9));
  EXPECT_EQ(tok.Decode(tok.Encode("a\xC3\xA9", false, false)), "a\xC3\xA9");
}

TEST(SpmTest, AddsSpacePrefixAtStartAndAfterSpecialTokens) {
  Tokenizer tok = MustCreate(SpmSpec({{"\xE2\x96\x81", -1},
                                      {"a", -1},
                                      {"\xE2\x96\x81"
                                       "a",
                                       -2}},
                                     /*add_space_prefix=*/true));
  const TokenId space = kFirstPiece, a = kFirstPiece + 1, space_a = kFirstPiece + 2;
  EXPECT_THAT(tok.Encode("a a", true, true), ElementsAre(1, space_a, space_a));
  EXPECT_THAT(tok.Encode("a<s>a", false, true), ElementsAre(space_a, 1, space_a));
  EXPECT_THAT(tok.Encode(" a", false, true), ElementsAre(space, space_a));
  EXPECT_EQ(tok.Decode(tok.Encode(" a a", false, false)), " a a");  // one leading space dropped
  EXPECT_EQ(tok.TokenToPiece(space_a), " a");
  EXPECT_EQ(tok.TokenToPiece(a), "a");
}

TEST(SpmTest, NoSpacePrefixWhenDisabled) {
  Tokenizer tok = MustCreate(SpmSpec({{"\xE2\x96\x81", -1}, {"a", -1}}, false));
  EXPECT_THAT(tok.Encode("a", false, false), ElementsAre(kFirstPiece + 1));
}

TEST(SpmTest, SpecialTokensParsedOnlyWhenAsked) {
  Tokenizer tok = MustCreate(SpmSpec({{"<", -1}, {"s", -1}, {">", -1}, {"/", -1}}));
  EXPECT_THAT(tok.Encode("<s>", false, true), ElementsAre(1));
  EXPECT_THAT(tok.Encode("<s>", false, false),
              ElementsAre(kFirstPiece, kFirstPiece + 1, kFirstPiece + 2));
  EXPECT_THAT(tok.Encode("</s><s>", true, true), ElementsAre(1, 2, 1));
}

TEST(BpeTest, MergesByRank) {
  // Rank 0 "b c" beats "a b": a + bc.
  Tokenizer bc = MustCreate(BpeSpec({"b c", "a b", "ab c"}, {"bc", "ab", "abc"}, {}, "gpt2"));
  EXPECT_THAT(bc.Encode("abc", false, false), ElementsAre('a', 256));
  // Rank 0 "a b" then "ab c": one token.
  Tokenizer ab = MustCreate(BpeSpec({"a b", "b c", "ab c"}, {"bc", "ab", "abc"}, {}, "gpt2"));
  EXPECT_THAT(ab.Encode("abc", false, false), ElementsAre(258));
}

TEST(BpeTest, SpaceIsByteLevelG) {
  // " a" is "Ġa" in the byte-level alphabet.
  Tokenizer tok = MustCreate(BpeSpec({"\xC4\xA0 a"},
                                     {"\xC4\xA0"
                                      "a"},
                                     {}, "gpt2"));
  EXPECT_THAT(tok.Encode("a a", false, false), ElementsAre('a', 256));
  EXPECT_EQ(tok.Decode(tok.Encode("a a", false, false)), "a a");
  EXPECT_EQ(tok.TokenToPiece(256), " a");
}

TEST(BpeTest, SpecialAndAddedTokens) {
  Tokenizer tok = MustCreate(BpeSpec(
      {}, {}, {{"<|im_start|>", TokenType::kControl}, {"<tool>", TokenType::kUserDefined}}));
  const TokenId im_start = 256, tool = 257;
  EXPECT_THAT(tok.Encode("<|im_start|>x", false, true), ElementsAre(im_start, 'x'));
  const auto plain = tok.Encode("<|im_start|>", false, false);
  EXPECT_EQ(plain.size(), 12u);  // not parsed: 12 single-byte tokens, no merges
  // User-defined tokens are matched even without parse_special.
  EXPECT_THAT(tok.Encode("<tool>", false, false), ElementsAre(tool));
  EXPECT_EQ(tok.Decode(std::vector<TokenId>{im_start, 'x'}), "<|im_start|>x");
  EXPECT_EQ(tok.Decode(std::vector<TokenId>{im_start, 'x'}, /*skip_special=*/true), "x");
}

TEST(BpeTest, LongestSpecialTokenWins) {
  Tokenizer tok = MustCreate(
      BpeSpec({}, {}, {{"<|a|>", TokenType::kControl}, {"<|a|><|b|>", TokenType::kControl}}));
  EXPECT_THAT(tok.Encode("<|a|><|b|>", false, true), ElementsAre(257));
  EXPECT_EQ(tok.Encode("<|a|><|c|>", false, true).front(), 256);
}

TEST(BpeTest, IgnoreMergesTakesWholeWordFromVocabulary) {
  // llama-bpe ignores merges for in-vocabulary words: "abc" is one token though no merge makes it.
  Tokenizer tok = MustCreate(BpeSpec({}, {"abc"}, {}, "llama-bpe"));
  EXPECT_THAT(tok.Encode("abc", false, false), ElementsAre(256));
  Tokenizer gpt2 = MustCreate(BpeSpec({}, {"abc"}, {}, "gpt2"));
  EXPECT_THAT(gpt2.Encode("abc", false, false), ElementsAre('a', 'b', 'c'));
}

TEST(BpeTest, AddBosAndEos) {
  TokenizerSpec spec =
      BpeSpec({}, {}, {{"<bos>", TokenType::kControl}, {"<eos>", TokenType::kControl}});
  spec.bos_id = 256, spec.eos_id = 257, spec.add_bos = true, spec.add_eos = true;
  Tokenizer tok = MustCreate(spec);
  EXPECT_THAT(tok.Encode("x", true, true), ElementsAre(256, 'x', 257));
  EXPECT_THAT(tok.Encode("x", false, true), ElementsAre('x'));
  EXPECT_TRUE(tok.IsEog(257));
  EXPECT_FALSE(tok.IsEog(256));
  EXPECT_TRUE(tok.IsControl(256));
}

TEST(TokenizerTest, InvalidUtf8IsEncodedAsReplacementCharacter) {
  Tokenizer spm = MustCreate(SpmSpec({{"a", -1}}));
  const std::string bad = "a\xFF\xC3(\xE2\x82\xF0\x9F\x98";
  const auto ids = spm.Encode(bad, true, true);
  EXPECT_EQ(spm.Decode(ids, /*skip_special=*/true),
            "a\xEF\xBF\xBD\xEF\xBF\xBD(\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
            "\xEF\xBF\xBD\xEF\xBF\xBD");
  Tokenizer bpe = MustCreate(BpeSpec({}, {}));
  EXPECT_FALSE(bpe.Encode(bad, true, true).empty());
  EXPECT_THAT(bpe.Encode("", true, true), IsEmpty());
}

TEST(TokenizerTest, RejectsInconsistentSpecs) {
  TokenizerSpec spec = SpmSpec({{"a", -1}});
  spec.scores.pop_back();
  EXPECT_FALSE(Tokenizer::Create(spec).ok());
  spec = SpmSpec({{"a", -1}});
  spec.eos_id = 100000;
  EXPECT_FALSE(Tokenizer::Create(spec).ok());
  spec = BpeSpec({"nospace"}, {});
  EXPECT_FALSE(Tokenizer::Create(spec).ok());
  spec = BpeSpec({}, {});
  spec.pre = "no-such-pre";
  EXPECT_EQ(Tokenizer::Create(spec).status().code(), StatusCode::kUnimplemented);
  EXPECT_FALSE(Tokenizer::Create(TokenizerSpec{}).ok());
}

TEST(StreamingDetokenizerTest, HoldsBackSplitEmojiUntilComplete) {
  Tokenizer tok = MustCreate(SpmSpec({{"a", -1}}));
  StreamingDetokenizer detok(tok);
  // U+1F600 is F0 9F 98 80, fed as four byte tokens.
  EXPECT_EQ(detok.Push(kFirstPiece), "a");
  EXPECT_EQ(detok.Push(3 + 0xF0), "");
  EXPECT_EQ(detok.Push(3 + 0x9F), "");
  EXPECT_EQ(detok.Push(3 + 0x98), "");
  EXPECT_EQ(detok.Push(3 + 0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(detok.Flush(), "");
}

TEST(StreamingDetokenizerTest, InvalidBytesBecomeReplacementCharacters) {
  Tokenizer tok = MustCreate(SpmSpec({{"a", -1}}));
  StreamingDetokenizer detok(tok);
  EXPECT_EQ(detok.Push(3 + 0xFF), "\xEF\xBF\xBD");  // never valid: emitted at once
  EXPECT_EQ(detok.Push(3 + 0xE2), "");              // could still become valid
  EXPECT_EQ(detok.Push(kFirstPiece),
            "\xEF\xBF\xBD"
            "a");  // it did not
  EXPECT_EQ(detok.Push(3 + 0xE2), "");
  EXPECT_EQ(detok.Flush(), "\xEF\xBF\xBD");
}

TEST(StreamingDetokenizerTest, ConcatenationEqualsDecodeOnEveryPrefix) {
  Tokenizer tok = MustCreate(MakeSyntheticSpec(600));
  const std::string text =
      "Once upon a time, \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD the end";
  const auto ids = tok.Encode(text, true, true);
  StreamingDetokenizer detok(tok, /*skip_special=*/true, /*strip_leading_space=*/true);
  std::string streamed;
  for (TokenId id : ids) {
    const std::string out = detok.Push(id);
    EXPECT_EQ(SanitizeUtf8(out), out);  // never a broken character
    streamed += out;
  }
  streamed += detok.Flush();
  EXPECT_EQ(streamed, tok.Decode(ids, true));
  EXPECT_EQ(streamed, text);
}

TEST(StreamingDetokenizerTest, SkipsControlTokensWhenAsked) {
  Tokenizer tok = MustCreate(SpmSpec({{"a", -1}}));
  StreamingDetokenizer skip(tok);
  EXPECT_EQ(skip.Push(1) + skip.Push(kFirstPiece) + skip.Push(2), "a");
  StreamingDetokenizer keep(tok, /*skip_special=*/false);
  EXPECT_EQ(keep.Push(1) + keep.Push(kFirstPiece) + keep.Push(2), "<s>a</s>");
}

TEST(TokenizerTest, ConstMethodsAreSafeFromManyThreads) {
  Tokenizer tok = MustCreate(MakeSyntheticSpec(600));
  const std::string text = "the model said hello to the world \xF0\x9F\x98\x80 12345";
  const auto expected = tok.Encode(text, true, true);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        if (tok.Encode(text, true, true) != expected) ++failures;
        if (tok.Decode(expected, true) != text) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(SyntheticSpecTest, BuildsRequestedSizeAndRoundTrips) {
  const TokenizerSpec spec = MakeSyntheticSpec(512);
  EXPECT_EQ(spec.tokens.size(), 512u);
  Tokenizer tok = MustCreate(spec);
  const auto ids = tok.Encode("hello world, the model", true, true);
  EXPECT_EQ(ids.front(), tok.bos_id());
  EXPECT_EQ(tok.TokenText(ids[1]), "\xE2\x96\x81hello");  // whole words are pieces
  EXPECT_EQ(tok.TokenText(ids[2]), "\xE2\x96\x81world");
  EXPECT_EQ(tok.Decode(ids, true), "hello world, the model");
  EXPECT_TRUE(tok.IsEog(tok.eos_id()));
  EXPECT_EQ(MakeSyntheticSpec(259).tokens.size(), 259u);
}

}  // namespace
}  // namespace kvserve
