#include "structured/regex.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "structured/grammar.h"
#include "structured/matcher.h"

namespace kvserve::structured {
namespace {

Result<Grammar> CompileToGrammar(std::string_view pattern) {
  GrammarBuilder b;
  KV_ASSIGN_OR_RETURN(int root, CompileRegex(pattern, &b));
  return b.Build(root);
}

struct Case {
  const char* pattern;
  std::vector<std::string> accept;
  std::vector<std::string> reject;
};

void ExpectCases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    auto g = CompileToGrammar(c.pattern);
    ASSERT_TRUE(g.ok()) << c.pattern << ": " << g.status().ToString();
    for (const std::string& s : c.accept) {
      EXPECT_TRUE(FullMatch(*g, s)) << "/" << c.pattern << "/ should match \"" << s << "\"";
    }
    for (const std::string& s : c.reject) {
      EXPECT_FALSE(FullMatch(*g, s)) << "/" << c.pattern << "/ should not match \"" << s << "\"";
    }
  }
}

// The error message of compiling `pattern`, or "" when it compiled.
std::string ErrorOf(std::string_view pattern) {
  GrammarBuilder b;
  auto r = CompileRegex(pattern, &b);
  return r.ok() ? "" : r.status().message();
}

TEST(RegexTest, LiteralsAndConcatenation) {
  ExpectCases({
      {"", {""}, {"a"}},
      {"abc", {"abc"}, {"", "ab", "abcd", "abd"}},
      {"a b", {"a b"}, {"ab"}},
      {"]}", {"]}"}, {"]"}},
  });
}

TEST(RegexTest, Alternation) {
  ExpectCases({
      {"cat|dog", {"cat", "dog"}, {"", "ca", "catdog", "cog"}},
      {"a|b|c|", {"a", "b", "c", ""}, {"ab", "d"}},
      {"|x", {"", "x"}, {"xx"}},
      {"(a|)b", {"ab", "b"}, {"a", "aab"}},
      {"x(a|bc|)y", {"xay", "xbcy", "xy"}, {"xby", "xacy"}},
      {"(a|(b|(c|d)))e", {"ae", "be", "ce", "de"}, {"e", "abe"}},
  });
}

TEST(RegexTest, Groups) {
  ExpectCases({
      {"(ab)+", {"ab", "abab", "ababab"}, {"", "a", "aba"}},
      {"(?:ab)*c", {"c", "abc", "ababc"}, {"ab", "abac"}},
      {"(?P<year>\\d{4})-(?<month>\\d\\d)", {"2024-01"}, {"24-01", "2024-1"}},
      {"((a)(b(c)))", {"abc"}, {"ab", "abcc"}},
      {"a(?#a comment)b", {"ab"}, {"a(?#a comment)b"}},
      {"()", {""}, {"a"}},
  });
}

TEST(RegexTest, Quantifiers) {
  ExpectCases({
      {"a*", {"", "a", "aaaa"}, {"b", "ab"}},
      {"a+", {"a", "aaa"}, {"", "b"}},
      {"a?b", {"b", "ab"}, {"aab", "a"}},
      {"a{3}", {"aaa"}, {"aa", "aaaa"}},
      {"a{2,}", {"aa", "aaaaaaa"}, {"", "a"}},
      {"a{2,4}", {"aa", "aaa", "aaaa"}, {"a", "aaaaa"}},
      {"a{0,2}", {"", "a", "aa"}, {"aaa"}},
      {"a{,2}", {"", "a", "aa"}, {"aaa"}},
      {"a{,}", {"", "aaaaa"}, {"b"}},
      {"a{0}b", {"b"}, {"ab"}},
      {"[ab]{2}", {"aa", "ab", "ba", "bb"}, {"a", "abc"}},
      {"(xy){1,2}z", {"xyz", "xyxyz"}, {"z", "xyxyxyz"}},
      {"\\d{3}-\\d{4}", {"555-1234"}, {"5551234", "55-1234"}},
  });
}

