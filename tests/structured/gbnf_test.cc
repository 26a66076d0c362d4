#include "structured/gbnf.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "structured/grammar.h"
#include "structured/matcher.h"

namespace kvserve::structured {
namespace {

Result<Grammar> CompileToGrammar(std::string_view gbnf) {
  GrammarBuilder b;
  KV_ASSIGN_OR_RETURN(int root, CompileGbnf(gbnf, &b));
  return b.Build(root);
}

// The error message of compiling `gbnf`, or "" when it compiled.
std::string ErrorOf(std::string_view gbnf) {
  GrammarBuilder b;
  auto r = CompileGbnf(gbnf, &b);
  return r.ok() ? "" : r.status().message();
}

void ExpectLanguage(std::string_view gbnf, const std::vector<std::string>& accept,
                    const std::vector<std::string>& reject) {
  auto g = CompileToGrammar(gbnf);
  ASSERT_TRUE(g.ok()) << gbnf << "\n" << g.status().ToString();
  for (const std::string& s : accept) {
    EXPECT_TRUE(FullMatch(*g, s)) << gbnf << "\nshould match \"" << s << "\"";
  }
  for (const std::string& s : reject) {
    EXPECT_FALSE(FullMatch(*g, s)) << gbnf << "\nshould not match \"" << s << "\"";
  }
}

// JSON, written for these tests in the style of llama.cpp's example grammars: rules that
// continue over several lines, groups spanning lines, comments inside them.
constexpr std::string_view kJsonGrammar = R"gbnf(
# Any JSON value, with optional blanks around the tokens.
root   ::= ws value ws

value  ::= object | array | string | number | literal
literal ::= "true" | "false" | "null"

object ::=
  "{" ws (
    member               # the first member
    (ws "," ws member)*  # then more, comma-separated
    ws
  )? "}"
member ::= string ws ":" ws value

array  ::= "[" ws ( value (ws "," ws value)* ws )? "]"

string ::= "\"" char* "\""
char   ::= [^"\\\x00-\x1F] | "\\" escape
escape ::= ["\\/bfnrt] | "u" hex{4}
hex    ::= [0-9a-fA-F]

number ::= "-"? integer fraction? exponent?
integer ::= "0" | [1-9] [0-9]*
fraction ::= "." [0-9]+
exponent ::= [eE] [+-]? [0-9]+

ws ::= [ \t\n\r]*
)gbnf";

TEST(GbnfTest, JsonGrammar) {
  ExpectLanguage(kJsonGrammar,
                 {
                     "{}",
                     "[]",
                     "null",
                     "-0.5e+10",
                     "\"\"",
                     R"({"a":1,"b":[true,false,null],"c":{"d":"e\n\u00e9"}})",
                     " { \"k\" : [ 1 , 2 ] } ",
                     "\"caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80\"",
                     "[[[[]]], {}]",
                 },
                 {
                     "",
                     "{",
                     "{\"a\"}",
                     "[1,]",
                     "01",
                     "\"\\x\"",
                     "\"a\nb\"",
                     "tru",
                     "{\"a\":1,}",
                     "\"\\u12g4\"",
                 });
  auto g = CompileToGrammar(kJsonGrammar);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(PrefixMatch(*g, "{\"key\": [1, 2"));
  EXPECT_FALSE(PrefixMatch(*g, "{\"key\" 1"));
}

TEST(GbnfTest, ArithmeticGrammar) {
  constexpr std::string_view kArithmetic = R"gbnf(
root   ::= expr
expr   ::= term (ws [-+] ws term)*
term   ::= factor (ws [*/] ws factor)*
factor ::= number | "(" ws expr ws ")" | "-" factor
number ::= [0-9]+ ("." [0-9]+)?
ws     ::= " "*
)gbnf";
  ExpectLanguage(kArithmetic, {"1", "1+2", "2 * (3 - 4.5) / -6", "((1))", "--1"},
                 {"", "1+", "(1", "1 2", "1..2", "+1"});
}

TEST(GbnfTest, ListGrammarWithMultiLineRulesAndComments) {
  constexpr std::string_view kList = R"gbnf(
# A bulleted list: one or more items.
root ::= item+   # at least one

# An item is a dash, a space, some text and a line break; the rule goes on over the next
# lines because none of them starts a new `name ::=`.
item ::=
  "- "        # the bullet
  text        # what it says
  "\n"
text ::= [^\n\r]+
)gbnf";
  ExpectLanguage(kList, {"- milk\n", "- milk\n- eggs \xF0\x9F\xA5\x9A\n"},
                 {"", "- milk", "-milk\n", "- \n", "- a\n\n"});
}

TEST(GbnfTest, AlternativesOnFollowingLines) {
  ExpectLanguage("root ::= \"a\"\n       | \"b\"\n       | \"c\" \"d\"\n", {"a", "b", "cd"},
                 {"c", "ab"});
  // A '|' at the end of a line continues the rule on the next one.
  ExpectLanguage("root ::= \"a\" |\n  \"b\"\n", {"a", "b"}, {""});
  // ... unless a new rule follows: then the last alternative is empty.
  ExpectLanguage("root ::= x |\nx ::= \"x\"\n", {"", "x"}, {"xx"});
  // Windows line endings.
  ExpectLanguage("root ::= a\r\n  b\r\na ::= \"a\"\r\nb ::= \"b\"\r\n", {"ab"}, {"a"});
}

TEST(GbnfTest, LiteralsAndEscapes) {
  ExpectLanguage(R"(root ::= "a\nb\tc\rd\\e\"f\[g\]h\-")", {"a\nb\tc\rd\\e\"f[g]h-"}, {});
  ExpectLanguage(R"(root ::= "\x41\u00e9\U0001F600")", {"A\xC3\xA9\xF0\x9F\x98\x80"}, {});
  ExpectLanguage("root ::= \"caf\xC3\xA9 \xE4\xB8\xAD\"", {"caf\xC3\xA9 \xE4\xB8\xAD"},
                 {"cafe \xE4\xB8\xAD"});
  ExpectLanguage(R"(root ::= "" "a" "")", {"a"}, {""});
  ExpectLanguage(R"(root ::= "# not a comment")", {"# not a comment"}, {""});
}

