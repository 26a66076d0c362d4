#include "structured/grammar.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

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

// A member set of literal members: members[i] matches names[i]; the separator is ",".
Symbol LiteralSet(GrammarBuilder* b, const std::vector<std::string>& names, MemberSetSpec spec) {
  for (const std::string& name : names) {
    spec.members.push_back(b->Alternatives(name, {b->Literal(name)}));
  }
  spec.separator = b->Literal(",");
  return b->Set("set", std::move(spec));
}

TEST(GrammarTest, MemberSetTakesMembersInAnyOrderEachOnce) {
  GrammarBuilder b;
  // root ::= "{" set{a b! c} "}": b required, none twice, "," between two.
  MemberSetSpec spec;
  spec.required = 0b010;
  const Symbol set = LiteralSet(&b, {"a", "b", "c"}, spec);
  auto g = b.Build(b.Alternatives("root", {{b.Literal("{")[0], set, b.Literal("}")[0]}}));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (const char* ok : {"{b}", "{a,b}", "{b,a}", "{c,b,a}", "{b,c,a}", "{a,c,b}"}) {
    EXPECT_TRUE(FullMatch(*g, ok)) << ok;
  }
  for (const char* bad : {"{}", "{a}", "{a,c}", "{b,b}", "{a,b,a}", "{ab}", "{,b}", "{b,}"}) {
    EXPECT_FALSE(FullMatch(*g, bad)) << bad;
  }
  EXPECT_TRUE(PrefixMatch(*g, "{a,c,"));   // b may still come
  EXPECT_FALSE(PrefixMatch(*g, "{a,c}"));  // but not the end without it
  EXPECT_FALSE(PrefixMatch(*g, "{c,a,c"));
  EXPECT_FALSE(PrefixMatch(*g, "{c,a}"));
  EXPECT_NE(g->ToString().find("\"{\" set{a#0 b#1! c#2 / \",\" / 0..*} \"}\""), std::string::npos)
      << g->ToString();
}

TEST(GrammarTest, MemberSetExtrasComeAnywhereWithinTheCounts) {
  GrammarBuilder b;
  // set{a b x*} with 2..3 members, extras x included.
  MemberSetSpec spec;
  spec.extra = b.Alternatives("x", {b.Literal("x")});
  spec.min_count = 2;
  spec.max_count = 3;
  auto g = b.Build(b.Alternatives("root", {{LiteralSet(&b, {"a", "b"}, spec)}}));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (const char* ok : {"a,b", "x,x", "x,a", "a,x,b", "x,x,x", "b,x,a"}) {
    EXPECT_TRUE(FullMatch(*g, ok)) << ok;
  }
  for (const char* bad : {"", "a", "x", "x,x,x,x", "a,x,b,x", "a,a"}) {
    EXPECT_FALSE(FullMatch(*g, bad)) << bad;
  }
  EXPECT_FALSE(PrefixMatch(*g, "x,x,x,"));  // no fourth member
}

TEST(GrammarTest, MemberSetExtrasWaitForTheRequiredMembers) {
  GrammarBuilder b;
  // set{a b! x*}: x only once b is written; a any time.
  MemberSetSpec spec;
  spec.extra = b.Alternatives("x", {b.Literal("x")});
  spec.required = 0b10;
  auto g = b.Build(b.Alternatives("root", {{LiteralSet(&b, {"a", "b"}, spec)}}));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (const char* ok : {"b", "a,b", "b,x", "a,b,x,x", "b,x,a"}) {
    EXPECT_TRUE(FullMatch(*g, ok)) << ok;
  }
  for (const char* bad : {"x", "x,b", "a,x", "a,x,b"}) EXPECT_FALSE(FullMatch(*g, bad)) << bad;
  EXPECT_FALSE(PrefixMatch(*g, "a,x"));
}