TEST(RegexTest, LazyAndPossessiveSuffixesAreGreedy) {
  ExpectCases({
      {"a*?b", {"b", "aab"}, {"a"}},
      {"a+?", {"a", "aa"}, {""}},
      {"a??", {"", "a"}, {"aa"}},
      {"a{1,3}?", {"a", "aaa"}, {"aaaa"}},
      {"a*+b", {"b", "aaab"}, {"a"}},
      {"a++", {"a", "aa"}, {""}},
      {"a{2}+", {"aa"}, {"aaaa"}},
  });
}

TEST(RegexTest, RepeatingNullableGroupsIsNotLeftRecursive) {
  ExpectCases({
      {"(a|)*", {"", "a", "aaa"}, {"b"}},
      {"(a*)*b", {"b", "ab", "aaab"}, {"ba"}},
      {"(a?b?)+", {"", "a", "b", "ab", "ba", "abba"}, {"c"}},
      {"(a*|b)+c", {"c", "aac", "babc"}, {"ca"}},
      {"((a?){2,3})*", {"", "a", "aaaaaaa"}, {"b"}},
      {"(a{0}){3,5}", {""}, {"a"}},
      {"(()|())*x", {"x"}, {"xx"}},
  });
}

TEST(RegexTest, LiteralBraceWhereNotAQuantifier) {
  ExpectCases({
      {"a{", {"a{"}, {"a"}},
      {"{x}", {"{x}"}, {"x"}},
      {"a{}", {"a{}"}, {"a"}},
      {"a{1,x}", {"a{1,x}"}, {"a"}},
      {"a{1", {"a{1"}, {"a"}},
      {"\\{\\d+\\}", {"{12}"}, {"12"}},
  });
}

TEST(RegexTest, Classes) {
  ExpectCases({
      {"[a-z0-9_]+", {"abc_09", "z"}, {"", "A", "a-b"}},
      {"[^\\]\\\\]", {"a", "[", "\xC3\xA9"}, {"]", "\\", ""}},
      {"[\\d\\s-]+", {"1 2-3", "\t\n-"}, {"a"}},
      {"[]a]", {"]", "a"}, {"b"}},
      {"[^]a]", {"b"}, {"]", "a"}},
      {"[-a]", {"-", "a"}, {"b"}},
      {"[a-]", {"-", "a"}, {"b"}},
      {"[\\w.]+@[\\w.]+", {"a.b@c.d"}, {"a@", "a b@c"}},
      {"[\\D]", {"a", "-"}, {"5"}},
      {"[^\\W_]", {"a", "Z", "5"}, {"_", "-"}},
      {"[\\x41-\\x43]", {"A", "B", "C"}, {"D"}},
      {"[\\u00e0-\\u00ff]", {"\xC3\xA9"}, {"e"}},
      {"[[]", {"["}, {"]"}},
      {"[\\b]", {"\b"}, {"b"}},
      {"[.*+?]", {".", "*", "+", "?"}, {"a"}},
  });
}