TEST(GbnfTest, CharacterClasses) {
  ExpectLanguage("root ::= [a-zA-Z_] [a-zA-Z0-9_-]*", {"x", "snake_case-1"}, {"1x", ""});
  ExpectLanguage(R"(root ::= [^"\\]+)", {"abc", "\xC3\xA9\xE4\xB8\xAD"}, {"a\"", "\\"});
  ExpectLanguage(R"(root ::= [\x30-\x39\-]+)", {"0-9"}, {"a"});
  ExpectLanguage(R"(root ::= [\]\[]+)", {"[]]["}, {"a"});
  ExpectLanguage("root ::= [-a]", {"-", "a"}, {"b"});
  ExpectLanguage("root ::= [a-]", {"-", "a"}, {"b"});
  ExpectLanguage("root ::= [\xC3\xA0-\xC3\xBF]+", {"\xC3\xA9\xC3\xBC"}, {"e"});  // [à-ÿ]+
  ExpectLanguage(R"(root ::= [\u4e00-\u9fff] [\U0001F600-\U0001F64F])",
                 {"\xE4\xB8\xAD\xF0\x9F\x98\x80"}, {"\xE4\xB8\xAD"});
  ExpectLanguage("root ::= [^\xE4\xB8\xAD]", {"a", "\xF0\x9F\x98\x80"}, {"\xE4\xB8\xAD"});
  ExpectLanguage("root ::= [^]", {"a", "\n"}, {""});
}

TEST(GbnfTest, AnyCharacter) {
  ExpectLanguage("root ::= . .", {"ab", "\n\xF0\x9F\x98\x80", "\xC3\xA9\xE4\xB8\xAD"},
                 {"a", "abc"});
}

