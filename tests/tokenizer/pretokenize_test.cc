#include "tokenizer/pretokenize.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

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
// CJK runs, then digit runs (whole, not by three). No model package ships its tokenizer.json, so
// these follow HF's Split(Isolated) semantics by hand (and PreTokenizerReferenceTest checks its
// splits against HF's tokenizers library); deepseek-v3 is checked against its tokenizer.json in
// tests/tokenizer/conformance.
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

// ---- The pre-tokenizer table: every name llama.cpp accepts, one row per regex list. ----
// Rows without a reference tokenizer package are pinned here by splits derived by hand from the
// row's regexes (HF Split(Isolated) semantics, one regex after another over every piece).

// llama.cpp src/llama-vocab.cpp, llama_vocab::impl::load, BPE branch.
constexpr char kLlamaCppBpeNames[] =
    "default minicpm5 llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 "
    "jina-v5-nano deepseek-llm deepseek-coder deepseek-v3 spark2_5 youtu falcon mpt "
    "starcoder gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum "
    "modern-bert jais-2 jina-v1-en jina-v2-code roberta-bpe refact command-r qwen2 "
    "deepseek-r1-qwen kormo f2llmv2 qwen35 stablelm2 olmo dbrx smaug-bpe poro-chat glm4 "
    "chatglm-bpe viking jais tekken smollm codeshell bloom gpt3-finnish exaone exaone4 "
    "exaone-moe chameleon minerva-7b megrez gpt-4o llama4 kanana2 talkie "
    "granite-embed-multi-97m tiny_aya cohere2moe superbpe trillion granite-docling "
    "bailingmoe bailingmoe2 llada-moe seed-coder hunyuan hunyuan-dense hy_v4 joyai-llm "
    "kimi-k2 ufakzeka grok-2 afmoe laguna minimax-m2 solar-open mellum2";

TEST(PreTokenizerTableTest, AcceptsEveryByteLevelNameLlamaCppAccepts) {
  std::istringstream names(kLlamaCppBpeNames);
  for (std::string pre; names >> pre;) {
    auto config = LookupPreTokenizer(pre, TokenizerModel::kBpe);
    ASSERT_TRUE(config.ok()) << pre << ": " << config.status().ToString();
    EXPECT_TRUE(PreTokenizer::Create(*config).ok()) << pre;
  }
}

TEST(PreTokenizerTableTest, RefusesRawUtf8BpeWithTheReason) {
  for (std::string_view pre : {"gemma4", "granite-embed-multi-311m", "sarvam-moe", "whitespace"}) {
    auto config = LookupPreTokenizer(pre, TokenizerModel::kBpe);
    EXPECT_EQ(config.status().code(), StatusCode::kUnimplemented) << pre;
    EXPECT_THAT(config.status().message(), ::testing::HasSubstr("raw UTF-8")) << pre;
  }
}

TEST(PreTokenizerTableTest, UnknownNameListsTheTable) {
  auto config = LookupPreTokenizer("nope", TokenizerModel::kBpe);
  EXPECT_THAT(config.status().message(), ::testing::HasSubstr("llama-bpe, llama3"));
  EXPECT_THAT(config.status().message(), ::testing::HasSubstr("kimi-k2"));
}

TEST(PreTokenizerTableTest, EveryRowSplitsIntoPiecesThatConcatenateToTheInput) {
  const std::string text =
      "  It's 1234567 \xE4\xB8\xAD\xE6\x96\x87 caf\x65\xCC\x81, \xD0\x9F\xD1\x80\xD0\xB8!!\r\n\n"
      "\t<sentinel:3> IMGIMGABZ  x\xE3\x80\x82y \xF0\x9F\x98\x80   ";
  for (const std::string& pre : SupportedPreNames()) {
    std::string joined;
    for (const auto& p : Split(pre, text)) joined += p;
    EXPECT_EQ(joined, text) << pre;
  }
}

