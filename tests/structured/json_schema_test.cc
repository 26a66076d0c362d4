#include "structured/json_schema.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "structured/grammar.h"
#include "structured/matcher.h"

namespace kvserve::structured {
namespace {

using json = nlohmann::ordered_json;

Result<Grammar> CompileSchema(const json& schema, const JsonSchemaOptions& options = {}) {
  GrammarBuilder b;
  KV_ASSIGN_OR_RETURN(const int root, CompileJsonSchema(schema, options, &b));
  return b.Build(root);
}

Result<Grammar> CompileText(std::string_view schema, const JsonSchemaOptions& options = {}) {
  return CompileSchema(json::parse(schema), options);
}

// Compiles `schema` and checks every text of `ok` matches and none of `bad` does.
void ExpectLanguage(std::string_view schema, const std::vector<std::string>& ok,
                    const std::vector<std::string>& bad, const JsonSchemaOptions& options = {}) {
  SCOPED_TRACE(std::string(schema));
  Result<Grammar> g = CompileText(schema, options);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (const std::string& t : ok) EXPECT_TRUE(FullMatch(*g, t)) << "should accept: " << t;
  for (const std::string& t : bad) EXPECT_FALSE(FullMatch(*g, t)) << "should refuse: " << t;
}

// The error message of compiling `schema` (empty if it compiled and built).
std::string ErrorOf(std::string_view schema, const JsonSchemaOptions& options = {}) {
  Result<Grammar> g = CompileText(schema, options);
  return g.ok() ? std::string() : g.status().message();
}

TEST(JsonSchemaTest, ScalarsAndTypeLists) {
  ExpectLanguage(R"({"type":"boolean"})", {"true", "false"}, {"True", "1", "\"true\""});
  ExpectLanguage(R"({"type":"null"})", {"null"}, {"nul", "0"});
  ExpectLanguage(R"({"type":["string","null"]})", {"null", "\"x\""}, {"1", "true"});
  ExpectLanguage(R"({"type":"integer","nullable":true})", {"null", "-7"}, {"\"x\"", "1.5"});
  ExpectLanguage(R"({"type":"integer"})", {"0", "-12", "123456789012345", "12345678901234567890"},
                 {"01", "1.0", "+1", "123456789012345678901", "-", ""});
  ExpectLanguage(R"({"type":"number"})", {"0", "-0.5", "3.25", "1e10", "2.5E-3", "7e+99"},
                 {".5", "1.", "01.5", "1e", "1e100", "1.1234567"});
}

TEST(JsonSchemaTest, KeywordsImplyNoType) {
  ExpectLanguage(R"({"type":"array","items":{"required":[],"properties":{}}})",
                 {R"(["a",1,{},null])", "[]"}, {R"({})"});
  ExpectLanguage(R"({"items":{"description":"d"},"minItems":0})", {R"("s")", "1", "[1]", "{}"}, {});
  // Such a branch admits every type, so a string matches both branches here: refused.
  EXPECT_NE(ErrorOf(R"({"oneOf":[{"properties":{}},{"type":"string"}]})").find("oneOf"),
            std::string::npos);
  // Nor does one that constrains: it holds for its type, and any other value is valid as it is.
  ExpectLanguage(R"({"properties":{"a":{"type":"integer"}}})",
                 {R"({"a":1})", "{}", R"("s")", "[1,2]", "null"}, {R"({"a":"x"})"});
  ExpectLanguage(R"({"minLength":2,"minimum":3})", {R"("ab")", "3", "4.5", "[]", "{}"},
                 {R"("a")", "2", "-1"});
}

TEST(JsonSchemaTest, IntegerRangesAreExact) {
  const char* schema = R"({"type":"integer","minimum":-15,"maximum":237})";
  Result<Grammar> g = CompileText(schema);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (int v = -400; v <= 400; ++v) {
    EXPECT_EQ(FullMatch(*g, std::to_string(v)), v >= -15 && v <= 237) << v;
  }
  EXPECT_FALSE(FullMatch(*g, "-0"));
  EXPECT_FALSE(FullMatch(*g, "007"));
  // Exclusive and one-sided bounds, fractional bounds rounded inwards.
  ExpectLanguage(R"({"type":"integer","exclusiveMinimum":0})", {"1", "99", "100000"}, {"0", "-1"});
  ExpectLanguage(R"({"type":"integer","minimum":0})", {"0", "5", "999999999999999"},
                 {"-1", "-0", "1000000000000000"});
  ExpectLanguage(R"({"type":"integer","maximum":-3})", {"-3", "-40", "-999999"}, {"-2", "0", "3"});
  ExpectLanguage(R"({"type":"integer","exclusiveMinimum":-1.5,"exclusiveMaximum":2.5})",
                 {"-1", "0", "1", "2"}, {"-2", "3"});
  ExpectLanguage(R"({"type":"integer","minimum":1000,"maximum":1000})", {"1000"},
                 {"999", "1001", "100"});
  EXPECT_NE(ErrorOf(R"({"type":"integer","minimum":5,"maximum":4})").find("minimum"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"type":"integer","exclusiveMinimum":true})").find("exclusiveMinimum"),
            std::string::npos);
}

TEST(JsonSchemaTest, IntegerRangesMatchABruteForceCheck) {
  const std::vector<std::pair<int, int>> ranges = {{0, 9},    {1, 10},  {7, 7},     {-9, -1},
                                                   {-10, 10}, {19, 91}, {99, 1001}, {-123, -45},
                                                   {-1, 0},   {10, 99}, {250, 255}, {-1000, 999}};
  for (auto [lo, hi] : ranges) {
    const std::string schema = json{{"type", "integer"}, {"minimum", lo}, {"maximum", hi}}.dump();
    Result<Grammar> g = CompileText(schema);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    for (int v = -1200; v <= 1200; ++v) {
      ASSERT_EQ(FullMatch(*g, std::to_string(v)), v >= lo && v <= hi) << schema << " " << v;
    }
  }
}

TEST(JsonSchemaTest, NumberBoundsNeverAdmitOutOfRangeValues) {
  // [0.5, 10]: integers 1..10, and every decimal between the bounds, 10.0 included.
  ExpectLanguage(R"({"type":"number","minimum":0.5,"maximum":10})",
                 {"1", "10", "1.5", "9.999999", "5.0", "0.5", "0.50", "0.7", "10.0", "10.000"},
                 {"0", "0.4999", "10.5", "10.01", "11", "1e1", "-1"});
  // (-2, 2): -1.x down to -1.999999 stays above -2; 1.999999 below 2.
  ExpectLanguage(R"({"type":"number","exclusiveMinimum":-2,"exclusiveMaximum":2})",
                 {"-1.999999", "-1", "0", "0.25", "-0.5", "1.999999", "1"},
                 {"-2", "2", "2.0", "-2.5", "2.000001", "-2.0"});
  ExpectLanguage(R"({"type":"number","minimum":0})", {"0", "0.5", "123.25", "7"}, {"-0.5", "-1"});
  // An exponent where the sign alone meets the bound (the value may be anything else).
  ExpectLanguage(R"({"type":"number","minimum":0})", {"1e-06", "2.5E+3", "0e5"}, {"-1e-06"});
  ExpectLanguage(R"({"type":"number","exclusiveMaximum":0.5})", {"-1e-06", "-3E2"}, {"1e-06"});
  ExpectLanguage(R"({"type":"number","exclusiveMinimum":0})", {"0.5"}, {"1e-06", "0e1"});
  ExpectLanguage(R"({"type":"number","minimum":0,"maximum":1})", {"0.5"}, {"1e-06"});
  ExpectLanguage(R"({"type":"number","minimum":0.25,"maximum":0.75})", {"0.25", "0.5", "0.75"},
                 {"0", "0.2", "0.76", "1"});
  EXPECT_NE(ErrorOf(R"({"type":"number","minimum":0.75,"maximum":0.25})").find("minimum"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"type":"integer","minimum":0.25,"maximum":0.75})").find("minimum"),
            std::string::npos);
}

