// uniqueItems beyond a grammar: the tracker's JSON equality, and the processor's masks, which
// refuse exactly the tokens that would complete an item equal to an earlier one.
#include "structured/unique_items.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "sample/token_history.h"
#include "structured/constraint.h"

namespace kvserve::structured {
namespace {

// Feeds `text` with every '[' opening a unique array; the byte offset of the first refused
// byte, or -1.
int FirstDuplicate(std::string_view text, bool unique = true) {
  UniqueItemsTracker t;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!t.Feed(static_cast<uint8_t>(text[i]), unique)) return static_cast<int>(i);
  }
  return -1;
}

TEST(UniqueItemsTracker, ItemsAreComparedAsJsonValues) {
  // Distinct.
  for (const char* ok : {R"(["a","b","ab"])", "[1,10,100]", "[1,-1,1.5]", "[true,false,null]",
                         R"(["1",1])", "[[1,2],[2,1]]", R"([{"a":1},{"a":2},{"b":1}])",
                         R"(["a\"","a\\"])", "[0,[0],[[0]]]", R"([{"a":[1]},{"a":[1,2]}])"}) {
    EXPECT_EQ(FirstDuplicate(ok), -1) << ok;
  }
  // Equal values, however they are spelt: the byte that completes the second is refused.
  EXPECT_EQ(FirstDuplicate(R"(["a","a"])"), 7);
  EXPECT_EQ(FirstDuplicate(R"(["a","\u0061"])"), 12);
  EXPECT_EQ(FirstDuplicate(R"(["\ud83e\udd16","🤖"])"), 21);
  EXPECT_EQ(FirstDuplicate("[1,1.0]"), 6);      // the ']' that ends the number
  EXPECT_EQ(FirstDuplicate("[100, 1e2 ]"), 9);  // the space that ends it
  EXPECT_EQ(FirstDuplicate("[0,-0]"), 5);
  // Past 2^53 an integer is exact and a fraction makes a double, as Python reads JSON: equal
  // only where the double has the integer's exact value.
  EXPECT_EQ(FirstDuplicate("[9007199254740993,9007199254740992]"), -1);
  EXPECT_EQ(FirstDuplicate("[9007199254740993,9007199254740993.0]"), -1);
  EXPECT_EQ(FirstDuplicate("[9007199254740992,9007199254740992.0]"), 36);
  EXPECT_EQ(FirstDuplicate("[12345678901234567890,12345678901234567890]"), 42);
  EXPECT_EQ(FirstDuplicate(R"([{"a":1,"b":[2]},{"b":[2],"a":1}])"), 31);
  EXPECT_EQ(FirstDuplicate("[[1,[2]],[1,[2]]]"), 15);
  EXPECT_EQ(FirstDuplicate("[null,true,null]"), 15);  // the byte after a word ends it
  // Only unique arrays: a plain one, object members, and arrays inside an object member.
  EXPECT_EQ(FirstDuplicate(R"(["a","a"])", false), -1);
  EXPECT_EQ(FirstDuplicate(R"({"a":"a","b":"a"})"), -1);
  EXPECT_EQ(FirstDuplicate(R"([{"k":[1,1]},{"k":[1]}])"), 10);  // the inner array is unique too
}