TEST(GrammarTest, MemberSetNeverOffersAMemberAfterWhichItCannotFinish) {
  GrammarBuilder b;
  // set{a b! c} with at most two members: once a or c is taken, only b may follow.
  MemberSetSpec spec;
  spec.required = 0b010;
  spec.max_count = 2;
  auto g = b.Build(b.Alternatives("root", {{LiteralSet(&b, {"a", "b", "c"}, spec)}}));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (const char* ok : {"b", "a,b", "c,b", "b,c"}) EXPECT_TRUE(FullMatch(*g, ok)) << ok;
  EXPECT_FALSE(PrefixMatch(*g, "a,c"));
  EXPECT_FALSE(PrefixMatch(*g, "b,a,"));
}

TEST(GrammarTest, MemberSetIsNullableOnlyWithoutRequiredMembersOrMinimum) {
  for (const auto& [required, min, nullable] :
       {std::tuple{uint64_t{0}, int64_t{0}, true}, std::tuple{uint64_t{1}, int64_t{0}, false},
        std::tuple{uint64_t{0}, int64_t{1}, false}}) {
    GrammarBuilder b;
    MemberSetSpec spec;
    spec.required = required;
    spec.min_count = min;
    const int root = b.Alternatives("root", {{LiteralSet(&b, {"a", "b"}, spec)}});
    auto g = b.Build(root);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ(g->nullable(root), nullable);
    EXPECT_EQ(FullMatch(*g, ""), nullable);
  }
}

TEST(GrammarTest, MemberSetMayRecurseThroughAnOptionalMember) {
  GrammarBuilder b;
  // node ::= "[" set{"x" node} "]": an optional member may be the set's own rule.
  const int node = b.AddRule("node");
  MemberSetSpec spec;
  spec.members = {b.Alternatives("x", {b.Literal("x")}), node};
  spec.separator = b.Literal(",");
  b.AddAlternative(node, {b.Literal("[")[0], b.Set("set", spec), b.Literal("]")[0]});
  auto g = b.Build(node);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (const char* ok : {"[]", "[x]", "[[],x]", "[x,[x,[]]]"}) EXPECT_TRUE(FullMatch(*g, ok)) << ok;
  for (const char* bad : {"[x,x]", "[[],[]]", "[x,]"}) EXPECT_FALSE(FullMatch(*g, bad)) << bad;
  // Required, the same member could never finish.
  spec.required = 0b10;
  GrammarBuilder c;
  const int forever = c.AddRule("forever");
  spec.members = {c.Alternatives("x", {c.Literal("x")}), forever};
  spec.separator = c.Literal(",");
  c.AddAlternative(forever, {c.Literal("[")[0], c.Set("set", spec), c.Literal("]")[0]});
  EXPECT_NE(c.Build(forever).status().ToString().find("never finish"), std::string::npos);
}

TEST(GrammarTest, RefusesMemberSetsThatCannotBeWalkedOrMet) {
  const auto error = [](const std::function<Symbol(GrammarBuilder*)>& make) {
    GrammarBuilder b;
    const int root = b.Alternatives("root", {{make(&b)}});
    return b.Build(root).status().ToString();
  };
  // A member that can match nothing.
  EXPECT_NE(error([](GrammarBuilder* b) {
              MemberSetSpec spec;
              spec.members = {b->Optional("maybe", b->Literal("m"))};
              return b->Set("set", spec);
            }).find("can match nothing"),
            std::string::npos);
  // More members than the mask holds.
  EXPECT_NE(error([](GrammarBuilder* b) {
              std::vector<std::string> names;
              for (int i = 0; i <= MemberSetSpec::kMaxMembers; ++i) names.push_back("m");
              return LiteralSet(b, names, {});
            }).find("over 64 members"),
            std::string::npos);
  // Two required members with at most one member, and a minimum no member list reaches.
  for (auto [required, min, max] : {std::tuple{uint64_t{3}, int64_t{0}, int64_t{1}},
                                    std::tuple{uint64_t{0}, int64_t{3}, int64_t{-1}}}) {
    MemberSetSpec spec;
    spec.required = required;
    spec.min_count = min;
    spec.max_count = max;
    EXPECT_NE(error([&spec](GrammarBuilder* b) {
                return LiteralSet(b, {"a", "b"}, spec);
              }).find("no list of its members"),
              std::string::npos);
  }
  // Left recursion through a set: m ::= root "a" | "b", root ::= set{m}.
  GrammarBuilder b;
  const int root = b.AddRule("root");
  const int m = b.AddRule("m");
  b.AddAlternative(m, {GrammarBuilder::Ref(root), b.Literal("a")[0]});
  b.AddAlternative(m, b.Literal("b"));
  MemberSetSpec spec;
  spec.members = {m};
  b.AddAlternative(root, {b.Set("set", spec)});
  EXPECT_NE(b.Build(root).status().ToString().find("left-recursive"), std::string::npos);
}