TEST(JsonSchemaTest, NumberBoundsAreComparedAsDecimals) {
  // A fractional bound is met exactly: nothing near it is lost, nothing past it admitted.
  ExpectLanguage(R"({"type":"number","minimum":0.1})", {"0.1", "0.10", "0.5", "0.25", "1", "3.5"},
                 {"0.09", "0.0999999", "0", "0.0", "-0.5"});
  ExpectLanguage(R"({"type":"number","exclusiveMinimum":0.1})", {"0.100001", "0.11", "2"},
                 {"0.1", "0.100", "0.05"});
  ExpectLanguage(R"({"type":"number","minimum":78.55,"maximum":79.3333})",
                 {"79.0", "78.55", "79.3333", "79.33329", "78.6", "79"},
                 {"79.33331", "78.549", "79.4", "80", "78", "78.5"});
  ExpectLanguage(R"({"type":"number","minimum":-2.5,"maximum":-0.25})",
                 {"-2.5", "-0.25", "-1.75", "-1", "-2.50"},
                 {"-2.51", "-0.2", "0", "-0.0", "-3", "2"});
  ExpectLanguage(R"({"type":"number","exclusiveMaximum":0})", {"-0.001", "-7.5"},
                 {"-0.0", "0.0", "0", "0.5"});
  ExpectLanguage(R"({"type":"number","minimum":-0.5,"maximum":0.5})",
                 {"-0.5", "-0.05", "0", "0.0", "0.5"}, {"-0.51", "0.51", "-1", "1", "-0"});
  // Up to 15 significant digits: the fraction is longer where the whole part is short.
  ExpectLanguage(R"({"type":"number","minimum":0,"maximum":1})",
                 {"0.0160425", "0.12345678901234", "1.0"}, {"0.123456789012345", "1.01"});
  ExpectLanguage(R"({"type":"number","minimum":0})", {"123456789.123456"},
                 {"123456789.1234567", "1234567890.5"});
  // multipleOf 0.1 caps the fraction at one digit.
  ExpectLanguage(R"({"type":"number","multipleOf":0.1,"minimum":0.5,"maximum":1.5})",
                 {"0.5", "1.2", "1.5", "1"}, {"0.4", "1.25", "1.6"});
}

TEST(JsonSchemaTest, NumberBoundsMatchABruteForceCheck) {
  // Bounds and values in hundredths: the value k/100 is written as the shortest decimal and
  // with two fraction digits; both must be admitted exactly when the bounds hold.
  const std::vector<int> bounds = {-250, -100, -25, 0, 10, 75, 100, 205};
  auto text = [](int k, bool two_digits) {
    const int a = std::abs(k);
    std::string t = std::to_string(a / 100);
    char frac[4];
    std::snprintf(frac, sizeof(frac), "%02d", a % 100);
    std::string f = frac;
    if (!two_digits) {
      while (!f.empty() && f.back() == '0') f.pop_back();
    }
    if (!f.empty()) t += "." + f;
    return (k < 0 ? "-" : "") + t;
  };
  for (int lo : bounds) {
    for (int hi : bounds) {
      if (lo > hi) continue;
      for (int exclusive = 0; exclusive < 4; ++exclusive) {
        const bool lo_x = exclusive & 1, hi_x = exclusive & 2;
        if ((lo_x || hi_x) && lo == hi) continue;
        json schema = {{"type", "number"}};
        schema[lo_x ? "exclusiveMinimum" : "minimum"] = lo / 100.0;
        schema[hi_x ? "exclusiveMaximum" : "maximum"] = hi / 100.0;
        Result<Grammar> g = CompileSchema(schema);
        ASSERT_TRUE(g.ok()) << schema.dump() << " " << g.status().ToString();
        for (int k = -300; k <= 300; ++k) {
          const bool in = (lo_x ? k > lo : k >= lo) && (hi_x ? k < hi : k <= hi);
          for (bool two : {false, true}) {
            const std::string t = text(k, two);
            if (t == "-0" || t == "-0.00") continue;  // -0 is never generated
            ASSERT_EQ(FullMatch(*g, t), in) << schema.dump() << " " << t;
          }
        }
      }
    }
  }
}

TEST(JsonSchemaTest, StringsEscapesAndLengths) {
  ExpectLanguage(
      R"({"type":"string"})",
      {R"("")", R"("abc")", R"("a\"b")", R"("\\\/\b\f\n\r\t")", R"("\u00e9\u4E2D")",
       "\"\xC3\xA9\xE4\xB8\xAD\""},
      {R"("a)", R"("\x")", R"("\u12")", R"("\ud83d")", "\"a\nb\"", "\"\x01\"", R"(abc)"});
  // Lengths count characters; an escape is one.
  ExpectLanguage(R"({"type":"string","minLength":2,"maxLength":3})",
                 {R"("ab")", R"("abc")", R"("\n\t")", "\"\xC3\xA9\xC3\xA9\xC3\xA9\""},
                 {R"("a")", R"("abcd")", R"("\n")", "\"\xC3\xA9\""});
  EXPECT_NE(ErrorOf(R"({"type":"string","minLength":3,"maxLength":2})").find("minLength"),
            std::string::npos);
}

TEST(JsonSchemaTest, Formats) {
  ExpectLanguage(R"({"type":"string","format":"date"})",
                 {R"("2024-02-29")", R"("2023-12-31")", R"("2000-02-29")", R"("0001-01-01")"},
                 {R"("2023-02-29")", R"("1900-02-29")", R"("2023-04-31")", R"("2023-13-01")",
                  R"("0000-01-01")", R"("2023-1-01")"});
  ExpectLanguage(R"({"type":"string","format":"time"})",
                 {R"("23:59:59Z")", R"("08:30:00.123+05:30")", R"("00:00:00-00:00")"},
                 {R"("24:00:00Z")", R"("12:60:00Z")", R"("12:00:00")"});
  ExpectLanguage(R"({"type":"string","format":"date-time"})", {R"("2024-01-15T10:20:30Z")"},
                 {R"("2024-01-15 10:20:30Z")"});
  ExpectLanguage(
      R"({"type":"string","format":"uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"},
      {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400")"});
  ExpectLanguage(R"({"type":"string","format":"email"})",
                 {R"("john.doe@example.com")", R"("a+b@mail.co.uk")"},
                 {R"("john@")", R"("@example.com")", R"("a@b")", R"("a b@example.com")"});
  ExpectLanguage(R"({"type":"string","format":"ipv4"})", {R"("192.168.0.1")", R"("0.0.0.0")"},
                 {R"("256.1.1.1")", R"("01.2.3.4")", R"("1.2.3")"});
  // A format's own lengths must fit the length bounds beside it.
  ExpectLanguage(R"({"type":"string","format":"date","minLength":10,"maxLength":10})",
                 {R"("2020-05-05")"}, {});
  EXPECT_NE(ErrorOf(R"({"type":"string","format":"email","maxLength":20})").find("maxLength"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"type":"string","format":"uri-template"})").find("uri-template"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"type":"string","format":"regex"})").find("regex"), std::string::npos);
}