TEST(UniqueItemsTracker, TrialsSeeItemsThatStartCompleteOrRepeatInsideTheBytes) {
  UniqueItemsTracker t;
  for (char c : std::string(R"({"x":["ab","c",)")) t.Feed(static_cast<uint8_t>(c), c == '[');
  EXPECT_TRUE(t.InUniqueArray());
  EXPECT_FALSE(t.InString());
  EXPECT_TRUE(t.CompletesDuplicate(R"("ab")"));
  EXPECT_TRUE(t.CompletesDuplicate(R"( "c"])"));
  EXPECT_FALSE(t.CompletesDuplicate(R"("a)"));  // not complete yet
  EXPECT_FALSE(t.CompletesDuplicate(R"("abc")"));
  EXPECT_TRUE(t.CompletesDuplicate(R"("d","d")"));  // two new items, equal to each other
  t.Feed('"', false);
  t.Feed('a', false);
  EXPECT_TRUE(t.InString());
  EXPECT_TRUE(t.CompletesDuplicate(R"(b")"));
  EXPECT_TRUE(t.CompletesDuplicate(R"(\u0062"],)"));
  EXPECT_FALSE(t.CompletesDuplicate(R"(bc")"));
  // The trial changed nothing.
  EXPECT_TRUE(t.Feed('b', false));
  EXPECT_TRUE(t.Feed('c', false));
  EXPECT_TRUE(t.Feed('"', false));
  EXPECT_FALSE(t.CompletesDuplicate(R"(,"d"])"));
  EXPECT_TRUE(t.CompletesDuplicate(R"(,"abc"])"));
  // An array item being written ends only where its ']' comes; arrays opened by the trial bytes
  // count as unique.
  for (char c : std::string(R"(,[1,2)")) t.Feed(static_cast<uint8_t>(c), false);
  EXPECT_FALSE(t.InUniqueArray());
  EXPECT_TRUE(t.InItem());
  EXPECT_FALSE(t.CompletesDuplicate("]"));
  EXPECT_TRUE(t.Feed(']', false));
  EXPECT_TRUE(t.CompletesDuplicate(",[1,2]"));
  EXPECT_TRUE(t.CompletesDuplicate(",[1, 2 ]"));
  EXPECT_TRUE(t.CompletesDuplicate(",[[0,0]"));
  EXPECT_FALSE(t.CompletesDuplicate(",[2,1]"));
}

// The processor over a vocabulary of single bytes and a few longer pieces.
class UniqueItemsProcessor : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
    for (const char* p : {R"("a")", R"(",")", R"("],)", R"(["a","a")", "1,", "0]"}) {
      pieces.emplace_back(p);  // 256...
    }
    pieces.emplace_back("1");  // 262: a second token spelling "1" (as byte fallback ones do)
    pieces.emplace_back("");  // end of generation
    vocab_ = TokenVocab::FromPieces(pieces, {static_cast<TokenId>(pieces.size() - 1)}, {});
    compiler_ = std::make_unique<ConstraintCompiler>(vocab_, ConstraintCompilerOptions{});
  }
  TokenId Piece(std::string_view p) const {
    for (TokenId t = 0; t < vocab_->size(); ++t) {
      if (vocab_->piece(t) == p) return t;
    }
    ADD_FAILURE() << "no piece " << p;
    return 0;
  }
  std::shared_ptr<TokenMasker> Compile(const std::string& schema) {
    ConstraintSpec spec;
    spec.kind = ConstraintKind::kJsonSchema;
    spec.text = schema;
    auto m = compiler_->Compile(spec);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? *m : nullptr;
  }
  // Whether the processor allows `text` written one byte per token, then the end.
  bool Allows(const std::shared_ptr<TokenMasker>& m, std::string_view text) {
    ConstraintProcessor p(m);
    TokenHistory h(vocab_->size());
    std::vector<float> logits(static_cast<size_t>(vocab_->size()));
    std::vector<TokenId> ids;
    for (unsigned char c : text) ids.push_back(c);
    ids.push_back(vocab_->size() - 1);
    for (TokenId t : ids) {
      std::fill(logits.begin(), logits.end(), 0.f);
      p.Process(logits, h);
      if (std::isinf(logits[static_cast<size_t>(t)])) return false;
      h.Append(t);
    }
    return true;
  }
  // Whether token `t` is allowed after `text` (one byte per token).
  bool AllowsAfter(const std::shared_ptr<TokenMasker>& m, std::string_view text, TokenId t) {
    ConstraintProcessor p(m);
    TokenHistory h(vocab_->size());
    for (unsigned char c : text) h.Append(c);
    std::vector<float> logits(static_cast<size_t>(vocab_->size()), 0.f);
    p.Process(logits, h);
    return !std::isinf(logits[static_cast<size_t>(t)]);
  }

  std::shared_ptr<const TokenVocab> vocab_;
  std::unique_ptr<ConstraintCompiler> compiler_;
};