TEST(GrammarTest, MemberSetStacksStayBoundedOverManyOrders) {
  GrammarBuilder b;
  // 20 optional members "kNN" and an unbounded extra "x": walked in several orders, the arena
  // holds a set frame per subset reached, not per path; the count saturates under extras.
  std::vector<std::string> names;
  for (int i = 0; i < 20; ++i) names.push_back(fmt::format("k{:02}", i));
  MemberSetSpec spec;
  spec.extra = b.Alternatives("x", {b.Literal("x")});
  auto g = b.Build(b.Alternatives("root", {{LiteralSet(&b, names, spec)}}));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  StackArena arena(&*g);
  std::mt19937 rng(7);
  int64_t after_first = 0;
  for (int walk = 0; walk < 8; ++walk) {
    std::vector<std::string> order = names;
    if (walk > 0) std::shuffle(order.begin(), order.end(), rng);
    std::string text;
    for (const std::string& name : order) text += (text.empty() ? "" : ",") + name;
    State s = arena.Initial();
    ASSERT_TRUE(arena.AdvanceBytes(&s, text)) << text;
    EXPECT_TRUE(StackArena::CanEnd(s));
    if (walk == 0) after_first = arena.num_nodes();
  }
  // One walk reaches 21 subsets, each offering at most 21 members (3 bytes each).
  EXPECT_LE(after_first, 21 * 21 * 4);
  EXPECT_LE(arena.num_nodes(), 8 * after_first);
  const int64_t nodes = arena.num_nodes();
  State s = arena.Initial();
  ASSERT_TRUE(arena.AdvanceBytes(&s, names[0]));
  ASSERT_TRUE(arena.AdvanceBytes(&s, std::string(",x").append(",x")));
  const int64_t with_extras = arena.num_nodes();
  std::string many;
  for (int i = 0; i < 1000; ++i) many += ",x";
  ASSERT_TRUE(arena.AdvanceBytes(&s, many));
  EXPECT_EQ(arena.num_nodes(), with_extras);  // extras past the counted ones add no frames
  EXPECT_LE(with_extras - nodes, 21 * 4);
  EXPECT_TRUE(StackArena::CanEnd(s));
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

TEST(TokenMaskerTest, ForcedBytesRunThroughASetWithOneWayToGo) {
  GrammarBuilder b;
  // root ::= "{" set{"\"a\":1"!, at most one member} "}": the only object is {"a":1}.
  MemberSetSpec spec;
  spec.required = 1;
  spec.max_count = 1;
  spec.members = {b.Alternatives("a", {b.Literal("\"a\":1")}),
                  b.Alternatives("b", {b.Literal("\"b\":2")})};
  spec.separator = b.Literal(",");
  auto g =
      b.Build(b.Alternatives("root", {{b.Literal("{")[0], b.Set("set", spec), b.Literal("}")[0]}}));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  TokenMasker m(std::move(*g), TokenVocab::FromPieces({"{", "1"}, {}, {}));
  EXPECT_EQ(m.ForcedBytes(m.Initial()), "{\"a\":1}");
}

}  // namespace
}  // namespace kvserve::structured