TEST(JsonSchemaTest, NetworkAndDurationFormats) {
  ExpectLanguage(R"({"type":"string","format":"uri"})",
                 {R"("https://example.com/a/b?x=1&y=%20#top")", R"("mailto:a@b.org")",
                  R"("urn:isbn:0451450523")", R"("file:///etc/hosts")",
                  R"("http://user:pw@host.example:8080/")", R"("http://1.2.3.4")"},
                 {R"("/relative/path")", R"("example.com")", R"("http://a b")", R"("http://x/%zz")",
                  R"("1http://x")", R"("http://h:port/")", R"("http://x/#a#b")", R"("")"});
  ExpectLanguage(R"({"type":"string","format":"uri-reference"})",
                 {R"("/relative/path?q")", R"("../up")", R"("#frag")", R"("")",
                  R"("https://example.com")", R"("//host/x")"},
                 {R"("a:b c")", R"("%g0")", R"("a b")"});
  ExpectLanguage(
      R"({"type":"string","format":"hostname"})",
      {R"("localhost")", R"("www.Example.com")", R"("a-b.c0.io")"},
      {R"("-a.com")", R"("a-.com")", R"("a..b")", R"("1.2.3.4")", R"("a_b.com")", R"("")"});
  ExpectLanguage(
      R"({"type":"string","format":"ipv6"})",
      {R"("::")", R"("::1")", R"("2001:db8::8a2e:370:7334")", R"("fe80::1:2")",
       R"("1:2:3:4:5:6:7:8")", R"("::ffff:192.0.2.128")", R"("1::")", R"("1:2:3:4:5:6::8")",
       R"("ABCD:ef01::")"},
      {R"(":::")", R"("1:2:3:4:5:6:7:8:9")", R"("1::2::3")", R"("12345::")", R"("1:2:3:4:5:6:7")",
       R"("::ffff:256.0.0.1")", R"("g::")", R"("1:2:3:4:5:6:7::8")"});
  ExpectLanguage(
      R"({"type":"string","format":"duration"})",
      {R"("P1Y2M3DT4H5M6S")", R"("PT36H")", R"("P3W")", R"("P1D")", R"("PT0S")", R"("P1M")"},
      {R"("P")", R"("PT")", R"("P1H")", R"("P1S")", R"("1D")", R"("P1DT")", R"("P1W2D")"});
  ExpectLanguage(R"({"type":"string","format":"json-pointer"})", {R"("")", R"("/a~1b/0")"},
                 {R"("a")", R"("/a~2")"});
  ExpectLanguage(R"({"type":"string","format":"relative-json-pointer"})",
                 {R"("0")", R"("1/a")", R"("2#")"}, {R"("01")", R"("/a")", R"("-1")"});
}

TEST(JsonSchemaTest, FormatsJsonSchemaDoesNotDefineAreAnnotations) {
  // Vendor and OpenAPI format names constrain nothing (a number ignores every string format).
  ExpectLanguage(R"({"type":"string","format":"topic"})", {R"("anything at all")", R"("")"}, {"1"});
  ExpectLanguage(R"({"type":"string","format":"url","pattern":"^a+$"})", {R"("aa")"}, {R"("b")"});
  ExpectLanguage(R"({"type":"integer","format":"uint"})", {"7", "-7"}, {"\"7\""});
  ExpectLanguage(R"({"type":"number","format":"date-time"})", {"1.5"}, {"\"x\""});
  // Without a type an annotation format does not make the value a string.
  ExpectLanguage(R"({"format":"color"})", {"1", "\"red\"", "null"}, {});
}

TEST(JsonSchemaTest, PatternsAreSearchedAsJsonSchemaSays) {
  // Without anchors a string contains a match; each top-level alternative is anchored apart.
  ExpectLanguage(R"({"type":"string","pattern":"[0-9]{3}"})", {R"("ab123cd")", R"("999")"},
                 {R"("ab12")", R"("")"});
  ExpectLanguage(R"({"type":"string","pattern":"^https?://"})",
                 {R"("https://x.org/a")", R"("http://")"}, {R"("ftp://x")", R"(" http://x")"});
  ExpectLanguage(R"({"type":"string","pattern":"@.+$"})", {R"("me@x")"}, {R"("me@")"});
  ExpectLanguage(R"({"type":"string","pattern":"a|^b$"})", {R"("xay")", R"("b")"},
                 {R"("bb")", R"("c")"});
  ExpectLanguage(R"({"type":"string","pattern":"x\\$"})", {R"("ax$b")"}, {R"("ax")"});
  ExpectLanguage(R"({"type":"string","pattern":"[|]z"})", {R"("a|z")"}, {R"("z")"});
}

TEST(JsonSchemaTest, Patterns) {
  ExpectLanguage(R"({"type":"string","pattern":"^[A-Z]{2}-[0-9]{3}$"})", {R"("AB-123")"},
                 {R"("ab-123")", R"("AB-1234")", R"("AB123")"});
  // Characters that would need escaping are left out of pattern strings.
  ExpectLanguage(R"({"type":"string","pattern":"^a.c$"})", {R"("abc")", R"("a-c")"},
                 {R"("a\"c")", R"("a\\c")", R"("a\nc")"});
  ExpectLanguage(R"({"type":"string","pattern":"^[a-z]{1,5}$","maxLength":5})", {R"("abc")"},
                 {R"("abcdef")"});
  EXPECT_NE(ErrorOf(R"({"type":"string","pattern":"^[a-z]+$","maxLength":8})").find("maxLength"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"type":"string","pattern":"^\"$"})").find("escaping"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"type":"string","pattern":"(a"})").find("pattern"), std::string::npos);
}

TEST(JsonSchemaTest, ObjectsWithOptionalAndRequiredProperties) {
  const char* schema = R"({"type":"object","properties":{"a":{"type":"integer"},
      "b":{"type":"string","maxLength":3},"c":{"type":"boolean"}},"required":["b"],
      "additionalProperties":false})";
  ExpectLanguage(schema,
                 {R"({"b":""})", R"({"a":1,"b":"x"})", R"({"b":"x","c":true})",
                  R"({"a":1,"b":"x","c":false})", R"({"b":"x","a":1})"},
                 {R"({})", R"({"a":1})", R"({"b":"x",})", R"({,"b":"x"})",
                  R"({"a":1,"b":"x","d":1})", R"({"a":1"b":"x"})"});
  ExpectLanguage(R"({"type":"object","properties":{"a":{"type":"integer"}},
      "additionalProperties":false})",
                 {R"({})", R"({"a":5})"}, {R"({"a":5,"a":6})", R"({"b":1})"});
}

TEST(JsonSchemaTest, PropertiesComeInAnyOrderEachAtMostOnce) {
  const char* abc = R"({"type":"object","properties":{"a":{"type":"integer"},
      "b":{"type":"string"},"c":{"type":"boolean"}},"required":["a","c"],
      "additionalProperties":false})";
  ExpectLanguage(
      abc,
      {R"({"a":1,"c":true})", R"({"c":true,"a":1})", R"({"b":"x","c":true,"a":1})",
       R"({"c":false,"b":"x","a":1})", R"({"a":1,"b":"x","c":true})"},
      {R"({"c":true,"a":1,"c":true})", R"({"a":1,"a":1,"c":true})", R"({"c":true,"b":"x"})",
       R"({"b":"x"})", R"({"c":1,"a":true})", R"({"c":true,"a":1,"d":0})", R"({"c":true,,"a":1})"});
  // A missing required property is refused where the object would close.
  Result<Grammar> g = CompileText(abc);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(PrefixMatch(*g, R"({"c":true,"b":"x")"));
  EXPECT_FALSE(PrefixMatch(*g, R"({"c":true,"b":"x"})"));
  EXPECT_FALSE(PrefixMatch(*g, R"({"c":true,"c")"));
  // With whitespace, and nested objects each in their own order.
  JsonSchemaOptions flex;
  flex.flexible_whitespace = true;
  ExpectLanguage(R"({"type":"object","properties":{"outer":{"type":"integer"},
      "inner":{"type":"object","properties":{"x":{"type":"integer"},"y":{"type":"integer"}},
      "required":["x","y"],"additionalProperties":false}},"required":["inner"],
      "additionalProperties":false})",
                 {R"({"inner":{"y":1,"x":2},"outer":3})", "{ \"inner\" : { \"y\":1 , \"x\":2 } }",
                  R"({"outer":3,"inner":{"x":2,"y":1}})"},
                 {R"({"inner":{"y":1}})", R"({"inner":{"y":1,"x":2,"y":3}})",
                  R"({"inner":{"x":1,"y":2},"inner":{"x":1,"y":2}})", R"({"outer":3})",
                  R"({"inner":{"x":1,"y":2,"outer":3}})"},
                 flex);
}

TEST(JsonSchemaTest, ExtraPropertiesComeAfterTheRequiredOnes) {
  // Extras anywhere once every required property is written (listed ones in any order); before
  // that only up to three extra keys that start with '$', ahead of the rest ("$schema" leads
  // real documents), so a model cannot put the required ones off behind extra keys.
  ExpectLanguage(R"({"type":"object","properties":{"id":{"type":"integer"},
      "name":{"type":"string"}},"required":["id"],"additionalProperties":{"type":"boolean"}})",
                 {R"({"id":1,"x":true})", R"({"name":"n","id":1,"x":true,"y":false})",
                  R"({"id":1,"x":true,"name":"n"})", R"({"$x":true,"id":1})",
                  R"({"$x":true,"$y":false,"$":true,"name":"n","id":1,"$z":true})"},
                 {R"({"x":true})", R"({"id":1,"x":1})", R"({"id":1,"x":true,"id":2})",
                  R"({"name":"n","id":1,"name":"m"})", R"({"x":true,"id":1})",
                  R"({"name":"n","x":true,"id":1})", R"({"name":"n","$x":true,"id":1})",
                  R"({"$a":true,"$b":true,"$c":true,"$d":true,"id":1})", R"({"$x":1,"id":1})"});
  // A listed name is no extra key, early or late.
  ExpectLanguage(R"({"properties":{"id":{"type":"integer"},"$k":{"type":"integer"}},
      "required":["id"],"additionalProperties":true})",
                 {R"({"$k":1,"id":1})", R"({"$j":"x","id":1})"},
                 {R"({"$k":1,"$k":2,"id":1})", R"({"$k":"x","id":1})"});
  // Without required properties, extras come anywhere.
  ExpectLanguage(R"({"properties":{"id":{"type":"integer"}},"additionalProperties":true})",
                 {R"({"x":1,"id":1,"y":2})", R"({"x":1})"}, {R"({"id":1,"x":1,"id":2})"});
  // Pattern keys too (and they never come early).
  ExpectLanguage(
      R"({"properties":{"id":{"type":"integer"}},"required":["id"],
      "patternProperties":{"^x-":{"type":"string"}},"additionalProperties":false})",
      {R"({"id":1,"x-a":"s"})", R"({"id":1,"x-a":"s","x-b":"t"})"},
      {R"({"x-a":"s"})", R"({"y":"s","id":1})", R"({"id":1,"x-a":1})", R"({"x-a":"s","id":1})"});
}

