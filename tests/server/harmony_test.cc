// HarmonyParser: gpt-oss replies split into reasoning (analysis channel) and content, from
// token ids, however the tokens are split into pushes.
#include "server/harmony.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "tokenizer/test_vocabs.h"
#include "tokenizer/unicode.h"

namespace kvserve {
namespace {

// Byte-level BPE without merges: every byte is a token (id = byte value), so a character such
// as "é" spans two tokens, and harmony's markers follow as control tokens (or, for one test,
// user-defined ones).
Tokenizer HarmonyVocab(TokenType marker_type = TokenType::kControl) {
  std::vector<std::pair<std::string, TokenType>> specials;
  for (const char* m : {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>",
                        "<|call|>", "<|constrain|>"}) {
    specials.emplace_back(m, marker_type);
  }
  specials.emplace_back("<|endoftext|>", TokenType::kControl);
  Result<Tokenizer> tok = Tokenizer::Create(testing::BpeSpec({}, {}, specials));
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return std::move(tok).value();
}

constexpr char kReply[] =
    "<|channel|>analysis<|message|>Thinking: 2+2=4, é 日本.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>The answer is 4 — é.<|return|>";

struct Parsed {
  std::string reasoning;
  std::string content;
  bool deltas_complete_utf8 = true;  // every delta ended on a character boundary

  void Add(const HarmonyDelta& d) {
    deltas_complete_utf8 &= CompleteUtf8Prefix(d.reasoning) == d.reasoning.size() &&
                            CompleteUtf8Prefix(d.content) == d.content.size();
    reasoning += d.reasoning;
    content += d.content;
  }
};

// Pushes `ids` in pieces that end at `cuts` (ascending token counts), then finishes.
Parsed ParseIn(const Tokenizer& tok, const std::vector<TokenId>& ids,
               const std::vector<size_t>& cuts) {
  HarmonyParser parser(tok, *HarmonyTokens::Find(tok));
  Parsed out;
  size_t from = 0;
  for (size_t cut : cuts) {
    out.Add(parser.Push(std::span<const TokenId>(ids).subspan(from, cut - from)));
    from = cut;
  }
  out.Add(parser.Push(std::span<const TokenId>(ids).subspan(from)));
  out.Add(parser.Finish());
  return out;
}

Parsed Parse(const Tokenizer& tok, const std::string& text) {
  return ParseIn(tok, tok.Encode(text, false, /*parse_special=*/true), {});
}

TEST(HarmonyTokens, FoundOnlyInAVocabularyWithTheMarkers) {
  const Tokenizer tok = HarmonyVocab();
  const std::optional<HarmonyTokens> t = HarmonyTokens::Find(tok);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->start, 256);
  EXPECT_EQ(t->constrain, 262);
  EXPECT_TRUE(t->IsMarker(259));
  EXPECT_FALSE(t->IsMarker(263));  // <|endoftext|>
  EXPECT_FALSE(t->IsMarker('a'));
  const Result<Tokenizer> plain = Tokenizer::Create(testing::BpeSpec({}, {}, {}));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(HarmonyTokens::Find(*plain).has_value());
}

TEST(HarmonyParser, AnalysisIsReasoningAndFinalIsContent) {
  const Parsed p = Parse(HarmonyVocab(), kReply);
  EXPECT_EQ(p.reasoning, "Thinking: 2+2=4, é 日本.");
  EXPECT_EQ(p.content, "The answer is 4 — é.");
}

TEST(HarmonyParser, EverySplitOfTheTokensGivesWhatOnePushGives) {
  const Tokenizer tok = HarmonyVocab();
  const std::vector<TokenId> ids = tok.Encode(kReply, false, true);
  const Parsed whole = ParseIn(tok, ids, {});
  for (size_t cut = 0; cut <= ids.size(); ++cut) {
    const Parsed split = ParseIn(tok, ids, {cut});
    EXPECT_EQ(split.reasoning, whole.reasoning) << "cut after " << cut << " tokens";
    EXPECT_EQ(split.content, whole.content) << "cut after " << cut << " tokens";
  }
  std::vector<size_t> every_token;
  for (size_t i = 1; i < ids.size(); ++i) every_token.push_back(i);
  const Parsed streamed = ParseIn(tok, ids, every_token);
  EXPECT_EQ(streamed.reasoning, whole.reasoning);
  EXPECT_EQ(streamed.content, whole.content);
  EXPECT_TRUE(streamed.deltas_complete_utf8);  // "é" and "日本" span several byte tokens
}

TEST(HarmonyParser, StreamsEachChannelAsItComes) {
  const Tokenizer tok = HarmonyVocab();
  HarmonyParser parser(tok, *HarmonyTokens::Find(tok));
  HarmonyDelta d = parser.Push(tok.Encode("<|channel|>analysis<|message|>ab", false, true));
  EXPECT_EQ(d.reasoning, "ab");
  EXPECT_EQ(d.content, "");
  d = parser.Push(tok.Encode("c<|end|><|start|>assistant<|channel|>final", false, true));
  EXPECT_EQ(d.reasoning, "c");
  EXPECT_EQ(d.content, "");  // the header's words are not content
  d = parser.Push(tok.Encode("<|message|>x", false, true));
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "x");
  // "é" is the byte tokens 0xC3 0xA9 (a byte's token id is its value).
  d = parser.Push(std::vector<TokenId>{0xC3});
  EXPECT_EQ(d.content, "");
  d = parser.Push(std::vector<TokenId>{0xA9});
  EXPECT_EQ(d.content, "é");
}