TEST_F(UniqueItemsProcessor, StringItemsAnyCountNoneTwice) {
  auto m = Compile(R"({"type":"array","items":{"type":"string"},"uniqueItems":true,
      "minItems":2})");
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->grammar().has_unique_arrays());
  for (const char* ok : {R"(["a","b"])", R"(["a","ab","b","ba"])", R"(["","a"])"}) {
    EXPECT_TRUE(Allows(m, ok)) << ok;
  }
  for (const char* bad : {R"(["a","a"])", R"(["a","b","a"])", R"(["a","\u0061"])", R"(["a"])"}) {
    EXPECT_FALSE(Allows(m, bad)) << bad;
  }
  // Longer tokens: refused where they complete a repeat, allowed where they do not.
  EXPECT_FALSE(AllowsAfter(m, R"(["a",)", Piece(R"("a")")));
  EXPECT_TRUE(AllowsAfter(m, R"(["b",)", Piece(R"("a")")));
  EXPECT_TRUE(AllowsAfter(m, R"(["b","a)", Piece(R"(",")")));
  EXPECT_FALSE(AllowsAfter(m, R"(["a","a)", Piece(R"(",")")));
  EXPECT_FALSE(AllowsAfter(m, "", Piece(R"(["a","a")")));
}

TEST_F(UniqueItemsProcessor, NumbersObjectsAndArraysByValue) {
  auto numbers = Compile(R"({"type":"array","items":{"type":"number"},"uniqueItems":true})");
  ASSERT_NE(numbers, nullptr);
  EXPECT_TRUE(Allows(numbers, "[1,10,0.5,-1]"));
  EXPECT_FALSE(Allows(numbers, "[1,10,1.0]"));
  EXPECT_FALSE(Allows(numbers, "[100,1e2]"));
  // After "[1,1" the number may still grow ("1," is the repeat, "0]" is not).
  EXPECT_FALSE(AllowsAfter(numbers, "[1,", Piece("1,")));
  EXPECT_TRUE(AllowsAfter(numbers, "[1,1", Piece("0]")));
  EXPECT_FALSE(AllowsAfter(numbers, "[10,1", Piece("0]")));
  auto objects = Compile(R"({"type":"array","uniqueItems":true,"items":{"type":"object",
      "properties":{"a":{"type":"integer"},"b":{"type":"array"}}}})");
  ASSERT_NE(objects, nullptr);
  EXPECT_TRUE(Allows(objects, R"([{"a":1},{"a":2},{"b":[1]},{}])"));
  EXPECT_FALSE(Allows(objects, R"([{"a":1,"b":[]},{"b":[],"a":1}])"));
  EXPECT_FALSE(Allows(objects, R"([{},{}])"));
  auto any = Compile(R"({"type":"array","uniqueItems":true})");
  ASSERT_NE(any, nullptr);
  EXPECT_TRUE(Allows(any, R"([1,"1",[1],{"1":1},null])"));
  EXPECT_FALSE(Allows(any, R"([[1,[2]],[1,[2]]])"));
}

TEST_F(UniqueItemsProcessor, NoTokenLeadsWhereOnlyARepeatCanFollow) {
  // One digit: after "[0,1," a "1" could only end as a repeat, so it is refused now.
  auto digits = Compile(R"({"type":"array","items":{"type":"integer","minimum":0,"maximum":9},
      "uniqueItems":true})");
  ASSERT_NE(digits, nullptr);
  EXPECT_FALSE(AllowsAfter(digits, "[0,1,", '1'));
  EXPECT_FALSE(AllowsAfter(digits, "[0,1,", 262));  // every token that spells it
  EXPECT_TRUE(AllowsAfter(digits, "[0,1,", '2'));
  // Unbounded: "1" may still become "10".
  auto numbers = Compile(R"({"type":"array","items":{"type":"integer"},"uniqueItems":true})");
  ASSERT_NE(numbers, nullptr);
  EXPECT_TRUE(AllowsAfter(numbers, "[0,1,", '1'));
  EXPECT_FALSE(AllowsAfter(numbers, "[0,1,1", ','));
  // One character: after ["a"," an "a" could only be closed.
  auto letters = Compile(R"({"type":"array","items":{"type":"string","maxLength":1},
      "uniqueItems":true})");
  ASSERT_NE(letters, nullptr);
  EXPECT_FALSE(AllowsAfter(letters, R"(["a",")", 'a'));
  EXPECT_TRUE(AllowsAfter(letters, R"(["a",")", 'b'));
  EXPECT_FALSE(AllowsAfter(letters, R"(["a",)", Piece(R"("a")")));
}

TEST_F(UniqueItemsProcessor, OnlyTheMarkedArrays) {
  // Items unique in "tags" only; "all" may repeat; a nested unique array inside objects.
  auto m = Compile(R"({"type":"object","properties":{
      "tags":{"type":"array","items":{"type":"string"},"uniqueItems":true},
      "all":{"type":"array","items":{"type":"string"}},
      "rows":{"type":"array","items":{"type":"array","items":{"type":"integer"},
              "uniqueItems":true}}}})");
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(Allows(m, R"({"all":["a","a"],"tags":["a","b"]})"));
  EXPECT_FALSE(Allows(m, R"({"all":["a","a"],"tags":["a","a"]})"));
  EXPECT_TRUE(Allows(m, R"({"rows":[[1,2],[1,2],[2]]})"));
  EXPECT_FALSE(Allows(m, R"({"rows":[[1,2],[2,2]]})"));
  // No jump-forward inside a unique array (the forced bytes may not know about repeats).
  ConstraintProcessor p(m);
  TokenHistory h(vocab_->size());
  for (unsigned char c : std::string(R"({"tags":[)")) h.Append(c);
  EXPECT_EQ(p.ForcedBytes(h, 16), "");
}

TEST_F(UniqueItemsProcessor, FewKnownValuesStayInTheGrammar) {
  auto m = Compile(R"({"type":"array","items":{"enum":["x","y"]},"uniqueItems":true})");
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(m->grammar().has_unique_arrays());
  EXPECT_TRUE(Allows(m, R"(["y","x"])"));
  EXPECT_FALSE(Allows(m, R"(["y","y"])"));
}

}  // namespace
}  // namespace kvserve::structured