TEST(JsonSchemaTest, PropertyCountsHoldInAnyOrder) {
  const char* abc = R"("properties":{"a":{"type":"integer"},"b":{"type":"integer"},
      "c":{"type":"integer"}})";
  ExpectLanguage(std::string("{") + abc + R"(,"minProperties":2,"maxProperties":2,
      "additionalProperties":false})",
                 {R"({"c":1,"a":2})", R"({"b":1,"c":2})", R"({"c":1,"b":2})"},
                 {R"({"c":1})", R"({"c":1,"b":2,"a":3})", "{}"});
  // Extras count too, wherever they come.
  ExpectLanguage(std::string("{") + abc + R"(,"required":["c"],"maxProperties":2})",
                 {R"({"c":2,"x":1})", R"({"c":2,"x":[]})", R"({"b":1,"c":2})"},
                 {R"({"c":3,"x":1,"y":2})", R"({"c":2,"x":1,"a":3})"});
  // Once the count is full only the missing required property may come.
  Result<Grammar> g = CompileText(std::string("{") + abc + R"(,"required":["c"],
      "maxProperties":2,"additionalProperties":false})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(PrefixMatch(*g, R"({"a":1,"c")"));
  EXPECT_FALSE(PrefixMatch(*g, R"({"a":1,"b")"));
}

TEST(JsonSchemaTest, RewrittenObjectsTakeAnyOrderToo) {
  // dependentRequired (a → b) becomes branches; each branch is an object in any order.
  ExpectLanguage(R"({"properties":{"a":{"type":"integer"},"b":{"type":"integer"},
      "c":{"type":"string"}},"additionalProperties":false,"dependentRequired":{"a":["b"]}})",
                 {R"({"b":2,"a":1})", R"({"c":"x","b":2,"a":1})", R"({"c":"x"})"},
                 {R"({"c":"x","a":1})", R"({"b":2,"a":1,"b":3})"});
  // allOf merges the properties and the required names of both.
  ExpectLanguage(R"({"allOf":[{"properties":{"a":{"type":"integer"}},"required":["a"]},
      {"properties":{"b":{"type":"integer"}},"required":["b"]}]})",
                 {R"({"b":2,"a":1})", R"({"a":1,"b":2})", R"({"b":2,"a":1,"x":0})"},
                 {R"({"b":2})", R"({"a":1})", R"({"b":2,"a":1,"a":1})"});
}

TEST(JsonSchemaTest, OverSixtyFourPropertiesKeepTheSchemasOrder) {
  json schema = {{"type", "object"}, {"additionalProperties", false}};
  for (int i = 0; i < 65; ++i) {
    schema["properties"][fmt::format("p{}", i)] = {{"type", "integer"}};
  }
  schema["required"] = {"p0", "p64"};
  Result<Grammar> g = CompileSchema(schema);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(FullMatch(*g, R"({"p0":1,"p3":2,"p64":3})"));
  EXPECT_FALSE(FullMatch(*g, R"({"p0":1,"p64":3,"p3":2})"));
  EXPECT_FALSE(FullMatch(*g, R"({"p64":3,"p0":1})"));
  EXPECT_FALSE(FullMatch(*g, R"({"p0":1})"));
  // 64 go into a set: any order.
  schema["properties"].erase("p64");
  schema["required"] = {"p0", "p63", "p40"};
  g = CompileSchema(schema);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(FullMatch(*g, R"({"p63":3,"p5":2,"p40":1,"p0":1,"p50":4})"));
  EXPECT_FALSE(FullMatch(*g, R"({"p63":3,"p5":2,"p0":1})"));
  EXPECT_FALSE(FullMatch(*g, R"({"p63":3,"p40":2,"p0":1,"p63":2})"));
}

TEST(JsonSchemaTest, AdditionalProperties) {
  // Extra keys differ from every listed name.
  ExpectLanguage(R"({"type":"object","properties":{"id":{"type":"integer"}}})",
                 {R"({"id":1,"name":"x"})", R"({"i":[1,{"k":null}]})", R"({"idx":2})",
                  R"({"name":1,"other":2})", R"({})"},
                 {R"({"id":1,"id":2})", R"({"id":"x"})", R"({"i\u0064":1})"});
  // Extra keys of any length, with the escapes JSON requires but none that could spell a name.
  const std::string long_key(200, 'k');
  ExpectLanguage(R"({"properties":{"a\"b":{"type":"integer"},"id":{"type":"integer"}}})",
                 {"{\"" + long_key + "\":1}", R"({"error\": x":null})", R"({"a\nb":1})",
                  R"({"\u001f":1})", R"({"a\\":1})", R"({"a\"b":1,"b\"c":2})"},
                 {R"({"a\"b":1,"a\"b":2})", R"({"a\u0022b":1})", R"({"a\/":1})", R"({"i\u0064":1})",
                  R"({"\u0020":1})"});
  ExpectLanguage(R"({"type":"object","additionalProperties":{"type":"integer"}})",
                 {R"({})", R"({"a":1,"b\n":2})"}, {R"({"a":"x"})"});
  ExpectLanguage(R"({"type":"object"})", {R"({})", R"({"a":{"b":[true,null,1.5,"s"]}})"},
                 {R"({"a"})", R"([])"});
  // A required name without a listed schema takes additionalProperties' (once).
  ExpectLanguage(
      R"({"type":"object","required":["x","x"],"additionalProperties":{"type":"integer"}})",
      {R"({"x":1})", R"({"x":1,"y":2})"}, {R"({})", R"({"x":1,"x":1})", R"({"x":true})"});
  // strict: no extra properties unless asked for.
  JsonSchemaOptions strict;
  strict.strict = true;
  ExpectLanguage(R"({"type":"object","properties":{"id":{"type":"integer"}}})",
                 {R"({"id":1})", R"({})"}, {R"({"id":1,"x":2})"}, strict);
  EXPECT_NE(ErrorOf(R"({"type":"object","properties":{},"required":["x"],
      "additionalProperties":false})")
                .find("required"),
            std::string::npos);
}

TEST(JsonSchemaTest, Arrays) {
  ExpectLanguage(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
                 {"[1]", "[1,2,3]"}, {"[]", "[1,2,3,4]", "[1,]", "[,1]", "[\"a\"]"});
  ExpectLanguage(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],
      "items":false})",
                 {"[]", R"(["a"])", R"(["a",1])"}, {R"(["a",1,2])", R"([1])"});
  ExpectLanguage(R"({"type":"array","prefixItems":[{"type":"string"}],
      "items":{"type":"boolean"},"minItems":2})",
                 {R"(["a",true])", R"(["a",true,false])"}, {R"(["a"])", R"(["a",1])"});
  ExpectLanguage(R"({"type":"array"})", {"[]", R"([1,"a",[null],{}])"}, {"[", "[1 2]"});
}

TEST(JsonSchemaTest, EnumsAndConsts) {
  ExpectLanguage(R"({"enum":["red","green",3,null,{"a":[1,2]},true]})",
                 {R"("red")", R"("green")", "3", "null", R"({"a":[1,2]})", "true"},
                 {R"("blue")", "4", "false", R"({"a":[1, 2]})"});
  ExpectLanguage(R"({"type":"string","enum":["a","bb",1]})", {R"("a")", R"("bb")"}, {"1"});
  ExpectLanguage(R"({"const":"fixed"})", {R"("fixed")"}, {R"("other")"});
  ExpectLanguage(R"({"type":"string","enum":["a","bbbb"],"maxLength":2})", {R"("a")"},
                 {R"("bbbb")"});
  EXPECT_NE(ErrorOf(R"({"type":"integer","enum":["a"]})").find("enum"), std::string::npos);
  // Numbers are equal by value: a whole one in either spelling, but an "integer" without a
  // fraction.
  ExpectLanguage(R"({"enum":[2.0,"x",3]})", {"2", "2.0", "3", "3.0"}, {"2.00", "2.5", "4"});
  ExpectLanguage(R"({"type":"integer","enum":[2.0]})", {"2"}, {"2.0"});
  ExpectLanguage(R"({"enum":[[1.0]]})", {"[1]", "[1.0]"}, {"1"});
}

TEST(JsonSchemaTest, AnyOfOneOfAllOf) {
  ExpectLanguage(R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":2}]})",
                 {"1", R"("ab")"}, {R"("abc")", "true"});
  ExpectLanguage(R"({"oneOf":[{"const":1},{"const":"one"}]})", {"1", R"("one")"}, {"2"});
  // allOf of objects merges properties and required.
  ExpectLanguage(R"({"allOf":[
      {"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
      {"properties":{"b":{"type":"string","maxLength":2}},"required":["b"]}]})",
                 {R"({"a":1,"b":"x"})"}, {R"({"a":1})", R"({"b":"x"})", R"({"a":1,"b":"xyz"})"});
  // A property that one side forbids (additionalProperties false) is left out.
  ExpectLanguage(R"({"allOf":[
      {"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false},
      {"type":"object","properties":{"b":{"type":"integer"}}}]})",
                 {R"({"a":1})", R"({})"}, {R"({"b":1})", R"({"a":1,"b":2})"});
  // Constraints beside anyOf apply to every branch.
  ExpectLanguage(R"({"type":"object","properties":{"kind":{"type":"string","maxLength":5},
      "n":{"type":"integer"}},"additionalProperties":false,
      "anyOf":[{"required":["kind"]},{"required":["n"]}]})",
                 {R"({"kind":"a"})", R"({"n":1})", R"({"kind":"a","n":1})"}, {R"({})"});
  EXPECT_NE(ErrorOf(R"({"allOf":[{"type":"string"},{"type":"integer"}]})").find("allOf"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"allOf":[{"pattern":"a"},{"pattern":"b"}]})").find("pattern"),
            std::string::npos);
}