TEST(GbnfTest, GroupsAndRepetition) {
  ExpectLanguage(R"(root ::= ("a" | "b" "c")+ "d"?)", {"a", "bcad", "aaa"}, {"", "b", "add"});
  ExpectLanguage(R"(root ::= "x"{3})", {"xxx"}, {"xx", "xxxx"});
  ExpectLanguage(R"(root ::= "x"{2,})", {"xx", "xxxxxx"}, {"x"});
  ExpectLanguage(R"(root ::= "ab"{1,3})", {"ab", "ababab"}, {"", "abababab"});
  ExpectLanguage(R"(root ::= "x"{ 0 , 2 })", {"", "x", "xx"}, {"xxx"});
  ExpectLanguage(R"(root ::= "x"{0} "y")", {"y"}, {"xy"});
  ExpectLanguage(R"(root ::= (("a") (("b")))*)", {"", "abab"}, {"aba"});
  ExpectLanguage("root ::= ( # comment\n  \"a\"\n  | \"b\" # another\n)\n", {"a", "b"}, {""});
  ExpectLanguage(R"(root ::= "a" * "b")", {"b", "aab"}, {"a"});  // blanks before the operator
}

TEST(GbnfTest, RepeatingAnOptionalItemIsNotLeftRecursive) {
  ExpectLanguage(R"(root ::= "a"?* "b")", {"b", "aaab"}, {"a"});
  ExpectLanguage(R"(root ::= "a"*+)", {"", "aaa"}, {"b"});
  ExpectLanguage(R"(root ::= "a"{0,2}{3,})", {"", "a", "aaaaaaa"}, {"b"});
  ExpectLanguage(R"(root ::= ""*)", {""}, {"a"});
}

TEST(GbnfTest, RulesReferToEachOtherInAnyOrder) {
  ExpectLanguage(
      "root ::= greeting \" \" name-2\n"
      "name-2 ::= [A-Z] [a-z]*\n"
      "greeting ::= \"hi\" | \"hello\"\n",
      {"hi Bob", "hello Al"}, {"hi bob", "hey Bob"});
  // Recursion that consumes a byte first is fine.
  ExpectLanguage("root ::= \"(\" root* \")\"", {"()", "(()(()))"}, {"(()", "())"});
}

TEST(GbnfTest, SharesABuilderWithOtherRules) {
  GrammarBuilder b;
  const int pre = b.Alternatives("pre", {b.Literal(">")});
  auto root = CompileGbnf("root ::= [0-9]+", &b);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  const int top = b.Alternatives("top", {{GrammarBuilder::Ref(pre), GrammarBuilder::Ref(*root)}});
  auto g = b.Build(top);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(FullMatch(*g, ">42"));
  EXPECT_FALSE(FullMatch(*g, "42"));
}

TEST(GbnfTest, LeftRecursionIsRefusedThroughBuild) {
  constexpr std::string_view kLeft =
      "root ::= expr\n"
      "expr ::= expr \"+\" term | term\n"
      "term ::= [0-9]\n";
  GrammarBuilder b;
  auto r = CompileGbnf(kLeft, &b);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("gbnf: 2:1: rule 'expr' is left-recursive"),
            std::string::npos)
      << r.status().message();
  // The check is Build()'s own: the rules left in the builder are refused the same way.
  auto built = b.Build(0);  // `root`, the first rule named
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.status().message().find("left-recursive"), std::string::npos);

  // Through a nullable rule, and through the repetition of a nullable rule.
  EXPECT_NE(ErrorOf("root ::= opt root \"x\" | \"y\"\nopt ::= \"a\"?\n").find("left-recursive"),
            std::string::npos);
  const std::string star = ErrorOf("root ::= x*\nx ::= \"a\"?\n");
  EXPECT_NE(star.find("left-recursive"), std::string::npos) << star;
  EXPECT_NE(star.find("gbnf: 1:"), std::string::npos) << star;
}

TEST(GbnfTest, EndlessRuleIsRefused) {
  const std::string err = ErrorOf("root ::= \"a\" loop\nloop ::= \"b\" loop\n");
  EXPECT_NE(err.find("can never finish"), std::string::npos) << err;
  // Build() names the first rule that cannot finish: root, which needs `loop`.
  EXPECT_NE(err.find("gbnf: 1:1: rule 'root'"), std::string::npos) << err;
}

