// Declarations shared by the JSON Schema compiler's files (json_schema.cc and json_schema_*.cc);
// not part of the module's interface (json_schema.h is).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/status.h"
#include "structured/grammar.h"

namespace kvserve::structured::json_schema_internal {

// JSON types as bits; "number" sets kInt | kNum, so that intersections come out right.
enum TypeBits : unsigned {
  kNull = 1,
  kBool = 2,
  kInt = 4,
  kNum = 8,
  kStr = 16,
  kArr = 32,
  kObj = 64,
  kAllTypes = 127,
};

// The tighter of a schema's inclusive and exclusive bound on one side of a number.
struct NumberBound {
  bool present = false;
  double value = 0;
  bool exclusive = false;
};

// json_schema_values.cc: numbers and the generic JSON value.
int IntegerRangeRule(int64_t lo, int64_t hi, GrammarBuilder* b);
// Appends alternatives for the canonical decimals of the integers [lo, hi] (any signs), each
// followed by `suffix` (-1: none).
void AppendIntegerRange(int64_t lo, int64_t hi, int suffix, GrammarBuilder* b,
                        std::vector<Sequence>* alts);
int PlainNumberRule(bool integer, GrammarBuilder* b);
Result<int> NumberRule(const nlohmann::ordered_json& schema, bool integer, const std::string& path,
                       GrammarBuilder* b);
int JsonCharRule(GrammarBuilder* b);
bool ScalarFits(const nlohmann::ordered_json& v, const nlohmann::ordered_json& schema);
int AnyJsonValueRule(int ws, int string_rule, int* object_rule, GrammarBuilder* b);

// json_schema_decimals.cc: numbers W.F (a fraction always written) within the bounds, exactly
// as decimals, with whole parts up to `cap` and at most `max_fraction_digits` fraction digits
// (fewer where the whole part is long: 15 significant digits in all); no "-0.0".
void AppendFractionalRange(const NumberBound& lower, const NumberBound& upper,
                           int max_fraction_digits, int64_t cap, GrammarBuilder* b,
                           std::vector<Sequence>* alts);

// json_schema_strings.cc: strings, formats, patterns, object keys.
bool IsDefinedFormat(const std::string& format);
Result<int> PatternKeyRule(const std::string& pattern, const std::vector<std::string>& excluded,
                           const std::string& path, GrammarBuilder* b);
// A key (quotes included) other than `names` that starts with `lead` (ASCII; spelt plainly).
int ExtraKeyRule(const std::vector<std::string>& names, GrammarBuilder* b,
                 std::string_view lead = "");
Result<int> StringRule(const nlohmann::ordered_json& schema, int json_char, const std::string& path,
                       GrammarBuilder* b);

// json_schema_merge.cc: keyword checks, $ref resolution, allOf / $ref inlining.
bool IsIgnored(const std::string& k);
std::string Where(const std::string& path);
std::string Child(const std::string& path, std::string_view key);
Status CheckKeywords(const nlohmann::ordered_json& s, const std::string& path);
nlohmann::ordered_json TypeNames(unsigned mask);
Result<unsigned> TypeMask(const nlohmann::ordered_json& t, const std::string& path);
Result<const nlohmann::ordered_json*> ResolveRef(const nlohmann::ordered_json& root,
                                                 const nlohmann::ordered_json& ref,
                                                 const std::string& path);
// Whether the root declares draft 3 to 7 ("$schema"), where a $ref's sibling keywords are
// ignored; from 2019-09 on (and without "$schema") they apply beside it.
bool RefHidesSiblings(const nlohmann::ordered_json& root);
Result<nlohmann::ordered_json> FlattenSchema(const nlohmann::ordered_json& root,
                                             const nlohmann::ordered_json& s,
                                             const std::string& path, int depth);
Result<nlohmann::ordered_json> MergeSchemas(const nlohmann::ordered_json& root,
                                            const nlohmann::ordered_json& a,
                                            const nlohmann::ordered_json& b,
                                            const std::string& path);

// json_schema_rewrite.cc: keywords rewritten into others, and type inference.
bool HasConstraints(const nlohmann::ordered_json& s,
                    std::initializer_list<std::string_view> ignore);
bool HasType(const nlohmann::ordered_json& v, unsigned mask);
Result<unsigned> AllowedTypes(const nlohmann::ordered_json& s, const std::string& path);
// Whether a compile error says that the schema matches no value at all (rather than that it is
// malformed or unsupported): anyOf and oneOf leave such a branch out, which changes nothing the
// union accepts.
bool MatchesNoValue(const Status& s);
Result<nlohmann::ordered_json> ApplyNot(const nlohmann::ordered_json& root,
                                        const nlohmann::ordered_json& s, const std::string& path);
Result<nlohmann::ordered_json> ApplyDependencies(const nlohmann::ordered_json& root,
                                                 const nlohmann::ordered_json& s,
                                                 const std::string& path);
Result<std::optional<nlohmann::ordered_json>> ExclusiveBranches(
    const nlohmann::ordered_json& root, const nlohmann::ordered_json& base,
    const nlohmann::ordered_json& branches, const std::string& path);
std::optional<nlohmann::ordered_json> FiniteDomain(const nlohmann::ordered_json& flat);

}  // namespace kvserve::structured::json_schema_internal