TEST(JsonSchemaTest, RefsAndRecursion) {
  const char* tree = R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object",
      "properties":{"value":{"type":"integer"},"children":{"type":"array",
      "items":{"$ref":"#/$defs/node"},"maxItems":3}},"required":["value"],
      "additionalProperties":false}}})";
  ExpectLanguage(tree,
                 {R"({"value":1})", R"({"value":1,"children":[]})",
                  R"({"value":1,"children":[{"value":2},{"value":3,"children":[{"value":4}]}]})",
                  R"({"children":[],"value":1})"},
                 {R"({"value":1,"children":[{}]})", R"({"value":1,"children":[1]})"});
  const char* list = R"({"type":"object","properties":{"head":{"type":"integer"},
      "tail":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["head","tail"],
      "additionalProperties":false})";
  ExpectLanguage(list, {R"({"head":1,"tail":null})", R"({"head":1,"tail":{"head":2,"tail":null}})"},
                 {R"({"head":1})"});
  ExpectLanguage(R"({"definitions":{"a~b":{"type":"integer"},"c/d":{"type":"boolean"}},
      "type":"array","prefixItems":[{"$ref":"#/definitions/a~0b"},{"$ref":"#/definitions/c~1d"}],
      "items":false,"minItems":2})",
                 {"[1,true]"}, {"[true,1]"});
  // $ref beside other keywords is merged with them.
  ExpectLanguage(R"({"$defs":{"base":{"type":"object","properties":{"a":{"type":"integer"}},
      "additionalProperties":false}},"$ref":"#/$defs/base","required":["a"]})",
                 {R"({"a":1})"}, {R"({})", R"({"a":1,"b":2})"});
  // Siblings' additionalProperties false forbids what only the target lists: nothing is left.
  EXPECT_NE(ErrorOf(R"({"$defs":{"base":{"type":"object","properties":{"a":{"type":"integer"}}}},
      "$ref":"#/$defs/base","required":["a"],"additionalProperties":false})")
                .find("required"),
            std::string::npos);
  // Drafts 3 to 7 ignore a $ref's siblings; later drafts (and no "$schema") apply them beside it.
  const std::string with_siblings = R"("definitions":{"f":{"type":"object","properties":{
      "c":{"type":"boolean"}}}},"properties":{"x":{"$ref":"#/definitions/f","type":"string",
      "additionalProperties":false}}})";
  ExpectLanguage(R"({"$schema":"http://json-schema.org/draft-07/schema#",)" + with_siblings,
                 {R"({"x":{"c":true}})", R"({"x":{}})"}, {R"({"x":"s"})", R"({"x":{"c":1}})"});
  ExpectLanguage(R"({"$schema":"http://json-schema.org/draft-04/schema#","$ref":"#/definitions/f",
      "type":"string",)" +
                     with_siblings,
                 {R"({"c":true})"}, {R"("s")"});
  EXPECT_NE(ErrorOf(R"({"$schema":"https://json-schema.org/draft/2019-09/schema",)" + with_siblings)
                .find("do not intersect"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"$ref":"#"})").find("$ref"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"$ref":"https://example.com/s.json"})").find("$ref"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"$ref":"#/$defs/missing"})").find("missing"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"$defs":{"a":{"allOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a",
      "type":"object"})")
                .find("$ref"),
            std::string::npos);
}

TEST(JsonSchemaTest, FlexibleWhitespace) {
  JsonSchemaOptions flex;
  flex.flexible_whitespace = true;
  const char* schema = R"({"type":"object","properties":{"a":{"type":"array",
      "items":{"type":"integer"}},"b":{"type":"boolean"}},"additionalProperties":false})";
  ExpectLanguage(schema,
                 {R"({"a":[1,2],"b":true})", "{ \"a\" : [ 1 ,\n\t2 ] , \"b\":true }", "{ }",
                  "{\"b\":\n       true}"},
                 {" {}", "{}\n", "{\"b\":         true}", "{\"a\":[1 2]}"}, flex);
  ExpectLanguage(schema, {R"({"a":[],"b":false})"}, {R"({"a": []})"});  // compact by default
}

TEST(JsonSchemaTest, AnnotationsAndUnknownKeywordsAreIgnoredUnenforcedOnesRefused) {
  ExpectLanguage(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"x",
      "title":"T","description":"d","examples":[1],"default":2,"$comment":"c",
      "deprecated":false,"readOnly":true,"writeOnly":false,"x-kubernetes-int-or-string":true,
      "type":"integer","maximum":3,"minimum":1})",
                 {"1", "3"}, {"4"});
  // Vendor keywords, draft-04's id, misspellings and content annotations, at any depth, beside
  // enum too: the specification says to ignore what an implementation does not know.
  ExpectLanguage(R"({"id":"http://x/s#","_format":"y","javaType":"a.B","@context":{"k":1},
      "type":"object","self":{"href":"{id}"},"links":[{"rel":"self"}],"version":"1",
      "properties":{
        "a":{"type":"string","faker":"name.first","readonly":true,"contentEncoding":"base64",
             "contentMediaType":"text/plain","$default":"q","copyright":"c","maxLenght":2},
        "b":{"enum":[1,2],"javaName":"B","unknownKeyword":{"type":"string"}}},
      "required":["a","b"],"additionalProperties":false})",
                 {R"({"a":"xyz","b":2})"}, {R"({"a":"x","b":3})", R"({"a":1,"b":1})", "{}"});
  // Unenforced keywords in their inert forms constrain nothing.
  ExpectLanguage(R"({"type":"array","uniqueItems":false,"then":{"type":"string"},
      "minContains":2,"additionalItems":false,"items":{"type":"integer"}})",
                 {"[1,1]", "[]"}, {"[\"a\"]"});
  ExpectLanguage(R"({"type":"object","minProperties":0,"patternProperties":{},
      "dependentRequired":{},"propertyNames":true,"unevaluatedProperties":{}})",
                 {"{}", R"({"a":1})"}, {"[]"});
  // Unenforced keywords that constrain are refused, naming the keyword and where it is.
  const std::string e = ErrorOf(R"({"properties":{"a":{"propertyNames":{"maxLength":2}}}})");
  EXPECT_NE(e.find("'propertyNames'"), std::string::npos) << e;
  EXPECT_NE(e.find("/properties/a"), std::string::npos) << e;
  for (const char* schema :
       {R"({"type":"object","propertyNames":{"pattern":"^a"}})",
        R"({"if":{"type":"string"},"then":{"minLength":2}})",
        R"({"type":"array","contains":{"type":"string"}})",
        R"({"type":"object","propertyNames":{"maxLength":3}})",
        R"({"type":"array","contains":{"const":1}})", R"({"enum":[1,2],"contains":{}})",
        R"({"unevaluatedProperties":false})"}) {
    const std::string error = ErrorOf(schema);
    EXPECT_NE(error.find("unsupported JSON Schema keyword"), std::string::npos)
        << schema << ": " << error;
  }
  EXPECT_NE(ErrorOf("[1]").find("object or a boolean"), std::string::npos);
  EXPECT_NE(ErrorOf("false").find("false"), std::string::npos);
  EXPECT_EQ(ErrorOf("true"), "");
}