TEST(RegexTest, ClassEscapesAndDot) {
  ExpectCases({
      {"\\d", {"0", "9"}, {"a", "\xD9\xA3"}},  // ASCII digits only, not U+0663
      {"\\D", {"a", "\xD9\xA3"}, {"0"}},
      {"\\w+", {"abc_123"}, {"a-b", "\xC3\xA9"}},
      {"\\W", {"-", "\xC3\xA9"}, {"a", "_"}},
      {"\\s", {" ", "\t", "\n", "\r", "\f", "\v"}, {"a", "\xC2\xA0"}},
      {"\\S", {"a"}, {" "}},
      {".", {"a", " ", "\xC3\xA9", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80"}, {"\n", "", "ab"}},
      {"a.c", {"abc", "a.c"}, {"ac", "a\nc"}},
  });
}

TEST(RegexTest, Escapes) {
  ExpectCases({
      {"\\n\\t\\r\\f\\v", {"\n\t\r\f\v"}, {"ntrfv"}},
      {"\\x41\\u0042\\u{43}\\U00000044", {"ABCD"}, {}},
      {"\\u{1F600}", {"\xF0\x9F\x98\x80"}, {}},
      {"\\0", {std::string(1, '\0')}, {"0"}},
      {"\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\\\\\/\\-", {".*+?()[]{}|^$\\/-"}, {}},
      {"a\\.b", {"a.b"}, {"axb"}},
      {"\\#\\ \\&\\~", {"# &~"}, {}},
  });
}

TEST(RegexTest, Utf8Literals) {
  ExpectCases({
      {"caf\xC3\xA9", {"caf\xC3\xA9"}, {"cafe", "caf\xC3"}},              // café
      {"\xE4\xB8\xAD+", {"\xE4\xB8\xAD", "\xE4\xB8\xAD\xE4\xB8\xAD"}, {""}},  // 中+
      {"\xF0\x9F\x98\x80?!", {"!", "\xF0\x9F\x98\x80!"}, {"\xF0\x9F\x98!"}},  // 😀?!
      {"[\xC3\xA9\xE4\xB8\xAD]", {"\xC3\xA9", "\xE4\xB8\xAD"}, {"e"}},        // [é中]
      {"[\xE4\xB8\x80-\xE9\xBF\xBF]{2}", {"\xE4\xB8\xAD\xE6\x96\x87"}, {"ab"}},  // [一-鿿]{2}
      {"[^\xC3\xA9]", {"e", "\xF0\x9F\x98\x80"}, {"\xC3\xA9"}},
      {"(\xF0\x9F\x98\x80|\xF0\x9F\x98\x81)+",
       {"\xF0\x9F\x98\x80\xF0\x9F\x98\x81"}, {"\xF0\x9F\x98\x82"}},
  });
  // The quantifier applies to the whole code point, not its last byte.
  auto g = CompileToGrammar("\xC3\xA9{2}");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(FullMatch(*g, "\xC3\xA9\xC3\xA9"));
  EXPECT_FALSE(FullMatch(*g, "\xC3\xA9\xA9"));
}

TEST(RegexTest, Anchors) {
  ExpectCases({
      {"^abc$", {"abc"}, {"xabc", "abcx"}},
      {"^a|^b$|c$", {"a", "b", "c"}, {"ab"}},
      {"\\Aab\\Z", {"ab"}, {"b"}},
      {"^", {""}, {"a"}},
      {"$", {""}, {"a"}},
      {"^(a|b)*$", {"", "abba"}, {"c"}},
  });
}

TEST(RegexTest, RealWorldPatterns) {
  ExpectCases({
      {"^\\d{4}-\\d{2}-\\d{2}$", {"2024-02-29"}, {"2024-2-29", "2024-02-290"}},
      {"[A-Z][a-z]+( [A-Z][a-z]+)*", {"Ada", "Ada Lovelace"}, {"ada", "Ada  Lovelace"}},
      {"-?(0|[1-9]\\d*)(\\.\\d+)?([eE][+-]?\\d+)?",
       {"0", "-12.5", "1e10", "3.14E-2"}, {"01", "1.", ".5", "-"}},
      {"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
       {"123e4567-e89b-12d3-a456-426614174000"}, {"123e4567-e89b-12d3-a456-42661417400"}},
      {"(yes|no|maybe)", {"yes", "no", "maybe"}, {"y", "yesno"}},
      {"\"([^\"\\\\]|\\\\.)*\"", {"\"\"", "\"a\\\"b\"", "\"\xE4\xB8\xAD\""}, {"\"a\"b\"", "\""}},
  });
}

TEST(RegexTest, PrefixesAreViable) {
  auto g = CompileToGrammar("\\d{3}-[a-z]+");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(PrefixMatch(*g, "12"));
  EXPECT_TRUE(PrefixMatch(*g, "123-"));
  EXPECT_FALSE(FullMatch(*g, "123-"));
  EXPECT_FALSE(PrefixMatch(*g, "12a"));
  EXPECT_FALSE(PrefixMatch(*g, "1234"));
}

TEST(RegexTest, LargeBoundedRepetitionBuilds) {
  auto g = CompileToGrammar("[a-z]{1,1000}");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(FullMatch(*g, std::string(1000, 'q')));
  EXPECT_FALSE(FullMatch(*g, std::string(1001, 'q')));
  auto exact = CompileToGrammar("(ab){5000}");
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  std::string s;
  for (int i = 0; i < 5000; ++i) s += "ab";
  EXPECT_TRUE(FullMatch(*exact, s));
  EXPECT_FALSE(FullMatch(*exact, s.substr(2)));
}

TEST(RegexTest, ErrorsNameTheOffset) {
  struct Bad {
    const char* pattern;
    const char* message;  // a substring of the error
  };
  const std::vector<Bad> bad = {
      {"*a", "nothing to repeat at offset 0"},
      {"a|+", "nothing to repeat at offset 2"},
      {"(?:+)", "nothing to repeat at offset 3"},
      {"{2}", "nothing to repeat at offset 0"},
      {"^*", "nothing to repeat at offset 1"},
      {"a**", "multiple repeat at offset 2"},
      {"a{2}{3}", "multiple repeat at offset 4"},
      {"a*?+", "multiple repeat at offset 3"},
      {"(ab", "missing ')' for the '(' opened at offset 0"},
      {"a(b(c)", "missing ')' for the '(' opened at offset 1"},
      {"ab)", "unbalanced ')' at offset 2"},
      {"[abc", "unterminated character class '[' at offset 0"},
      {"x[^", "unterminated character class '[' at offset 1"},
      {"[]", "unterminated character class '[' at offset 0"},
      {"[z-a]", "bad character range (the start is after the end) at offset 1"},
      {"[\\d-z]", "bad character range (a class escape) at offset 1"},
      {"[^\\x00-\\u{10FFFF}]", "the character class matches nothing at offset 0"},
      {"a{3,2}", "min repeat greater than max repeat at offset 1"},
      {"a{100001}", "repetition count over 100000 at offset 1"},
      {"a{1,999999999999999999999}", "repetition count over 100000 at offset 1"},
      {"(a)\\1", "back-references are not supported at offset 3"},
      {"(?P<n>a)(?P=n)", "back-references are not supported at offset 8"},
      {"(?<n>a)\\k<n>", "back-references (\\k<name>) are not supported at offset 7"},
      {"a(?=b)", "look-around assertions are not supported at offset 1"},
      {"a(?!b)", "look-around assertions are not supported at offset 1"},
      {"(?<=a)b", "look-around assertions are not supported at offset 0"},
      {"(?<!a)b", "look-around assertions are not supported at offset 0"},
      {"(?i)abc", "unsupported group syntax '(?' (flags, conditionals and the like) at offset 0"},
      {"(?P<1x>a)", "bad group name"},
      {"(?<a-b>a)", "bad group name"},
      {"(?P<x>a)(?P<x>b)", "group name 'x' defined twice at offset 12"},
      {"a^b", "'^' (or \\A) is only supported at the start"},
      {"(^a)", "'^' (or \\A) is only supported at the start"},
      {"a$b", "'$' (or \\Z) is only supported at the end"},
      {"(a$)", "'$' (or \\Z) is only supported at the end"},
      {"a\\b", "word boundaries (\\b) are not supported at offset 1"},
      {"\\Ba", "word boundaries (\\B) are not supported at offset 0"},
      {"\\q", "bad escape \\q at offset 0"},
      {"[\\A]", "bad escape \\A at offset 1"},
      {"\\p{L}", "Unicode property escapes are not supported at offset 0"},
      {"ab\\", "trailing backslash at offset 2"},
      {"\\x4", "bad escape (expected 2 hex digits) at offset 0"},
      {"\\u12", "bad escape (expected 4 hex digits) at offset 0"},
      {"\\u{}", "bad escape (expected 1 hex digits) at offset 0"},
      {"\\u{110000}", "escape beyond U+10FFFF at offset 0"},
      {"\\u{12", "bad \\u{...} escape (missing '}') at offset 0"},
      {"\\uD800", "a surrogate code point is not a character at offset 0"},
      {"a(?#never closed", "unterminated comment '(?#' at offset 1"},
      {"ab\xFF", "invalid UTF-8 in the pattern at offset 2"},
      {"\xC3", "invalid UTF-8 in the pattern at offset 0"},
      {"\xC0\xAF", "invalid UTF-8 in the pattern at offset 0"},  // overlong '/'
      // Offsets count code points: é and 中 are one each.
      {"\xC3\xA9\xE4\xB8\xAD**", "multiple repeat at offset 3"},
  };
  for (const Bad& b : bad) {
    const std::string err = ErrorOf(b.pattern);
    EXPECT_NE(err.find(b.message), std::string::npos)
        << "/" << b.pattern << "/ gave \"" << err << "\", expected \"" << b.message << "\"";
  }
}

TEST(RegexTest, DeepNestingIsAnErrorNotACrash) {
  const std::string deep = std::string(5000, '(') + "a" + std::string(5000, ')');
  EXPECT_NE(ErrorOf(deep).find("nested too deeply"), std::string::npos);
  const std::string ok = std::string(200, '(') + "a" + std::string(200, ')') + "+";
  auto g = CompileToGrammar(ok);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(FullMatch(*g, "aaa"));
}

TEST(RegexTest, ErrorsAreInvalidArgument) {
  GrammarBuilder b;
  auto r = CompileRegex("(", &b);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(RegexTest, SharesABuilderWithOtherRules) {
  GrammarBuilder b;
  auto digits = CompileRegex("\\d+", &b);
  auto word = CompileRegex("[a-z]+", &b);
  ASSERT_TRUE(digits.ok());
  ASSERT_TRUE(word.ok());
  const int root = b.Alternatives(
      "root", {{GrammarBuilder::Ref(*digits), b.Literal(":")[0], GrammarBuilder::Ref(*word)}});
  auto g = b.Build(root);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(FullMatch(*g, "42:abc"));
  EXPECT_FALSE(FullMatch(*g, "abc:42"));
}

Result<Grammar> CompileExceptToGrammar(std::string_view pattern,
                                       const std::vector<std::string>& excluded) {
  GrammarBuilder b;
  KV_ASSIGN_OR_RETURN(int root, CompileRegexExcept(pattern, excluded, &b));
  return b.Build(root);
}

struct ExceptCase {
  const char* pattern;
  std::vector<std::string> excluded;
  std::vector<std::string> accept;
  std::vector<std::string> reject;
};

void ExpectExceptCases(const std::vector<ExceptCase>& cases) {
  for (const ExceptCase& c : cases) {
    auto g = CompileExceptToGrammar(c.pattern, c.excluded);
    ASSERT_TRUE(g.ok()) << c.pattern << ": " << g.status().ToString();
    for (const std::string& s : c.accept) {
      EXPECT_TRUE(FullMatch(*g, s))
          << "/" << c.pattern << "/ minus names should match \"" << s << "\"";
    }
    for (const std::string& s : c.reject) {
      EXPECT_FALSE(FullMatch(*g, s))
          << "/" << c.pattern << "/ minus names should not match \"" << s << "\"";
    }
  }
}

TEST(RegexExceptTest, ExcludesNamesAndKeepsPrefixesAndExtensions) {
  ExpectExceptCases({
      {"line[1-3]", {"line1"}, {"line2", "line3"}, {"line1", "line", "line4", "line12"}},
      {"line[0-9]*", {"line1", "line"}, {"line2", "line12", "line11", "line10"}, {"line1", "line"}},
      {"[a-z]+", {"ab"}, {"a", "abc", "b", "abb", "aa", "ba"}, {"ab", "", "a1"}},
      {"a|ab|abc", {"ab"}, {"a", "abc"}, {"ab", "abcd", ""}},
      {"x*", {""}, {"x", "xx"}, {""}},
      {"(ab)*", {"ab", "abab"}, {"", "ababab"}, {"ab", "abab", "aba"}},
      {"\\d{2,3}", {"10", "999"}, {"11", "100", "998"}, {"10", "999", "1", "1000"}},
      {"^a.c$", {"abc"}, {"aac", "a-c", "aéc"}, {"abc", "ac"}},
      {"é+|[^a-z]", {"é", "1"}, {"éé", "2", "É"}, {"é", "1", "a"}},
  });
}

TEST(RegexExceptTest, UnanchoredSearchPatterns) {
  // The form JSON Schema's search semantics give "line" (any prefix and suffix).
  ExpectExceptCases({
      {".*(?:line).*",
       {"line", "aline", "line1"},
       {"xline", "lines", "line2", "line11", "alinea"},
       {"line", "aline", "line1", "lin", "ine"}},
  });
}

TEST(RegexExceptTest, NamesOutsideThePatternChangeNothing) {
  ExpectExceptCases({
      {"[0-9]+", {"abc", "1a"}, {"1", "123"}, {"abc", "1a", ""}},
  });
}

TEST(RegexExceptTest, EverythingExcludedIsNotFound) {
  GrammarBuilder b;
  auto r = CompileRegexExcept("a|b", std::vector<std::string>{"a", "b", "c"}, &b);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

TEST(RegexExceptTest, PastTheBoundsIsResourceExhausted) {
  GrammarBuilder b;
  const std::vector<std::string> names = {std::string(kMaxExceptCodepoints + 1, 'a')};
  auto r = CompileRegexExcept("a*", names, &b);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
}

TEST(RegexExceptTest, InvalidPatternIsInvalidArgument) {
  GrammarBuilder b;
  auto r = CompileRegexExcept("(a", std::vector<std::string>{"a"}, &b);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

// Every string up to length 4 over a small alphabet: in the pattern minus the names exactly
// when CompileRegex matches it and it is no name.
TEST(RegexExceptTest, AgreesWithPatternMinusNamesOnAllShortStrings) {
  const std::vector<std::pair<const char*, std::vector<std::string>>> cases = {
      {"[ab]*", {"", "a", "ab", "ba", "abab"}},
      {"(a|ab)(c|bcd)?", {"a", "abc", "abcd"}},
      {"a{1,3}b?|c", {"aa", "ab", "c"}},
      {"(a*b*)*c", {"c", "abc"}},
      {".*(?:ab).*", {"ab", "cab", "abc"}},
      {"((a?){2,3})*b", {"b", "aab"}},
      {"[^b]+", {"a", "ac", "ca"}},
  };
  std::vector<std::string> strings = {""};
  for (size_t i = 0; i < strings.size(); ++i) {
    if (strings[i].size() == 4) continue;
    for (char c : std::string("abc")) strings.push_back(strings[i] + c);
  }
  for (const auto& [pattern, names] : cases) {
    auto whole = CompileToGrammar(pattern);
    auto except = CompileExceptToGrammar(pattern, names);
    ASSERT_TRUE(whole.ok() && except.ok()) << pattern;
    for (const std::string& s : strings) {
      const bool named = std::find(names.begin(), names.end(), s) != names.end();
      EXPECT_EQ(FullMatch(*except, s), FullMatch(*whole, s) && !named)
          << "/" << pattern << "/ on \"" << s << "\"";
    }
  }
}

}  // namespace
}  // namespace kvserve::structured
