#include "structured/grammar.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "structured/matcher.h"
#include "structured/token_masker.h"

namespace kvserve::structured {
namespace {

TEST(GrammarTest, LiteralsAlternativesAndRepetition) {
  GrammarBuilder b;
  // root ::= "a" ("b" | "cd")* "e"?
  const int bc = b.Alternatives("bc", {b.Literal("b"), b.Literal("cd")});
  const int star = b.Star("bc*", {GrammarBuilder::Ref(bc)});
  const int opt_e = b.Optional("e?", b.Literal("e"));
  const int root = b.Alternatives(
      "root", {{b.Literal("a")[0], GrammarBuilder::Ref(star), GrammarBuilder::Ref(opt_e)}});
  auto g = b.Build(root);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (const char* ok : {"a", "ae", "abcdb", "acdbcde"}) EXPECT_TRUE(FullMatch(*g, ok)) << ok;
  for (const char* bad : {"", "b", "ac", "aee", "abx"}) EXPECT_FALSE(FullMatch(*g, bad)) << bad;
  EXPECT_TRUE(PrefixMatch(*g, "ac"));
  EXPECT_FALSE(PrefixMatch(*g, "aex"));
}

TEST(GrammarTest, RightRecursionKeepsAConstantNumberOfStacks) {
  GrammarBuilder b;
  const int digits = b.Star("digits", {b.Bytes(ByteSet::Of('0', '9'))});
  auto g = b.Build(digits);
  ASSERT_TRUE(g.ok());
  StackArena arena(&*g);
  State s = arena.Initial();
  ASSERT_TRUE(arena.AdvanceBytes(&s, "12"));
  const int64_t nodes = arena.num_nodes();
  ASSERT_TRUE(arena.AdvanceBytes(&s, std::string(10000, '7')));
  EXPECT_EQ(arena.num_nodes(), nodes);  // the same stacks, whatever the length
  EXPECT_TRUE(StackArena::CanEnd(s));
}

TEST(GrammarTest, NestedRecursionMatchesBalancedBrackets) {
  GrammarBuilder b;
  // root ::= "[" root* "]"
  const int root = b.AddRule("root");
  const int items = b.Star("items", {GrammarBuilder::Ref(root)});
  b.AddAlternative(root, {b.Literal("[")[0], GrammarBuilder::Ref(items), b.Literal("]")[0]});
  auto g = b.Build(root);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(FullMatch(*g, "[[][[]]]"));
  EXPECT_FALSE(FullMatch(*g, "[[]"));
  EXPECT_FALSE(FullMatch(*g, "[]]"));
}

TEST(GrammarTest, RefusesLeftRecursionEmptyRulesAndEndlessRules) {
  {
    GrammarBuilder b;
    const int r = b.AddRule("expr");
    const int opt = b.Optional("ws", b.Literal(" "));
    b.AddAlternative(r, {GrammarBuilder::Ref(opt), GrammarBuilder::Ref(r), b.Literal("+")[0]});
    b.AddAlternative(r, b.Literal("1"));
    auto g = b.Build(r);
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().ToString().find("left-recursive"), std::string::npos)
        << g.status().ToString();
  }
  {
    GrammarBuilder b;
    const int r = b.AddRule("undefined");
    EXPECT_NE(b.Build(r).status().ToString().find("matches nothing"), std::string::npos);
  }
  {
    GrammarBuilder b;
    const int r = b.AddRule("forever");
    b.AddAlternative(r, {b.Literal("a")[0], GrammarBuilder::Ref(r)});
    EXPECT_NE(b.Build(r).status().ToString().find("never finish"), std::string::npos);
  }
}

TEST(GrammarTest, RepeatCountsExactly) {
  GrammarBuilder b;
  const int r = b.Repeat("x{2,4}", b.Literal("x"), 2, 4);
  auto g = b.Build(r);
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(FullMatch(*g, "x"));
  EXPECT_TRUE(FullMatch(*g, "xx"));
  EXPECT_TRUE(FullMatch(*g, "xxxx"));
  EXPECT_FALSE(FullMatch(*g, "xxxxx"));
  GrammarBuilder huge;
  const int h = huge.Repeat("x{0,99999999}", huge.Literal("x"), 0, 99999999);
  EXPECT_NE(huge.Build(h).status().ToString().find("too large"), std::string::npos);
}

TEST(GrammarTest, CodepointClassesAreUtf8) {
  GrammarBuilder b;
  // Anything but '"' and '\\', then 'é' .. 'ü', then a CJK or emoji code point.
  const int not_quote = b.CodepointClass({{'"', '"'}, {'\\', '\\'}}, true);
  const int latin = b.CodepointClass({{0xE9, 0xFC}}, false);
  const int wide = b.CodepointClass({{0x4E00, 0x9FFF}, {0x1F600, 0x1F64F}}, false);
  const int root = b.Alternatives(
      "root",
      {{GrammarBuilder::Ref(not_quote), GrammarBuilder::Ref(latin), GrammarBuilder::Ref(wide)}});
  auto g = b.Build(root);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(FullMatch(*g, "aé中"));
  EXPECT_TRUE(FullMatch(*g, "\xF0\x9F\x98\x80\xC3\xBC\xF0\x9F\x98\x81"));  // 😀ü😁
  EXPECT_FALSE(FullMatch(*g, "\"é中"));
  EXPECT_FALSE(FullMatch(*g, "aa中"));
  EXPECT_FALSE(FullMatch(*g, "aé\xED\xA0\x80"));  // a surrogate is never a code point
  EXPECT_FALSE(PrefixMatch(*g, "\xC3\x28"));      // a lead byte must be followed by a continuation
}

TEST(TokenMaskerTest, MasksFollowTheGrammarAndEogOnlyWhereItMayEnd) {
  GrammarBuilder b;
  // root ::= "ab" | "abc" "d"*
  const int ds = b.Star("d*", b.Literal("d"));
  Sequence abc = b.Literal("abc");
  abc.push_back(GrammarBuilder::Ref(ds));
  const int root = b.Alternatives("root", {b.Literal("ab"), abc});
  auto g = b.Build(root);
  ASSERT_TRUE(g.ok());
  // 0 "a", 1 "ab", 2 "b", 3 "c", 4 "cd", 5 "dd", 6 "x", 7 eos, 8 special, 9 <0x61> ("a" bytes)
  auto vocab =
      TokenVocab::FromPieces({"a", "ab", "b", "c", "cd", "dd", "x", "", "<|s|>", "a"}, {7}, {8});
  TokenMasker m(std::move(*g), vocab);
  auto allowed = [&](const State& s) {
    const TokenBits bits = m.Allowed(s);
    std::vector<int> ids;
    for (int t = 0; t < vocab->size(); ++t) {
      if ((bits[static_cast<size_t>(t) / 64] >> (t % 64)) & 1) ids.push_back(t);
    }
    return ids;
  };
  State s = m.Initial();
  EXPECT_EQ(allowed(s), (std::vector<int>{0, 1, 9}));
  ASSERT_TRUE(m.Accept(&s, 0));
  EXPECT_EQ(allowed(s), (std::vector<int>{2}));
  ASSERT_TRUE(m.Accept(&s, 2));
  EXPECT_EQ(allowed(s), (std::vector<int>{3, 4, 7}));  // "ab" may end; "c" and "cd" go on
  ASSERT_TRUE(m.Accept(&s, 4));
  EXPECT_EQ(allowed(s), (std::vector<int>{5, 7}));
  EXPECT_FALSE(m.Accept(&s, 6));
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(allowed(s), (std::vector<int>{7}));  // a dead state can only end
  State early = m.Initial();
  EXPECT_FALSE(m.Accept(&early, 7));  // ending before the grammar may end is refused
  EXPECT_TRUE(early.empty());

  std::vector<float> logits(10, 1.0f);
  State t = m.Initial();
  m.Apply(t, logits);
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(std::isinf(logits[static_cast<size_t>(i)]), !(i == 0 || i == 1 || i == 9)) << i;
  const MaskStats st = m.stats();
  EXPECT_GT(st.lookups, st.misses);  // the initial state's mask came from the cache
}

TEST(TokenMaskerTest, ForcedBytesStopAtAChoice) {
  GrammarBuilder b;
  // root ::= "{\"name\":" ( "1" | "2" )
  Sequence s = b.Literal("{\"name\":");
  s.push_back(GrammarBuilder::Ref(b.Alternatives("digit", {b.Literal("1"), b.Literal("2")})));
  auto g = b.Build(b.Alternatives("root", {s}));
  ASSERT_TRUE(g.ok());
  TokenMasker m(std::move(*g), TokenVocab::FromPieces({"{", "1"}, {}, {}));
  EXPECT_EQ(m.ForcedBytes(m.Initial()), "{\"name\":");
}

}  // namespace
}  // namespace kvserve::structured