TEST(JsonSchemaTest, NotOverTypesOverNotAndOverFalse) {
  ExpectLanguage(R"({"not":{"type":"null"}})", {"1", "\"a\"", "[]", "{}", "true"}, {"null"});
  ExpectLanguage(R"({"type":["string","integer","null"],"not":{"type":["null","integer"]}})",
                 {"\"a\""}, {"1", "null"});
  ExpectLanguage(R"({"type":"integer","nullable":true,"not":{"type":"null"}})", {"3"}, {"null"});
  ExpectLanguage(R"({"not":{"not":{"type":"integer","minimum":2}}})", {"2", "30"}, {"1", "\"a\""});
  ExpectLanguage(R"({"type":"boolean","not":false})", {"true"}, {"1"});
  // Beside anyOf the reduced types reach every branch.
  ExpectLanguage(R"({"anyOf":[{"type":"string"},{"type":"null"}],"not":{"type":"null"}})",
                 {"\"x\""}, {"null"});
  for (const char* schema : {R"({"not":{}})", R"({"not":true})", R"({"not":{"description":"d"}})",
                             R"({"type":"string","not":{"type":"string"}})"}) {
    EXPECT_NE(ErrorOf(schema).find("matches nothing"), std::string::npos) << schema;
  }
  EXPECT_NE(ErrorOf(R"({"type":"number","not":{"type":"integer"}})").find("integers"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"not":{"enum":[1]}})").find("'not'"), std::string::npos);
  // A branch that matches nothing is left out of anyOf / oneOf (the union is the same); only
  // when every branch does is the schema refused.
  ExpectLanguage(R"({"anyOf":[{"not":{}},{"type":"integer"}]})", {"1"}, {"\"a\"", "null"});
  ExpectLanguage(R"({"oneOf":[false,{"type":"string","enum":[1]},{"type":"boolean"}]})", {"true"},
                 {"1"});
  ExpectLanguage(
      R"({"anyOf":[{"type":"object","properties":{"a":false},"required":["a"]},{"type":"null"}]})",
      {"null"}, {R"({"a":1})", "{}"});
  EXPECT_NE(ErrorOf(R"({"anyOf":[{"not":{}},false]})").find("matches nothing"), std::string::npos);
  // With "w", "t" must be both "a" and "b": it can only be absent.
  ExpectLanguage(
      R"({"type":"object","properties":{"t":{"enum":["a"]},"w":{}},
          "dependencies":{"w":{"properties":{"t":{"enum":["b"]}}}}})",
      {R"({"t":"a"})", "{}", R"({"w":1})"}, {R"({"t":"a","w":1})"});
  // Malformed or unsupported branches are still errors.
  EXPECT_NE(ErrorOf(R"({"anyOf":[{"type":"nope"},{"type":"null"}]})").find("nope"),
            std::string::npos);
}

TEST(JsonSchemaTest, MinAndMaxProperties) {
  // Listed properties, optional and required, with and without extras.
  const char* ab = R"("properties":{"a":{"type":"integer"},"b":{"type":"integer"}})";
  ExpectLanguage(std::string("{") + ab + R"(,"minProperties":1,"additionalProperties":false})",
                 {R"({"a":1})", R"({"b":2})", R"({"a":1,"b":2})"}, {"{}"});
  ExpectLanguage(std::string("{") + ab + R"(,"maxProperties":1,"additionalProperties":false})",
                 {"{}", R"({"a":1})", R"({"b":2})"}, {R"({"a":1,"b":2})"});
  ExpectLanguage(std::string("{") + ab + R"(,"minProperties":3,"maxProperties":3})",
                 {R"({"a":1,"b":2,"c":3})", R"({"a":1,"x":[],"y":{}})", R"({"p":1,"q":2,"r":3})"},
                 {R"({"a":1,"b":2})", R"({"a":1,"b":2,"c":3,"d":4})", "{}"});
  // Only extras: a map with one to two entries.
  ExpectLanguage(R"({"type":"object","additionalProperties":{"type":"string"},"minProperties":1,
      "maxProperties":2})",
                 {R"({"k":"v"})", R"({"k":"v","l":"w"})"},
                 {"{}", R"({"k":"v","l":"w","m":"x"})", R"({"k":1})"});
  ExpectLanguage(R"({"minProperties":1})", {R"({"a":null})", "1"}, {"{}"});  // no type: any other
  // Bounds the listed properties cannot meet are refused.
  EXPECT_NE(ErrorOf(std::string("{") + ab + R"(,"required":["a","b"],"maxProperties":1})")
                .find("maxProperties"),
            std::string::npos);
  EXPECT_NE(ErrorOf(std::string("{") + ab + R"(,"additionalProperties":false,"minProperties":3})")
                .find("minProperties"),
            std::string::npos);
}

TEST(JsonSchemaTest, EnumObjectsTakeWhitespaceWhereTheOptionsAllowIt) {
  JsonSchemaOptions flex;
  flex.flexible_whitespace = true;
  ExpectLanguage(R"({"const":{"a":[1,2],"b":{}}})",
                 {R"({"a":[1,2],"b":{}})", "{ \"a\" : [ 1 , 2 ] , \"b\":{} }"},
                 {R"({"a":[1,2]})", R"({"b":{},"a":[1,2]})"}, flex);
  ExpectLanguage(R"({"enum":[[1],{"x":null}]})", {"[1]", R"({"x":null})"}, {"[ 1]"});
}

TEST(JsonSchemaTest, FractionsNextToAnExclusiveWholeBound) {
  ExpectLanguage(R"({"type":"number","exclusiveMinimum":0})", {"0.5", "0.001", "1", "2.25"},
                 {"0", "0.0", "-0.5"});
  ExpectLanguage(R"({"type":"number","exclusiveMinimum":2,"maximum":3})", {"2.5", "3"},
                 {"2", "3.5"});
  ExpectLanguage(R"({"type":"number","exclusiveMaximum":0})", {"-0.25", "-3"}, {"0", "0.5"});
}

TEST(JsonSchemaTest, MultipleOf) {
  ExpectLanguage(R"({"type":"integer","multipleOf":7})", {"0", "7", "-14", "700", "7000000007"},
                 {"1", "8", "-15", "70000000071", "07"});
  ExpectLanguage(R"({"type":"integer","multipleOf":5,"minimum":-10,"maximum":12})",
                 {"-10", "0", "5", "10"}, {"15", "-15", "12", "3"});
  // A number that multipleOf makes whole may carry a zero fraction (an "integer" may not).
  ExpectLanguage(R"({"type":"number","multipleOf":1})", {"3", "-2", "6000.0", "3.00"},
                 {"1.5", "1e3", "6000.01", "3."});
  ExpectLanguage(R"({"type":"number","multipleOf":1,"minimum":0,"maximum":99999999})",
                 {"0", "6000", "6000.0"}, {"-1", "6000.5", "100000000"});
  ExpectLanguage(R"({"type":"number","multipleOf":5,"minimum":-10,"maximum":12})",
                 {"10.0", "-5", "0.00"}, {"12.0", "3.0"});
  ExpectLanguage(R"({"type":"integer","multipleOf":1})", {"3"}, {"3.0"});
  ExpectLanguage(R"({"type":"number","multipleOf":0.01})", {"3", "-2.5", "0.07", "10.25"},
                 {"0.001", "1e2", "1.234"});
  ExpectLanguage(R"({"type":"number","multipleOf":0.1,"minimum":0,"maximum":2})", {"0", "1.5", "2"},
                 {"1.55", "3"});
  ExpectLanguage(R"({"type":"number","multipleOf":10})", {"20", "-30"}, {"25", "20.5"});
  for (const char* schema :
       {R"({"type":"number","multipleOf":0.25})",
        R"({"type":"integer","multipleOf":3,"minimum":0})", R"({"type":"integer","multipleOf":0})",
        R"({"type":"integer","multipleOf":3,"minimum":0,"maximum":1e9})"}) {
    EXPECT_NE(ErrorOf(schema).find("multipleOf"), std::string::npos) << schema;
  }
}

TEST(JsonSchemaTest, AnAllOfThatReachesItselfIsAnErrorNotAStackOverflow) {
  // Found in MaskBench (Github_easy o17683): each level's allOf expands the next.
  const std::string e = ErrorOf(R"({"definitions":{"C":{"type":"object"},"F":{"type":"object",
      "properties":{"kids":{"allOf":[{"$ref":"#/definitions/F"},{"$ref":"#/definitions/C"}]}},
      "required":["kids"]}},"properties":{"F":{"$ref":"#/definitions/F"}},"required":["F"]})");
  EXPECT_NE(e.find("nests objects and arrays more than"), std::string::npos) << e;
  // Deep but finite nesting still compiles.
  std::string deep = R"({"type":"integer"})";
  for (int i = 0; i < 40; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  EXPECT_EQ(ErrorOf(deep), "");
}

TEST(JsonSchemaTest, AllOfIntersectsEnums) {
  ExpectLanguage(R"({"allOf":[{"enum":["a","b","c"]},{"enum":["c","b","d"]}]})",
                 {R"("b")", R"("c")"}, {R"("a")", R"("d")"});
  EXPECT_NE(ErrorOf(R"({"allOf":[{"enum":[1]},{"enum":[2]}]})").find("in common"),
            std::string::npos);
}

TEST(JsonSchemaTest, AnOptionalPropertyThatAdmitsNoValueIsLeftOut) {
  // Seen in real schemas: enum values of another type than the one declared.
  ExpectLanguage(R"({"type":"object","properties":{"b":{"type":"object","enum":["X","Y"]},
      "c":{"type":"integer"}}})",
                 {"{}", R"({"c":1})"}, {R"({"b":"X"})", R"({"b":{}})"});
  EXPECT_NE(ErrorOf(R"({"properties":{"b":{"type":"object","enum":["X"]}},"required":["b"]})")
                .find("no value satisfies"),
            std::string::npos);
}