TEST(PreTokenizerTableTest, RegexesFromTokenizerJsonFindTheirRow) {
  // Each name's regexes lead back to a name with the same regexes and flags.
  for (const std::string& pre : SupportedPreNames()) {
    auto config = LookupPreTokenizer(pre, TokenizerModel::kBpe);
    ASSERT_TRUE(config.ok());
    auto back = LookupPreTokenizer(PreNameForConfig(*config), TokenizerModel::kBpe);
    ASSERT_TRUE(back.ok()) << pre;
    EXPECT_EQ(back->regexes, config->regexes) << pre;
    EXPECT_EQ(back->nfc, config->nfc) << pre;
    EXPECT_EQ(back->ignore_merges, config->ignore_merges) << pre;
  }
  // HF's spellings: (?i:...) contractions, possessive quantifiers.
  EXPECT_EQ(
      PreNameForRegex(
          R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
      "llama-bpe");
  EXPECT_EQ(
      PreNameForRegex(
          R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
      "gpt-4o");
  EXPECT_EQ(
      PreNameForRegex(
          R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
      "tekken");
  EXPECT_EQ(
      PreNameForRegex(
          R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)"),
      "bailingmoe");
  EXPECT_EQ(
      PreNameForRegex(
          R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
      "qwen35");
  EXPECT_EQ(
      PreNameForRegex(
          R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"),
      "seed-coder");
  EXPECT_EQ(PreNameForRegex(
                R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"),
            "gpt2");
}

TEST(PreTokenizerTableTest, TokenizerJsonFlagsPickTheRow) {
  auto llama3 = LookupPreTokenizer("llama-bpe", TokenizerModel::kBpe);
  ASSERT_TRUE(llama3.ok());
  PreTokenizerConfig json = *llama3;
  EXPECT_EQ(PreNameForConfig(json), "llama-bpe");
  json.ignore_merges = false;  // cl100k as tiktoken exports it
  EXPECT_EQ(PreNameForConfig(json), "dbrx");
  json.nfc = true;  // no row has these regexes with NFC: the first row with them
  EXPECT_EQ(PreNameForConfig(json), "llama-bpe");
  auto qwen2 = LookupPreTokenizer("qwen2", TokenizerModel::kBpe);
  ASSERT_TRUE(qwen2.ok());
  json = *qwen2;
  EXPECT_EQ(PreNameForConfig(json), "qwen2");
  json.nfc = false;
  EXPECT_EQ(PreNameForConfig(json), "stablelm2");
}

TEST(PreTokenizerTableTest, FlagsFollowLlamaCpp) {
  for (std::string_view pre : {"llama-bpe", "llama3", "minicpm5", "youtu", "tekken",
                               "granite-embed-multi-97m", "pixtral"}) {
    EXPECT_TRUE(LookupPreTokenizer(pre, TokenizerModel::kBpe)->ignore_merges) << pre;
  }
  for (std::string_view pre : {"dbrx", "gpt-4o", "qwen2", "stablelm2", "deepseek-v3", "gpt-2"}) {
    EXPECT_FALSE(LookupPreTokenizer(pre, TokenizerModel::kBpe)->ignore_merges) << pre;
  }
  EXPECT_TRUE(LookupPreTokenizer("qwen2", TokenizerModel::kBpe)->nfc);
  EXPECT_FALSE(LookupPreTokenizer("grok-2", TokenizerModel::kBpe)->nfc);
}

// default (also a missing pre): punctuation runs, GPT-2, digit runs, then threes from the left.
TEST(PreTokenizerTableTest, DefaultIsolatesPunctuationThenDigitsByThree) {
  EXPECT_THAT(Split("default", "Hello, world (x) 12345!"),
              ElementsAre("Hello", ",", " world", " ", "(", "x", ")", " ", "123", "45", "!"));
  EXPECT_EQ(Split("", "a (b"), Split("default", "a (b"));
}

// gpt-2, phi-2, mpt, olmo, jais, trillion, jina-*, ...: GPT-2's regex, lower-case contractions.
TEST(PreTokenizerTableTest, Gpt2KeepsLeadingSpacesAndLowerCaseContractions) {
  EXPECT_THAT(Split("gpt-2", "I'm  here\n\n 2024's"),
              ElementsAre("I", "'m", " ", " here", "\n\n", " 2024", "'s"));
  EXPECT_THAT(Split("phi-2", "DON'T"), ElementsAre("DON", "'", "T"));
  EXPECT_THAT(Split("olmo", "\xC3\xA9t\xC3\xA9 42x"), ElementsAre("\xC3\xA9t\xC3\xA9", " 42", "x"));
}

// starcoder, refact, command-r, smollm, codeshell, exaone, minerva-7b, mellum2: digits alone.
TEST(PreTokenizerTableTest, StarcoderIsolatesEveryDigit) {
  EXPECT_THAT(Split("command-r", "abc 123 x1"), ElementsAre("abc", " ", "1", "2", "3", " x", "1"));
}

// falcon: punctuation runs (with `), GPT-2, then threes of ASCII digits.
TEST(PreTokenizerTableTest, FalconIsolatesPunctuationAndAsciiDigitTriples) {
  EXPECT_THAT(Split("falcon", "a+b=12345, ok"),
              ElementsAre("a", "+", "b", "=", "123", "45", ",", " ok"));
  EXPECT_THAT(Split("falcon", "`x`"), ElementsAre("`", "x", "`"));
}

// dbrx, smaug-bpe, chatglm-bpe, glm4: Llama 3's regex (cl100k) without ignore_merges.
TEST(PreTokenizerTableTest, DbrxSplitsLikeLlama3) {
  EXPECT_THAT(Split("chatglm-bpe", "I'M 1234"), ElementsAre("I", "'M", " ", "123", "4"));
  EXPECT_EQ(Split("dbrx", "x.\n\n  y's"), Split("llama-bpe", "x.\n\n  y's"));
}

// jais-2: Llama 3's regex, whitespace runs cut into 512, 256, ..., 4, 2 or 1.
TEST(PreTokenizerTableTest, Jais2CutsWhitespaceRunsIntoPowersOfTwo) {
  EXPECT_THAT(Split("jais-2", "a" + std::string(10, ' ') + "b"),
              ElementsAre("a", std::string(8, ' '), " ", " b"));
  EXPECT_THAT(Split("jais-2", "x   "), ElementsAre("x", "  ", " "));
}

// stablelm2, hunyuan, solar-open, grok-2, deepseek-r1-qwen, kormo, f2llmv2, megrez: Qwen2's
// regex without NFC.
TEST(PreTokenizerTableTest, Stablelm2SplitsDigitsAloneWithoutNfc) {
  EXPECT_THAT(Split("grok-2", "ab12 it's"), ElementsAre("ab", "1", "2", " it", "'s"));
  EXPECT_FALSE(LookupPreTokenizer("stablelm2", TokenizerModel::kBpe)->nfc);
}

// qwen35: letters keep their combining marks.
TEST(PreTokenizerTableTest, Qwen35KeepsCombiningMarksWithLetters) {
  EXPECT_THAT(Split("qwen35", "cafe\xCC\x81!"), ElementsAre("cafe\xCC\x81", "!"));
  EXPECT_THAT(Split("qwen2", "cafe\xCC\x81!"), ElementsAre("cafe", "\xCC\x81!"));
}

// ufakzeka: Qwen2's regex without contractions (Turkish suffixes stay on the apostrophe).
TEST(PreTokenizerTableTest, UfakzekaKeepsApostropheSuffixes) {
  EXPECT_THAT(Split("ufakzeka", "Ankara'dan we'llx"), ElementsAre("Ankara", "'dan", " we", "'llx"));
  EXPECT_THAT(Split("grok-2", "Ankara'dan"), ElementsAre("Ankara", "'d", "an"));
}

// laguna: lines first, then Qwen2's regex inside each.
TEST(PreTokenizerTableTest, LagunaSplitsLinesFirst) {
  EXPECT_THAT(Split("laguna", "a.\n\nb c"), ElementsAre("a", ".", "\n\n", "b", " c"));
}

// seed-coder: single digits; punctuation runs do not take the newlines after them.
TEST(PreTokenizerTableTest, SeedCoderLeavesNewlinesOffPunctuation) {
  EXPECT_THAT(Split("seed-coder", "x.\n\ny 42"), ElementsAre("x", ".", "\n\n", "y", " ", "4", "2"));
}

// minicpm5: digits by three first, then Llama 3's regex with whole digit runs.
TEST(PreTokenizerTableTest, Minicpm5GroupsDigitsByThreeFirst) {
  EXPECT_THAT(Split("minicpm5", "x 1234567"), ElementsAre("x", " ", "123", "456", "7"));
}

// exaone-moe: a word run may span single spaces; one newline at a time.
TEST(PreTokenizerTableTest, ExaoneMoeJoinsWordsAcrossSingleSpaces) {
  EXPECT_THAT(Split("exaone-moe", "Hello world foo"), ElementsAre("Hello world foo"));
  EXPECT_THAT(Split("exaone-moe", "Hello  world"), ElementsAre("Hello", " ", " world"));
  EXPECT_THAT(Split("exaone-moe", "a.\n\nb"), ElementsAre("a", ".\n", "\n", "b"));
  EXPECT_THAT(Split("exaone-moe", "x 12"), ElementsAre("x", " ", "1", "2"));
}

// bailingmoe, bailingmoe2, llada-moe: Qwen2-like, any-case contractions, single digits.
TEST(PreTokenizerTableTest, BailingMoeSplitsContractionsAndDigits) {
  EXPECT_THAT(Split("bailingmoe", "I'M 12\n\nx"),
              ElementsAre("I", "'M", " ", "1", "2", "\n\n", "x"));
}

// gpt-4o, llama4, kanana2, talkie, minimax-m2 (o200k): words split at case changes, the
// contraction stays on the word, digits by three, "/" joins a punctuation run's newlines.
TEST(PreTokenizerTableTest, Gpt4oSplitsAtCaseChanges) {
  EXPECT_THAT(Split("gpt-4o", "HelloWorld JSONParser ABC"),
              ElementsAre("Hello", "World", " JSONParser", " ABC"));
  EXPECT_THAT(Split("gpt-4o", "don't I'M 12345"), ElementsAre("don't", " I'M", " ", "123", "45"));
  EXPECT_THAT(Split("gpt-4o", " /path\n"), ElementsAre(" /", "path", "\n"));
  // Non-ASCII case classes as HF has them (llama.cpp's approximation joins "aΒ").
  EXPECT_THAT(Split("llama4",
                    "a\xCE\x92 Stra\xC3\x9F"
                    "e"),
              ElementsAre("a", "\xCE\x92",
                          " Stra\xC3\x9F"
                          "e"));
}

// tiny_aya, cohere2moe: digit runs cut into threes from the right, then o200k.
TEST(PreTokenizerTableTest, TinyAyaGroupsDigitsFromTheRight) {
  EXPECT_THAT(Split("tiny_aya", "1234567 x"), ElementsAre("1", "234", "567", " x"));
  EXPECT_THAT(Split("tiny_aya", "1234abc"), ElementsAre("123", "4", "abc"));
}

// tekken: o200k's case-split words without contractions, single digits.
TEST(PreTokenizerTableTest, TekkenSplitsAtCaseChangesAndDigits) {
  EXPECT_THAT(Split("tekken", "HelloWorld 12"), ElementsAre("Hello", "World", " ", "1", "2"));
  EXPECT_THAT(Split("tekken", "don't I'M"), ElementsAre("don", "'t", " I", "'M"));
}

// youtu: Korean, CJK punctuation, bopomofo and CJK/kana runs first, then case-split words.
TEST(PreTokenizerTableTest, YoutuIsolatesCjkRunsFirst) {
  EXPECT_THAT(Split("youtu",
                    "\xEC\x95\x88\xEB\x85\x95\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xEF\xBC\x81"
                    "abc"),
              ElementsAre("\xEC\x95\x88\xEB\x85\x95", "\xEF\xBC\x8C", "\xE4\xB8\x96\xE7\x95\x8C",
                          "\xEF\xBC\x81", "abc"));
  EXPECT_THAT(Split("youtu", "It's 42"), ElementsAre("It's", " ", "4", "2"));
}

// kimi-k2: Han runs alone; other letters as o200k's words, never taking a Han character.
TEST(PreTokenizerTableTest, KimiK2IsolatesHanRuns) {
  // "你好world 12345", "a中", "日本語のテキスト"; \p{Han} is the script (sc), as tiktoken reads it.
  EXPECT_THAT(Split("kimi-k2", "\xE4\xBD\xA0\xE5\xA5\xBDworld 12345"),
              ElementsAre("\xE4\xBD\xA0\xE5\xA5\xBD", "world", " ", "123", "45"));
  EXPECT_THAT(Split("kimi-k2", "a\xE4\xB8\xAD"), ElementsAre("a", "\xE4\xB8\xAD"));
  // "中、文": the ideographic comma is not of the Han script (only its Script_Extensions).
  EXPECT_THAT(Split("kimi-k2", "\xE4\xB8\xAD\xE3\x80\x81\xE6\x96\x87"),
              ElementsAre("\xE4\xB8\xAD", "\xE3\x80\x81", "\xE6\x96\x87"));
  EXPECT_THAT(Split("kimi-k2",
                    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86"
                    "\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88"),
              ElementsAre("\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
                          "\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88"));
}

// bloom, poro-chat, gpt3-finnish: runs up to whitespace or sentence punctuation; viking adds
// single digits.
TEST(PreTokenizerTableTest, BloomSplitsAtWhitespaceAndSentencePunctuation) {
  EXPECT_THAT(Split("bloom", "Hello, world! How?"),
              ElementsAre("Hello", ",", " world", "!", " How", "?"));
  EXPECT_THAT(Split("poro-chat", "a (b) abc123\n\nc"),
              ElementsAre("a", " (", "b", ")", " abc123", "\n\n", "c"));
  EXPECT_THAT(Split("viking", "abc123 x"), ElementsAre("abc", "1", "2", "3", " x"));
}

// chameleon: sentinel and image tokens, tabs/newlines and runs of 4 or 2 spaces, digits,
// single punctuation characters, then GPT-2.
TEST(PreTokenizerTableTest, ChameleonIsolatesDigitsAndEachPunctuationCharacter) {
  EXPECT_THAT(Split("chameleon", "Hi, 42!"), ElementsAre("Hi", ",", " ", "4", "2", "!"));
  EXPECT_THAT(Split("chameleon", "a    b\tc"), ElementsAre("a", "    ", "b", "\t", "c"));
  EXPECT_THAT(Split("chameleon", "<sentinel:7>"), ElementsAre("<", "sentinel", ":", "7", ">"));
  EXPECT_THAT(Split("chameleon", "xIMGIMGABZy"), ElementsAre("x", "IMGIMGABZ", "y"));
}

// superbpe: no word splitting at all; digit runs alone, cut into threes from the right.
TEST(PreTokenizerTableTest, SuperBpeSplitsOnlyDigits) {
  EXPECT_THAT(Split("superbpe", "abc 1234567 de"), ElementsAre("abc ", "1", "234", "567", " de"));
  EXPECT_THAT(Split("superbpe", "hello world"), ElementsAre("hello world"));
}

// deepseek-coder: newlines, letter runs, punctuation runs, CJK, then single digits.
TEST(PreTokenizerTableTest, DeepseekCoderSplitsDigitsAlone) {
  EXPECT_THAT(
      Split("deepseek-coder", "Hello, world 123\n\xE4\xB8\xAD\xE6\x96\x87"),
      ElementsAre("Hello", ",", " world", " ", "1", "2", "3", "\n", "\xE4\xB8\xAD\xE6\x96\x87"));
}

// spark2_5: DeepSeek-V3's, punctuation runs without newlines, newlines one by one, then
// single digits.
TEST(PreTokenizerTableTest, Spark25SplitsNewlinesAndDigitsOneByOne) {
  EXPECT_THAT(Split("spark2_5", "ab 12345\n\nx."),
              ElementsAre("ab", " ", "1", "2", "3", "4", "5", "\n", "\n", "x", "."));
}

// afmoe: digit runs as a leading 1-2 then threes, CJK/SE-Asian runs, then DeepSeek-V3's.
TEST(PreTokenizerTableTest, AfmoeGroupsDigitsFromTheRightAndIsolatesCjk) {
  EXPECT_THAT(Split("afmoe",
                    "\xE4\xB8\xAD\xE6\x96\x87"
                    "abc 1234"),
              ElementsAre("\xE4\xB8\xAD\xE6\x96\x87", "abc", " ", "1", "234"));
  EXPECT_THAT(Split("afmoe", "ab12"), ElementsAre("ab", "12"));
}

// tests/data/tokenizer/pretokenize_reference.json: how HF's tokenizers library (Rust, Oniguruma)
// splits the conformance corpus with each row's regexes as tokenizer.json spells them, written by
// tests/tokenizer/conformance/make_pretokenize_reference.mjs. Every row but afmoe (hand-coded
// digits in llama.cpp, no regex to run) must split every string the same way here.
TEST(PreTokenizerReferenceTest, EveryRowSplitsLikeHfTokenizers) {
  const char* path = "tests/data/tokenizer/pretokenize_reference.json";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path << " (tests run from the repository root)";
  const nlohmann::json ref = nlohmann::json::parse(in);
  const auto texts = ref.at("texts").get<std::vector<std::string>>();
  std::vector<std::string> checked;
  for (const nlohmann::json& row : ref.at("rows")) {
    const std::string pre = row.at("pre").get<std::string>();
    auto config = LookupPreTokenizer(pre, TokenizerModel::kBpe);
    ASSERT_TRUE(config.ok()) << pre;
    auto pt = PreTokenizer::Create(*config);
    ASSERT_TRUE(pt.ok()) << pre;
    const auto& expected = row.at("pieces");
    ASSERT_EQ(expected.size(), texts.size()) << pre;
    int mismatches = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      std::vector<size_t> got;
      for (std::string_view p : pt->Split(texts[i])) got.push_back(p.size());
      const auto want = expected[i].get<std::vector<size_t>>();
      if (got != want && ++mismatches <= 3) {
        ADD_FAILURE() << pre << ": " << nlohmann::json(texts[i]).dump() << "\n  HF     "
                      << nlohmann::json(want).dump() << "\n  kvserve "
                      << nlohmann::json(got).dump();
      }
    }
    EXPECT_EQ(mismatches, 0) << pre << " of " << texts.size();
    checked.push_back(pre);
  }
  EXPECT_EQ(checked.size(), 30u);
}

TEST(PreTokenizerTest, UnknownPreIsUnimplemented) {
  EXPECT_EQ(LookupPreTokenizer("nope", TokenizerModel::kBpe).status().code(),
            StatusCode::kUnimplemented);
  EXPECT_TRUE(LookupPreTokenizer("anything", TokenizerModel::kSpm).ok());
}

}  // namespace
}  // namespace kvserve