TEST(HarmonyParser, TextWithoutMarkersIsContentAtTheEnd) {
  const Tokenizer tok = HarmonyVocab();
  HarmonyParser parser(tok, *HarmonyTokens::Find(tok));
  // Until a marker comes, the text may be the rest of the first header: it is held.
  HarmonyDelta d = parser.Push(tok.Encode("Hello, world", false, true));
  EXPECT_EQ(d.content, "");
  d = parser.Finish();
  EXPECT_EQ(d.content, "Hello, world");
  EXPECT_EQ(d.reasoning, "");
}

TEST(HarmonyParser, HeaderTextBeforeTheFirstMarkerIsDropped) {
  // A recipient in the header that the prompt's "<|start|>assistant" opened.
  const Parsed p = Parse(HarmonyVocab(),
                         " to=functions.f<|channel|>commentary <|constrain|>json<|message|>"
                         "{\"a\": 1}<|call|>");
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "{\"a\": 1}");
}

TEST(HarmonyParser, BodiesWithoutAnalysisChannelAreContent) {
  EXPECT_EQ(Parse(HarmonyVocab(), "<|message|>plain<|end|>").content, "plain");
  const Parsed p = Parse(HarmonyVocab(),
                         "<|channel|> analysis <|message|>a<|end|><|start|>assistant<|channel|>"
                         "commentary<|message|>b<|end|><|start|>assistant<|channel|>analysis"
                         "<|message|>c<|end|><|start|>assistant<|channel|>final<|message|>d"
                         "<|return|>");
  EXPECT_EQ(p.reasoning, "ac");
  EXPECT_EQ(p.content, "bd");
}

TEST(HarmonyParser, OtherControlTokensAndAnUnfinishedReplyAreHarmless) {
  // Cut by max_tokens inside the analysis; a stray <|endoftext|>; a character left unfinished.
  const Tokenizer tok = HarmonyVocab();
  std::vector<TokenId> ids =
      tok.Encode("<|channel|>analysis<|message|>a<|endoftext|>b", false, true);
  ids.push_back(0xC3);  // the first byte of "é"
  const Parsed p = ParseIn(tok, ids, {});
  EXPECT_EQ(p.reasoning, "ab\xEF\xBF\xBD");  // U+FFFD for the unfinished "é"
  EXPECT_EQ(p.content, "");
}

TEST(HarmonyParser, GivesOutNoMoreThanTheEngineReleased) {
  // The engine's text is "analysis" "abc" "assistant" "final" "xyzSTOP"; with the stop string
  // "STOP" it gives out 11 bytes ("analysisabc") while "a" of "assistant" might start a stop
  // string, and ends after "xyz" (28 bytes).
  const Tokenizer tok = HarmonyVocab();
  HarmonyParser parser(tok, *HarmonyTokens::Find(tok));
  HarmonyDelta d = parser.Push(
      tok.Encode("<|channel|>analysis<|message|>abc<|end|><|start|>assistant<|channel|>final"
                 "<|message|>xyzSTOP",
                 false, true),
      11);
  EXPECT_EQ(d.reasoning, "abc");
  EXPECT_EQ(d.content, "");
  d = parser.Push({}, 26);
  EXPECT_EQ(d.content, "x");
  d = parser.Finish(28);
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "yz");
}

TEST(HarmonyParser, MarkersThatRenderAsTextAreStillMarkers) {
  // A file may give the markers as user-defined tokens, which the detokenizer renders.
  const Parsed p = Parse(HarmonyVocab(TokenType::kUserDefined), kReply);
  EXPECT_EQ(p.reasoning, "Thinking: 2+2=4, é 日本.");
  EXPECT_EQ(p.content, "The answer is 4 — é.");
}

}  // namespace
}  // namespace kvserve