TEST(JsonSchemaTest, APropertyWhoseSchemaIsFalseIsNeverAnExtraMember) {
  ExpectLanguage(R"({"properties":{"a":false}})", {"{}", R"({"b":1})"}, {R"({"a":1})"});
  ExpectLanguage(R"({"properties":{"a":false,"b":{"type":"integer"}}})", {R"({"b":1,"c":2})"},
                 {R"({"b":1,"a":2})"});
  ExpectLanguage(R"({"properties":{"x_a":false},"patternProperties":{"^x_":{"type":"integer"}}})",
                 {"{}", R"({"x_b":1})", R"({"x_ab":1})"}, {R"({"x_a":1})", R"({"x_b":"s"})"});
}

TEST(JsonSchemaTest, DependenciesAsBranches) {
  const char* abc = R"("properties":{"a":{"type":"integer"},"b":{"type":"integer"},
      "c":{"type":"string"}})";
  // Draft 7's array form and 2019's dependentRequired: a present → b present.
  for (const char* key : {"dependencies", "dependentRequired"}) {
    ExpectLanguage(std::string("{") + abc + ",\"" + key + R"(":{"a":["b"]}})",
                   {"{}", R"({"b":1})", R"({"a":1,"b":2})", R"({"c":"x"})"},
                   {R"({"a":1})", R"({"a":1,"c":"x"})"});
  }
  // The schema forms: a present → c required and b at most 3.
  for (const char* key : {"dependencies", "dependentSchemas"}) {
    ExpectLanguage(std::string("{") + abc + ",\"" + key +
                       R"(":{"a":{"required":["c"],"properties":{"b":{"maximum":3}}}}})",
                   {R"({"b":9})", R"({"a":1,"c":"x"})", R"({"a":1,"b":3,"c":"x"})"},
                   {R"({"a":1})", R"({"a":1,"b":4,"c":"x"})"});
  }
  // Two triggers, one of them required by the schema.
  ExpectLanguage(std::string("{") + abc + R"(,"required":["a"],"additionalProperties":false,
      "dependencies":{"a":["b"],"c":["a"]}})",
                 {R"({"a":1,"b":2})", R"({"a":1,"b":2,"c":"x"})"},
                 {R"({"a":1})", R"({"c":"x"})", R"({"b":2,"c":"x"})"});
  EXPECT_NE(ErrorOf(R"({"dependentRequired":{"a":{"type":"string"}}})").find("dependentRequired"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"dependencies":{"a":["b"],"b":["c"],"c":["d"],"d":["e"],"e":["f"]}})")
                .find("more than"),
            std::string::npos);
}

TEST(JsonSchemaTest, UniqueItems) {
  // Few known values: exact, counts included.
  ExpectLanguage(R"({"type":"array","items":{"enum":["a","b","c"]},"uniqueItems":true,
      "minItems":1})",
                 {R"(["a"])", R"(["c","a"])", R"(["b","c","a"])"},
                 {"[]", R"(["a","a"])", R"(["a","b","a"])", R"(["d"])"});
  ExpectLanguage(R"({"type":"array","items":{"type":"boolean"},"uniqueItems":true})",
                 {"[]", "[true,false]", "[false]"}, {"[true,true]", "[false,true,false]"});
  ExpectLanguage(R"({"type":"array","items":{"$ref":"#/$defs/c"},"uniqueItems":true,
      "maxItems":2,"$defs":{"c":{"type":"integer","enum":[1,2,3,"x"]}}})",
                 {"[3,1]", "[2]"}, {"[1,2,3]", "[1,1]", R"(["x"])"});
  // Other items: the grammar takes any items and marks the array; the ConstraintProcessor
  // refuses repeats (unique_items_test.cc).
  Result<Grammar> g =
      CompileSchema(json::parse(R"({"items":{"type":"string"},"uniqueItems":true,"minItems":2})"));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(g->has_unique_arrays());
  EXPECT_TRUE(FullMatch(*g, R"(["x","y","z"])"));
  EXPECT_FALSE(FullMatch(*g, R"(["x"])"));
  EXPECT_NE(
      ErrorOf(R"({"items":{"enum":[1,2]},"uniqueItems":true,"minItems":3})").find("uniqueItems"),
      std::string::npos);
}

TEST(JsonSchemaTest, OneOfOnlyWhereTheBranchesExcludeEachOther) {
  // One of several properties: each branch also forbids the others (found in MaskBench, where
  // an anyOf reading accepted objects with two of them).
  ExpectLanguage(R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},
      "oneOf":[{"required":["a"]},{"required":["b"]}]})",
                 {R"({"a":"x"})", R"({"b":"y"})"}, {R"({"a":"x","b":"y"})", "{}"});
  // Disjoint by type, by const or enum of a property both require, by required vs forbidden.
  ExpectLanguage(R"({"oneOf":[{"type":"string"},{"type":"integer"}]})", {R"("s")", "3"}, {"1.5"});
  ExpectLanguage(R"({"oneOf":[
      {"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},
       "required":["kind"]},
      {"type":"object","properties":{"kind":{"enum":["b","c"]}},"required":["kind"]}]})",
                 {R"({"kind":"a","x":1})", R"({"kind":"c"})"}, {R"({"kind":"d"})"});
  ExpectLanguage(R"({"type":"object","oneOf":[
      {"properties":{"p":{"type":"integer"}},"required":["p"],"additionalProperties":false},
      {"properties":{"q":{"type":"integer"}},"required":["q"],"additionalProperties":false}]})",
                 {R"({"p":1})", R"({"q":2})"}, {R"({"p":1,"q":2})"});
  // A discriminator every branch lists but does not require becomes required (a subset).
  ExpectLanguage(R"({"type":"object","oneOf":[
      {"properties":{"kind":{"enum":["a"]},"v":{"type":"string"}}},
      {"properties":{"kind":{"enum":["b","c"]},"v":{"type":"integer"}}}]})",
                 {R"({"kind":"a","v":"x"})", R"({"kind":"b","v":1})"},
                 {R"({"v":"x"})", "{}", R"({"kind":"a","v":1})"});
  // Branches that may overlap are refused rather than read as anyOf.
  for (const char* schema :
       {R"({"oneOf":[{"type":"integer"},{"type":"number"}]})",
        R"({"oneOf":[{"type":"string","maxLength":5},{"type":"string","minLength":3}]})",
        R"({"type":"object","oneOf":[{"required":["a"]},{"required":["a","b"]}]})"}) {
    EXPECT_NE(ErrorOf(schema).find("may both match"), std::string::npos) << schema;
  }
}

TEST(JsonSchemaTest, PatternProperties) {
  // A map keyed by a pattern: pattern keys only, each with the pattern's schema.
  ExpectLanguage(R"({"type":"object","patternProperties":{"^[a-z]+$":{"type":"integer"}},
      "additionalProperties":false})",
                 {"{}", R"({"ab":1,"c":2})"}, {R"({"ab":"x"})", R"({"A":1})", R"({"a1":1})"});
  // Without anchors a key contains a match (JSON Schema's search semantics); keys matching no
  // pattern are not generated beside additionalProperties true (a subset).
  ExpectLanguage(R"({"patternProperties":{"_id":{"type":"string"}}})",
                 {R"({"user_id":"u"})", R"({"_id":""})"}, {R"({"user_id":1})", R"({"name":"x"})"});
  // Listed names that match a pattern take both schemas; other keys of the pattern its own.
  ExpectLanguage(R"({"properties":{"x_n":{"type":"number","maximum":5},"y":{"type":"string"}},
      "patternProperties":{"^x_":{"type":"integer"}},"additionalProperties":false})",
                 {R"({"x_n":3,"y":"a"})", "{}", R"({"x_a":1,"x_n":3})", R"({"x_n2":7})"},
                 {R"({"x_n":3.5})", R"({"x_n":6})", R"({"x_a":"s"})", R"({"x_n":3,"x_n":4})"});
  // The same schema for pattern keys and additional ones: any key.
  ExpectLanguage(R"({"patternProperties":{"^a":{"type":"string"}},
      "additionalProperties":{"type":"string"}})",
                 {R"({"ab":"x","zz":"y"})"}, {R"({"ab":1})", R"({"zz":1})"});
  ExpectLanguage(R"({"type":"object","patternProperties":{".*":{}}})", {R"({"a":[1]})", "{}"},
                 {"[]"});
  // A pattern every key matches, beside listed names: other keys take the pattern's schema.
  ExpectLanguage(R"({"properties":{"basic":{"type":"string"}},"patternProperties":{".*":{
      "type":"string"}},"required":["basic"],"additionalProperties":false})",
                 {R"({"basic":"a","other":"b"})", R"({"basic":"a","b":"c","bas":"d"})"},
                 {R"({"basic":"a","other":1})", R"({"basic":"a","basic":"b"})", R"({"basic":1})",
                  R"({"other":"b"})"});
  // A required name that only a pattern admits, beside other keys of the pattern.
  ExpectLanguage(R"({"required":["k1"],"patternProperties":{"^k[0-9]$":{"type":"boolean"}},
      "additionalProperties":false})",
                 {R"({"k1":true})", R"({"k1":true,"k2":false})"},
                 {"{}", R"({"k1":1})", R"({"k2":false,"k1":true})", R"({"k1":true,"k1":false})",
                  R"({"k1":true,"k10":false})"});
  EXPECT_NE(ErrorOf(R"({"patternProperties":{"^a":{"type":"string"},"^b":{"type":"integer"}}})")
                .find("different schemas"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"required":["z"],"patternProperties":{"^a":{}},
      "additionalProperties":false})")
                .find("'z'"),
            std::string::npos);
}