TEST(GbnfTest, ErrorsNameLineAndColumn) {
  struct Bad {
    std::string gbnf;
    std::string message;  // a substring of the error
  };
  const std::vector<Bad> bad = {
      {"root ::= foo", "gbnf: 1:10: undefined rule 'foo'"},
      {"root ::= a\na ::= b c\nc ::= \"c\"", "gbnf: 2:7: undefined rule 'b'"},
      {"a ::= \"x\"", "gbnf: 1:1: no 'root' rule"},
      {"", "no 'root' rule"},
      {"# only a comment\n", "no 'root' rule"},
      {"root ::= \"abc", "gbnf: 1:10: unterminated string literal"},
      {"root ::= [a-z", "gbnf: 1:10: unterminated character class"},
      {"root ::= \"\\q\"", "gbnf: 1:11: unknown escape '\\q'"},
      {"root ::= [\\d]", "gbnf: 1:11: unknown escape '\\d'"},
      {"root ::= \"\\x4\"", "gbnf: 1:11: expected 2 hex digits after '\\x'"},
      {"root ::= \"\\u12\"", "expected 4 hex digits after '\\u'"},
      {"root ::= \"\\U0011FFFF\"", "escape beyond U+10FFFF"},
      {"root ::= \"\\uD800\"", "a surrogate code point is not a character"},
      {"root ::= \"\\", "gbnf: 1:11: '\\' at the end of the text"},
      {"root ::= (\"a\"", "gbnf: 1:10: '(' is never closed"},
      {"root ::= (\"a\"\n", "gbnf: 1:10: '(' is never closed"},
      {"root ::= \"a\")", "gbnf: 1:13: unbalanced ')'"},
      {"root = \"a\"", "gbnf: 1:6: expected '::=' after the rule name 'root'"},
      {"root ::= \"a\"\n::= \"b\"", "gbnf: 2:1: unexpected ':'"},
      {"root ::= \"a\"\n-x- ::= \"b\"\n!", "gbnf: 3:1: unexpected '!'"},
      {"\n  = \"a\"", "gbnf: 2:3: expected a rule name"},
      {"root_x ::= \"a\"", "gbnf: 1:5: expected '::=' after the rule name 'root'"},
      {"root ::= *\"a\"", "gbnf: 1:10: '*' has nothing before it to repeat"},
      {"root ::= (+ \"a\")", "gbnf: 1:11: '+' has nothing before it to repeat"},
      {"root ::= \"a\" | {2}", "gbnf: 1:16: '{' has nothing before it to repeat"},
      {"root ::= \"a\"\nroot ::= \"b\"", "gbnf: 2:1: rule 'root' is defined twice (first at 1:1)"},
      {"root ::= [z-a]", "gbnf: 1:11: character range with its start after its end"},
      {"root ::= []", "gbnf: 1:10: the character class matches nothing"},
      {"root ::= [^\\x00-\\U0010FFFF]", "the character class matches nothing"},
      {"root ::= \"a\"{3,2}", "gbnf: 1:13: repetition {m,n} with m greater than n"},
      {"root ::= \"a\"{x}", "gbnf: 1:13: expected a number after '{'"},
      {"root ::= \"a\"{,2}", "gbnf: 1:13: expected a number after '{'"},
      {"root ::= \"a\"{2", "gbnf: 1:13: expected '}' to close the repetition"},
      {"root ::= \"a\"{100001}", "repetition count over 100000"},
      {"root ::= <tok>", "gbnf: 1:10: unexpected '<'"},
      {"root ::= \"a\" \xE2\x82\xAC", "gbnf: 1:14: unexpected '\xE2\x82\xAC'"},
      {"root ::= \"a\" ::= \"b\"", "gbnf: 1:14: unexpected ':'"},
      {"root ::= \"\xC3\"", "gbnf: 1:11: invalid UTF-8"},
      // Columns count code points: "é" is one.
      {"root ::= \"\xC3\xA9\" foo", "gbnf: 1:14: undefined rule 'foo'"},
  };
  for (const Bad& b : bad) {
    const std::string err = ErrorOf(b.gbnf);
    EXPECT_NE(err.find(b.message), std::string::npos)
        << b.gbnf << "\ngave \"" << err << "\", expected \"" << b.message << "\"";
  }
}

TEST(GbnfTest, DeepNestingIsAnErrorNotACrash) {
  const std::string deep = "root ::= " + std::string(5000, '(') + "\"a\"" + std::string(5000, ')');
  EXPECT_NE(ErrorOf(deep).find("nested too deeply"), std::string::npos);
  const std::string ok = "root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')');
  ExpectLanguage(ok, {"a"}, {""});
}

}  // namespace
}  // namespace kvserve::structured