TEST(JsonSchemaTest, PatternKeysOtherThanTheListedNames) {
  // Keys of the pattern but the listed name, which keeps its own place (once).
  const char* lines = R"({"type":"object","patternProperties":{"^line[1-3]$":{"type":"string"}},
      "required":["line1"],"additionalProperties":false})";
  ExpectLanguage(lines,
                 {R"({"line1":"a"})", R"({"line1":"a","line2":"b"})",
                  R"({"line1":"a","line3":"c","line2":"b"})"},
                 {R"({"line2":"b"})", R"({"line1":"a","line1":"b"})",
                  R"({"line1":"a","line4":"d"})", R"({"line1":"a","line2":1})",
                  // The listed name spelt with escapes is the same key: never an extra one.
                  R"({"line1":"a","\u006cine1":"b"})", R"({"line1":"a","line\u0031":"b"})"});
  // Unanchored: keys containing a match, the listed names (prefixes of others) left out.
  ExpectLanguage(
      R"({"properties":{"id":{"type":"integer"},"user_id":{"type":"integer"}},
      "patternProperties":{"id":{"type":"integer"}},"additionalProperties":false})",
      {R"({"id":1,"user_id":2,"ids":3,"xid":4,"user_idx":5})"},
      {R"({"id":1,"id":2})", R"({"user_id":1,"user_id":2})", R"({"name":1})", R"({"ids":"s"})"});
  // Several patterns with one schema: keys of either, each minus the names.
  ExpectLanguage(R"({"properties":{"a1":{"type":"integer"},"b1":{"type":"integer"}},
      "patternProperties":{"^a[0-9]$":{"type":"integer"},"^b[0-9]$":{"type":"integer"}},
      "additionalProperties":false})",
                 {R"({"a1":1,"a2":2,"b1":3,"b2":4})"},
                 {R"({"a1":1,"a1":2})", R"({"b1":1,"b1":2})", R"({"c1":1})"});
  // A pattern whose only strings are listed names generates no other keys.
  ExpectLanguage(R"({"properties":{"a":{"type":"integer"}},"patternProperties":{"^a$":{
      "type":"integer"}},"additionalProperties":false})",
                 {R"({"a":1})", "{}"}, {R"({"a":1,"a":2})", R"({"b":1})"});
}

TEST(JsonSchemaTest, TupleItemsOfTheOlderDrafts) {
  // Drafts 4 to 2019-09: "items" as an array is the prefix, "additionalItems" the rest (any
  // value when absent); additionalItems beside a single items schema constrains nothing.
  ExpectLanguage(R"({"type":"array","items":[{"type":"integer"},{"type":"string"}],
      "additionalItems":false})",
                 {"[]", "[1]", R"([1,"a"])"}, {R"(["a"])", R"([1,"a",2])", R"([1,2])"});
  ExpectLanguage(R"({"type":"array","items":[{"type":"integer"}],"additionalItems":{"type":"null"},
      "minItems":2})",
                 {"[1,null]", "[1,null,null]"}, {"[1]", "[1,2]"});
  ExpectLanguage(R"({"type":"array","items":[{"type":"boolean"}]})", {"[true]", R"([true,"x",{}])"},
                 {"[1]"});
  EXPECT_NE(ErrorOf(R"({"prefixItems":[{}],"items":[{}]})").find("prefixItems"), std::string::npos);
}

TEST(JsonSchemaTest, JsonObjectRule) {
  GrammarBuilder b;
  const int root = AddJsonObjectRule({}, &b);
  Result<Grammar> g = b.Build(root);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (const char* ok : {"{}", R"({"a":1})", R"({"a":{"b":[1,2,{"c":null}]},"d":"e\"f"})"}) {
    EXPECT_TRUE(FullMatch(*g, ok)) << ok;
  }
  for (const char* bad : {"[]", "1", R"({"a":})", R"({"a":1,})", "{"}) {
    EXPECT_FALSE(FullMatch(*g, bad)) << bad;
  }
  EXPECT_TRUE(PrefixMatch(*g, R"({"a":[)"));
}

json LoadSuite(const char* path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path << " (tests run from the repository root)";
  if (!in.good()) return json::array();
  return json::parse(in);
}

TEST(JsonSchemaSuiteTest, EverySchemaCompilesAndBuilds) {
  const json suite = LoadSuite("tests/data/structured/schemas.json");
  ASSERT_GE(suite.size(), 110u);
  for (const json& entry : suite) {
    const std::string name = entry.at("name").get<std::string>();
    for (bool flexible : {false, true}) {
      JsonSchemaOptions options;
      options.flexible_whitespace = flexible;
      Result<Grammar> g = CompileSchema(entry.at("schema"), options);
      ASSERT_TRUE(g.ok()) << name << ": " << g.status().ToString();
      if (entry.contains("valid")) {
        for (const json& v : entry["valid"]) EXPECT_TRUE(FullMatch(*g, v.dump())) << name << v;
      }
    }
  }
}

// A random walk through the grammar: uniform over the allowed bytes, except that a closing byte
// ('"', ']', '}') is preferred a third of the time, ending as soon as the grammar may end.
// Empty if it ran past max_bytes.
std::string RandomWalk(const Grammar& g, std::mt19937* rng, size_t max_bytes = 20000) {
  StackArena arena(&g);
  State s = arena.Initial();
  std::string out;
  while (!StackArena::CanEnd(s)) {
    if (out.size() >= max_bytes) return "";
    const ByteSet next = arena.NextBytes(s);
    std::vector<uint8_t> all, closing;
    for (int c = 0; c < 256; ++c) {
      if (!next.Has(static_cast<uint8_t>(c))) continue;
      all.push_back(static_cast<uint8_t>(c));
      if (c == '"' || c == ']' || c == '}') closing.push_back(static_cast<uint8_t>(c));
    }
    if (all.empty()) return "";
    const std::vector<uint8_t>& pick = !closing.empty() && (*rng)() % 3 == 0 ? closing : all;
    const uint8_t c = pick[(*rng)() % pick.size()];
    out.push_back(static_cast<char>(c));
    State t;
    arena.Advance(s, c, &t);
    s = std::move(t);
  }
  return out;
}

// Every random walk of every suite schema is well-formed JSON. With KVSERVE_SCHEMA_SAMPLES set,
// the samples are also written there (one {"name", "schema", "flexible", "text"} per line) for
// validation by an independent JSON Schema validator.
TEST(JsonSchemaSuiteTest, RandomWalksAreJson) {
  const json suite = LoadSuite("tests/data/structured/schemas.json");
  const char* dump_path = std::getenv("KVSERVE_SCHEMA_SAMPLES");
  std::ofstream dump;
  if (dump_path != nullptr) dump.open(dump_path);
  const int walks = dump_path != nullptr ? 40 : 3;
  std::mt19937 rng(1234);
  for (const json& entry : suite) {
    const std::string name = entry.at("name").get<std::string>();
    for (bool flexible : {false, true}) {
      JsonSchemaOptions options;
      options.flexible_whitespace = flexible;
      Result<Grammar> g = CompileSchema(entry.at("schema"), options);
      ASSERT_TRUE(g.ok()) << name << ": " << g.status().ToString();
      for (int w = 0; w < walks; ++w) {
        const std::string text = RandomWalk(*g, &rng);
        if (text.empty()) continue;
        EXPECT_TRUE(json::accept(text)) << name << ": " << text;
        if (dump.is_open()) {
          dump << json{{"name", name},
                       {"schema", entry["schema"]},
                       {"flexible", flexible},
                       {"text", text}}
                      .dump(-1, ' ', false, json::error_handler_t::replace)
               << "\n";
        }
      }
    }
  }
}

TEST(JsonSchemaSuiteTest, EveryBadSchemaNamesItsKeyword) {
  const json suite = LoadSuite("tests/data/structured/bad_schemas.json");
  ASSERT_GE(suite.size(), 20u);
  for (const json& entry : suite) {
    const std::string name = entry.at("name").get<std::string>();
    const std::string keyword = entry.at("keyword").get<std::string>();
    GrammarBuilder b;
    Result<int> root = CompileJsonSchema(entry.at("schema"), {}, &b);
    ASSERT_FALSE(root.ok()) << name << " compiled";
    EXPECT_NE(root.status().message().find(keyword), std::string::npos)
        << name << ": " << root.status().message();
  }
}

}  // namespace
}  // namespace kvserve::structured
