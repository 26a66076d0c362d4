// JSON Schema → grammar: the dispatch over keywords, $ref rules, anyOf/oneOf, enum/const,
// objects and arrays. Scalars live in json_schema_values.cc, strings in json_schema_strings.cc,
// keyword checks, $ref resolution and allOf merging in json_schema_merge.cc; their functions are
// declared below (namespace json_schema_internal) rather than in a header of their own.
#include "structured/json_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "structured/json_schema_internal.h"

namespace kvserve::structured {

namespace {

using json_schema_internal::AllowedTypes;
using json_schema_internal::AnyJsonValueRule;
using json_schema_internal::ApplyDependencies;
using json_schema_internal::ApplyNot;
using json_schema_internal::CheckKeywords;
using json_schema_internal::Child;
using json_schema_internal::ExclusiveBranches;
using json_schema_internal::ExtraKeyRule;
using json_schema_internal::FiniteDomain;
using json_schema_internal::FlattenSchema;
using json_schema_internal::HasConstraints;
using json_schema_internal::HasType;
using json_schema_internal::IsDefinedFormat;
using json_schema_internal::IsIgnored;
using json_schema_internal::JsonCharRule;
using json_schema_internal::MatchesNoValue;
using json_schema_internal::MergeSchemas;
using json_schema_internal::NumberRule;
using json_schema_internal::PatternKeyRule;
using json_schema_internal::PlainNumberRule;
using json_schema_internal::RefHidesSiblings;
using json_schema_internal::ResolveRef;
using json_schema_internal::ScalarFits;
using json_schema_internal::StringRule;
using json_schema_internal::TypeMask;
using json_schema_internal::TypeNames;
using json_schema_internal::Where;
using json = nlohmann::ordered_json;
using Sym = GrammarBuilder;  // for Sym::Ref

constexpr int kMaxCompiledSchemas = 20000;  // schema nodes compiled, refs and merges included
constexpr int kMaxNesting = 64;             // objects and arrays inside one another while compiling
// Extra keys that start with '$' an object may lead with before its required properties
// ("$schema", "$id": real documents do; more would let a small model put the required ones off
// forever, and any key there would cost masks: see ObjectSet).
constexpr int kEarlyExtraKeys = 3;
using enum json_schema_internal::TypeBits;

// A number with no fraction that a 15-digit integer spells (2.0 as 2); nullopt otherwise.
std::optional<int64_t> WholeNumber(const json& v) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > 999'999'999'999'999ULL) return std::nullopt;
    const int64_t i = v.get<int64_t>();
    if (i < -999'999'999'999'999 || i > 999'999'999'999'999) return std::nullopt;
    return i;
  }
  if (!v.is_number_float()) return std::nullopt;
  const double d = v.get<double>();
  if (!(std::abs(d) <= 999'999'999'999'999.0) || d != std::floor(d)) return std::nullopt;
  return static_cast<int64_t>(d);
}

// `patterns` (ECMA-262, as JSON Schema's patterns are) compiled for searching names.
Result<std::vector<std::regex>> NamePatterns(const std::vector<std::string>& patterns,
                                             const std::string& path) {
  std::vector<std::regex> out;
  for (const std::string& pattern : patterns) {
    try {
      out.emplace_back(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return InvalidArgument(
          fmt::format("'patternProperties' at {}: pattern '{}' is not supported: {}", Where(path),
                      pattern, e.what()));
    }
  }
  return out;
}

Result<int64_t> Count(const json& s, const char* key, const std::string& path) {
  auto it = s.find(key);
  if (it == s.end()) return int64_t{-1};
  if (!it->is_number() || it->get<double>() < 0 || it->get<double>() > 1e9 ||
      std::floor(it->get<double>()) != it->get<double>()) {
    return InvalidArgument(
        fmt::format("'{}' at {} must be a non-negative integer", key, Where(path)));
  }
  return static_cast<int64_t>(it->get<double>());
}

class Compiler {
 public:
  Compiler(const json& root, const JsonSchemaOptions& options, GrammarBuilder* b)
      : root_(root), options_(options), b_(b) {}

  Result<int> Compile(const json& s, const std::string& path);
  int AnyValue();
  int AnyObject() {
    AnyValue();
    return any_object_;
  }

 private:
  struct RefState {
    int rule = -1;
    bool in_progress = false;
    int depth = 0;
  };
  struct Prop {
    std::string name;
    json schema;  // a schema, or true for "any value"
    bool required = false;
  };

  Result<int> CompileRef(const json& ref, const std::string& path);
  // A schema without $ref and allOf at its top.
  Result<int> CompileFlat(const json& s, const std::string& path);
  Result<int> CompileAlternatives(const json& s, const std::string& path);
  Result<int> CompileEnum(const json& s, const std::string& path);
  void ValueSequence(const json& v, Sequence* out);
  Result<int> CompileType(unsigned bit, unsigned mask, const json& s, const std::string& path);
  Result<unsigned> Types(const json& s, const std::string& path) const;
  Result<int> ObjectRule(const json& s, const std::string& path);
  Result<std::vector<Prop>> CollectProperties(const json& s, const json& additional,
                                              const std::string& path);
  MemberSetSpec ObjectSet(const std::vector<Prop>& props, const std::vector<int>& values,
                          int extra_pair, int64_t min_props, int64_t max_props);
  int ObjectChain(const std::vector<Prop>& props, const std::vector<int>& values, int extra_pair,
                  int64_t min_props, int64_t max_props);
  Result<int> ArrayRule(const json& s, const std::string& path);
  Result<int> UniqueArrayRule(const json& domain, int64_t min_items, int64_t max_items,
                              const std::string& path);
  int GenericString();
  int WsRule();  // -1: compact JSON
  void Ws(Sequence* s);
  Symbol Byte(char c) { return b_->Bytes(ByteSet::Single(static_cast<uint8_t>(c))); }
  Result<int> Nested(const json& s, const std::string& path) {
    if (depth_ >= kMaxNesting) {
      return InvalidArgument(fmt::format(
          "schema at {} nests objects and arrays more than {} deep once expanded (a $ref beside "
          "other keywords or inside allOf is expanded in place, so one that reaches itself "
          "never ends)",
          Where(path), kMaxNesting));
    }
    ++depth_;
    Result<int> r = Compile(s, path);
    --depth_;
    return r;
  }

  const json& root_;
  const JsonSchemaOptions options_;
  GrammarBuilder* b_;
  std::unordered_map<std::string, RefState> refs_;
  int depth_ = 0;  // objects and arrays entered: a $ref met again at the same depth loops
  int compiled_ = 0;
  int ws_ = -1, char_ = -1, string_ = -1, any_value_ = -1, any_object_ = -1;
};

int Compiler::WsRule() {
  if (!options_.flexible_whitespace) return -1;
  if (ws_ < 0) {
    ByteSet w = ByteSet::Single(' ');
    w.Add('\t', '\n');
    ws_ = b_->Repeat("ws", {b_->Bytes(w)}, 0, JsonSchemaOptions::kMaxWhitespace);
  }
  return ws_;
}

void Compiler::Ws(Sequence* s) {
  if (WsRule() >= 0) s->push_back(Sym::Ref(ws_));
}

int Compiler::GenericString() {
  if (string_ >= 0) return string_;
  if (char_ < 0) char_ = JsonCharRule(b_);
  const int chars = b_->Star("chars*", {Sym::Ref(char_)});
  string_ = b_->Alternatives("string", {{Byte('"'), Sym::Ref(chars), Byte('"')}});
  return string_;
}

int Compiler::AnyValue() {
  if (any_value_ < 0) any_value_ = AnyJsonValueRule(WsRule(), GenericString(), &any_object_, b_);
  return any_value_;
}

Result<int> Compiler::Compile(const json& s, const std::string& path) {
  if (++compiled_ > kMaxCompiledSchemas) {
    return InvalidArgument(fmt::format(
        "schema too large: over {} subschemas compiled ($ref, allOf and anyOf expansions "
        "included)",
        kMaxCompiledSchemas));
  }
  if (s.is_boolean()) {
    if (s.get<bool>()) return AnyValue();
    return InvalidArgument(fmt::format("schema false at {} matches nothing", Where(path)));
  }
  if (!s.is_object()) {
    return InvalidArgument(fmt::format("schema at {} must be an object or a boolean, not {}",
                                       Where(path), s.type_name()));
  }
  KV_RETURN_IF_ERROR(CheckKeywords(s, path));
  const bool ref_alone = s.contains("$ref") && !s.contains("allOf") &&
                         (!HasConstraints(s, {"$ref"}) || RefHidesSiblings(root_));
  if (ref_alone) return CompileRef(s["$ref"], path);
  if (s.contains("allOf") || s.contains("$ref")) {
    KV_ASSIGN_OR_RETURN(json flat, FlattenSchema(root_, s, path, 0));
    return CompileFlat(flat, path);
  }
  return CompileFlat(s, path);
}

// One rule per referenced pointer, created before its body so that recursive schemas refer to
// it. Meeting a pointer again before any object or array was entered would loop without
// consuming a byte: refused.
Result<int> Compiler::CompileRef(const json& ref, const std::string& path) {
  KV_ASSIGN_OR_RETURN(const json* target, ResolveRef(root_, ref, path));
  const std::string key = ref.get<std::string>();
  if (auto it = refs_.find(key); it != refs_.end()) {
    if (it->second.in_progress && it->second.depth == depth_) {
      return InvalidArgument(fmt::format(
          "circular $ref '{}' at {}: it refers to itself without an object or array between", key,
          Where(path)));
    }
    return it->second.rule;
  }
  const int rule = b_->AddRule("ref " + key);
  refs_[key] = RefState{rule, true, depth_};
  KV_ASSIGN_OR_RETURN(const int body, Compile(*target, key.substr(1)));
  b_->AddAlternative(rule, {Sym::Ref(body)});
  refs_[key].in_progress = false;
  return rule;
}

Result<int> Compiler::CompileFlat(const json& s, const std::string& path) {
  if (s.contains("not")) {
    KV_ASSIGN_OR_RETURN(const json without_not, ApplyNot(root_, s, path));
    return CompileFlat(without_not, path);
  }
  if (s.contains("dependencies") || s.contains("dependentRequired") ||
      s.contains("dependentSchemas")) {
    KV_ASSIGN_OR_RETURN(const json as_branches, ApplyDependencies(root_, s, path));
    return CompileFlat(as_branches, path);
  }
  if (s.contains("anyOf") || s.contains("oneOf")) return CompileAlternatives(s, path);
  if (s.contains("enum") || s.contains("const")) return CompileEnum(s, path);
  KV_ASSIGN_OR_RETURN(const unsigned mask, Types(s, path));
  std::vector<Sequence> alts;
  for (unsigned bit : {kNull, kBool, kInt, kStr, kArr, kObj}) {
    if (!(mask & bit)) continue;
    KV_ASSIGN_OR_RETURN(const int rule, CompileType(bit, mask, s, path));
    alts.push_back({Sym::Ref(rule)});
  }
  if (alts.size() == 1) return alts[0][0].index;
  return b_->Alternatives("types", std::move(alts));
}

// anyOf / oneOf (both as a union: a grammar cannot count matches). Constraints beside them
// apply to every branch: s AND (b1 OR b2) is compiled as (s AND b1) OR (s AND b2).
Result<int> Compiler::CompileAlternatives(const json& s, const std::string& path) {
  if (s.contains("anyOf") && s.contains("oneOf")) {
    return InvalidArgument(fmt::format("'anyOf' with 'oneOf' at {} is not supported", Where(path)));
  }
  const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
  const json& branches = s[key];
  if (!branches.is_array() || branches.empty()) {
    return InvalidArgument(fmt::format("'{}' at {} must be a non-empty array", key, Where(path)));
  }
  const bool distribute = HasConstraints(s, {"anyOf", "oneOf"});
  json base = s;
  base.erase(key);
  if (std::string_view(key) == "oneOf") {
    KV_ASSIGN_OR_RETURN(std::optional<json> exclusive,
                        ExclusiveBranches(root_, base, branches, path));
    if (exclusive) {
      // Compiled as an anyOf whose branches no value satisfies twice.
      base["anyOf"] = std::move(*exclusive);
      return CompileAlternatives(base, path);
    }
  }
  std::vector<Sequence> alts;
  for (size_t i = 0; i < branches.size(); ++i) {
    const std::string branch_path = Child(Child(path, key), std::to_string(i));
    int rule = -1;
    // A branch no value takes (an error that says so, in flattening, merging or compiling) is
    // left out: the union is the same without it.
    if (distribute) {
      Result<json> flattened = FlattenSchema(root_, branches[i], branch_path, 0);
      if (!flattened.ok() && MatchesNoValue(flattened.status())) continue;
      KV_ASSIGN_OR_RETURN(json flat, std::move(flattened));
      if (base.contains("type") && flat.contains("type")) {
        // A branch whose types the constraints beside it exclude matches nothing: left out.
        KV_ASSIGN_OR_RETURN(const unsigned outer, TypeMask(base["type"], path));
        KV_ASSIGN_OR_RETURN(const unsigned inner, TypeMask(flat["type"], branch_path));
        if ((outer & inner) == 0) continue;
      }
      Result<json> merged = MergeSchemas(root_, base, flat, branch_path);
      if (!merged.ok() && MatchesNoValue(merged.status())) continue;
      KV_RETURN_IF_ERROR(merged.status());
      if (++compiled_ > kMaxCompiledSchemas) return InvalidArgument("schema too large");
      Result<int> r = CompileFlat(*merged, branch_path);
      if (!r.ok() && MatchesNoValue(r.status())) continue;
      KV_ASSIGN_OR_RETURN(rule, std::move(r));
    } else {
      Result<int> r = Compile(branches[i], branch_path);
      if (!r.ok() && MatchesNoValue(r.status())) continue;
      KV_ASSIGN_OR_RETURN(rule, std::move(r));
    }
    alts.push_back({Sym::Ref(rule)});
  }
  if (alts.empty()) {
    return InvalidArgument(fmt::format(
        "schema at {} matches nothing: no '{}' branch matches a value the schema allows",
        Where(path), key));
  }
  return b_->Alternatives(key, std::move(alts));
}

// enum / const: each value's compact serialisation, kept where it has an allowed type and
// meets the length and numeric bounds beside it.
Result<int> Compiler::CompileEnum(const json& s, const std::string& path) {
  for (const auto& [k, v] : s.items()) {
    static const std::set<std::string> kBeside = {
        "enum",    "const",   "type",  "nullable",         "minLength",        "maxLength",
        "minimum", "maximum", "$defs", "exclusiveMinimum", "exclusiveMaximum", "definitions"};
    if (!IsIgnored(k) && kBeside.count(k) == 0) {
      return InvalidArgument(fmt::format("'{}' with '{}' at {} is not supported",
                                         s.contains("enum") ? "enum" : "const", k, Where(path)));
    }
  }
  json values = json::array();
  if (s.contains("enum")) {
    if (!s["enum"].is_array()) {
      return InvalidArgument(fmt::format("'enum' at {} must be an array", Where(path)));
    }
    for (const json& v : s["enum"]) {
      if (!s.contains("const") || v == s["const"]) values.push_back(v);
    }
  } else {
    values.push_back(s["const"]);
  }
  KV_ASSIGN_OR_RETURN(const unsigned declared, Types(s, path));
  const unsigned mask = s.contains("type") ? declared : static_cast<unsigned>(kAllTypes);
  std::vector<Sequence> alts;
  std::set<std::string> seen;
  for (const json& v : values) {
    if (!HasType(v, mask) || !ScalarFits(v, s)) continue;
    std::string text;
    try {
      text = v.dump();
    } catch (const json::exception& e) {
      return InvalidArgument(fmt::format("'enum' at {}: {}", Where(path), e.what()));
    }
    const std::optional<int64_t> whole = WholeNumber(v);
    if (whole) text = std::to_string(*whole);
    if (!seen.insert(text).second) continue;
    if (whole && (mask & kNum) == 0) {
      alts.push_back(b_->Literal(text));  // an "integer" (draft 4's has no fraction)
      continue;
    }
    Sequence value;
    ValueSequence(v, &value);
    alts.push_back(std::move(value));
  }
  if (alts.empty()) {
    return InvalidArgument(fmt::format("'{}' at {}: no value satisfies the schema",
                                       s.contains("enum") ? "enum" : "const", Where(path)));
  }
  return b_->Alternatives("enum", std::move(alts));
}

Result<unsigned> Compiler::Types(const json& s, const std::string& path) const {
  return AllowedTypes(s, path);
}

// A value's compact serialisation, with whitespace allowed between the tokens of its arrays and
// objects where the options allow it (so an enum or const of objects reads as any other object).
void Compiler::ValueSequence(const json& v, Sequence* out) {
  auto literal = [&](const std::string& text) {
    const Sequence lit = b_->Literal(text);
    out->insert(out->end(), lit.begin(), lit.end());
  };
  if (v.is_object() && !v.empty()) {
    literal("{");
    Ws(out);
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      if (!first) {
        literal(",");
        Ws(out);
      }
      first = false;
      literal(json(k).dump());
      Ws(out);
      literal(":");
      Ws(out);
      ValueSequence(x, out);
      Ws(out);
    }
    literal("}");
  } else if (v.is_array() && !v.empty()) {
    literal("[");
    Ws(out);
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) {
        literal(",");
        Ws(out);
      }
      ValueSequence(v[i], out);
      Ws(out);
    }
    literal("]");
  } else if (const std::optional<int64_t> whole = WholeNumber(v)) {
    // JSON Schema compares numbers by value: 2 and 2.0 are the same enum member.
    out->push_back(
        Sym::Ref(b_->Alternatives("whole-number", {b_->Literal(std::to_string(*whole)),
                                                   b_->Literal(std::to_string(*whole) + ".0")})));
  } else {
    literal(v.dump());
  }
}

Result<int> Compiler::CompileType(unsigned bit, unsigned mask, const json& s,
                                  const std::string& path) {
  switch (bit) {
    case kNull:
      return b_->Alternatives("null", {b_->Literal("null")});
    case kBool:
      return b_->Alternatives("boolean", {b_->Literal("true"), b_->Literal("false")});
    case kInt: {
      json numeric = s;
      if (auto f = s.find("format"); f != s.end() && !(mask & kStr)) {
        // OpenAPI number formats; int32 bounds the range, the others fit the digit caps.
        if (*f == "int32") {
          // Inclusive bounds, tightened (exclusive ones beside them still apply).
          auto tighten = [&](const char* k, double v, bool lower) {
            auto it = numeric.find(k);
            if (it == numeric.end() ||
                (it->is_number() && (lower ? it->get<double>() < v : it->get<double>() > v))) {
              numeric[k] = v;
            }
          };
          tighten("minimum", -2147483648.0, true);
          tighten("maximum", 2147483647.0, false);
        }
        // Any other format constrains strings only: a number passes it.
      }
      return NumberRule(numeric, !(mask & kNum), Where(path), b_);
    }
    case kStr:
      if (char_ < 0) char_ = JsonCharRule(b_);
      return StringRule(s, char_, Where(path), b_);
    case kArr:
      return ArrayRule(s, path);
    default:
      return ObjectRule(s, path);
  }
}

// Whether a schema admits no value on its face: an enum or const none of whose values has the
// types and bounds beside it (real schemas hold such, e.g. string values under "type":
// "object"). An optional property with such a schema can only be absent.
bool MatchesNothing(const json& s) {
  if (!s.is_object() || (!s.contains("enum") && !s.contains("const"))) return false;
  for (const char* k : {"$ref", "allOf", "anyOf", "oneOf", "not"}) {
    if (s.contains(k)) return false;
  }
  const json values = s.contains("const") ? json::array({s["const"]}) : s["enum"];
  if (!values.is_array()) return false;
  unsigned mask = kAllTypes;
  if (s.contains("type")) {
    Result<unsigned> m = TypeMask(s["type"], "");
    if (!m.ok()) return false;
    mask = *m | (s.value("nullable", false) == true ? kNull : 0u);
  }
  for (const json& v : values) {
    if (HasType(v, mask) && ScalarFits(v, s)) return false;
  }
  return true;
}

// The listed properties in key order (then required names not listed, valued by
// additionalProperties), without those whose schema is false.
Result<std::vector<Compiler::Prop>> Compiler::CollectProperties(const json& s,
                                                                const json& additional,
                                                                const std::string& path) {
  std::vector<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) {
      return InvalidArgument(fmt::format("'required' at {} must be an array", Where(path)));
    }
    for (const json& r : s["required"]) {
      if (!r.is_string()) {
        return InvalidArgument(fmt::format("'required' at {} must list strings", Where(path)));
      }
      required.push_back(r.get<std::string>());
    }
  }
  auto is_required = [&](const std::string& name) {
    return std::find(required.begin(), required.end(), name) != required.end();
  };
  std::vector<Prop> props;
  const json none = json::object();
  const json& listed = s.contains("properties") ? s["properties"] : none;
  if (!listed.is_object()) {
    return InvalidArgument(fmt::format("'properties' at {} must be an object", Where(path)));
  }
  for (const auto& [name, schema] : listed.items()) {
    if (schema == false || (!is_required(name) && MatchesNothing(schema))) {
      if (is_required(name)) {
        return InvalidArgument(
            fmt::format("'required' at {}: property '{}' is required but its schema is false",
                        Where(path), name));
      }
      continue;
    }
    props.push_back(Prop{name, schema, is_required(name)});
  }
  for (const std::string& name : required) {
    const bool added =
        std::any_of(props.begin(), props.end(), [&](const Prop& p) { return p.name == name; });
    if (listed.contains(name) || added) continue;
    if (additional == false) {
      return InvalidArgument(fmt::format(
          "'required' at {}: property '{}' is not in 'properties' and additionalProperties is "
          "false",
          Where(path), name));
    }
    props.push_back(Prop{name, additional, true});
  }
  return props;
}

// The members of an object in any order, as JSON Schema allows: a member set (grammar.h) of the
// listed properties, each at most once and the required ones always, with extra_pair (-1: none)
// anywhere among them once the required ones are written (before that, only the caller's
// early_extra, at most kEarlyExtraKeys times ahead of every listed one: keys that start with '$',
// which keep the states and masks past the first member what they are without it) and
// min_props..max_props members in all (-1: unbounded).
// REQUIRES: props.size() <= MemberSetSpec::kMaxMembers.
MemberSetSpec Compiler::ObjectSet(const std::vector<Prop>& props, const std::vector<int>& values,
                                  int extra_pair, int64_t min_props, int64_t max_props) {
  MemberSetSpec spec;
  for (size_t i = 0; i < props.size(); ++i) {
    Sequence pair = b_->Literal(json(props[i].name).dump());
    Ws(&pair);
    pair.push_back(Byte(':'));
    Ws(&pair);
    pair.push_back(Sym::Ref(values[i]));
    Ws(&pair);
    spec.members.push_back(b_->Alternatives("member " + props[i].name, {std::move(pair)}));
    if (props[i].required) spec.required |= MemberBits::Bit(i);
  }
  spec.extra = extra_pair;
  spec.early_extras = kEarlyExtraKeys;  // of the early_extra rule its caller sets
  spec.separator = {Byte(',')};
  Ws(&spec.separator);
  spec.min_count = std::max<int64_t>(min_props, 0);
  spec.max_count = max_props;
  return spec;
}

// The fallback beyond MemberSetSpec::kMaxMembers listed properties, in the schema's order.
// The members of an object as a chain of states (i, c): properties i.. still to come, c members
// written so far (c = 0: the next one has no comma before it). A required property has no
// skipping alternative. extra_pair (-1: none) may follow the listed ones. c counts up to
// max_props where it is set (no member past it), else saturates at max(min_props, 1); at the
// end the extras bring the count within [min_props, max_props]. Returns -1 when no member list
// satisfies the bounds.
int Compiler::ObjectChain(const std::vector<Prop>& props, const std::vector<int>& values,
                          int extra_pair, int64_t min_props, int64_t max_props) {
  const size_t n = props.size();
  const int64_t cap = max_props >= 0 ? max_props : std::max<int64_t>(min_props, 1);
  const auto width = static_cast<size_t>(cap + 1);
  Sequence comma = {Byte(',')};
  Ws(&comma);
  std::vector<int> next(width, -1), cur(width, -1);
  for (int64_t c = 0; c <= cap; ++c) {  // i == n: the extras
    const int64_t need = std::max<int64_t>(min_props - c, 0);
    const int64_t room = max_props >= 0 ? max_props - c : -1;
    std::vector<Sequence> alts;
    if (need == 0) alts.push_back({});
    if (extra_pair >= 0 && room != 0) {
      Sequence more = comma;
      more.push_back(Sym::Ref(extra_pair));
      if (c == 0) {
        const int rest = b_->Repeat("extra-members", more, std::max<int64_t>(need - 1, 0),
                                    room < 0 ? -1 : room - 1);
        alts.push_back({Sym::Ref(extra_pair), Sym::Ref(rest)});
      } else {
        alts.push_back(
            {Sym::Ref(b_->Repeat("extra-members", more, std::max<int64_t>(need, 1), room))});
      }
    }
    if (!alts.empty())
      next[static_cast<size_t>(c)] = b_->Alternatives("members-end", std::move(alts));
  }
  for (size_t i = n; i-- > 0;) {
    for (int64_t c = 0; c <= cap; ++c) {
      std::vector<Sequence> alts;
      const int64_t taken = max_props >= 0 ? c + 1 : std::min(c + 1, cap);
      if (taken <= cap && next[static_cast<size_t>(taken)] >= 0) {
        Sequence pair = c == 0 ? Sequence{} : comma;
        const Sequence name = b_->Literal(json(props[i].name).dump());
        pair.insert(pair.end(), name.begin(), name.end());
        Ws(&pair);
        pair.push_back(Byte(':'));
        Ws(&pair);
        pair.push_back(Sym::Ref(values[i]));
        Ws(&pair);
        pair.push_back(Sym::Ref(next[static_cast<size_t>(taken)]));
        alts.push_back(std::move(pair));
      }
      if (!props[i].required && next[static_cast<size_t>(c)] >= 0) {
        alts.push_back({Sym::Ref(next[static_cast<size_t>(c)])});
      }
      cur[static_cast<size_t>(c)] =
          alts.empty() ? -1
                       : b_->Alternatives((c == 0 ? "members " : "members ,") + props[i].name,
                                          std::move(alts));
    }
    std::swap(next, cur);
  }
  return next[0];
}

Result<int> Compiler::ObjectRule(const json& s, const std::string& path) {
  json additional =
      s.contains("additionalProperties") ? s["additionalProperties"] : json(!options_.strict);
  if (!additional.is_boolean() && !additional.is_object()) {
    return InvalidArgument(
        fmt::format("'additionalProperties' at {} must be a boolean or a schema", Where(path)));
  }
  // patternProperties: every pattern's schema must be the same one (a key may match several).
  std::vector<std::string> patterns;
  json pattern_schema = true;
  if (auto pp = s.find("patternProperties"); pp != s.end()) {
    if (!pp->is_object()) {
      return InvalidArgument(
          fmt::format("'patternProperties' at {} must be an object", Where(path)));
    }
    for (const auto& [pattern, schema] : pp->items()) {
      if (!patterns.empty() && schema != pattern_schema) {
        return InvalidArgument(fmt::format(
            "'patternProperties' at {}: patterns with different schemas are not supported",
            Where(path)));
      }
      pattern_schema = schema;
      patterns.push_back(pattern);
    }
  }
  // A required property that is not listed takes the patterns' schema where its name matches
  // one; CollectProperties gives it additionalProperties' (refusing false) otherwise.
  KV_ASSIGN_OR_RETURN(std::vector<Prop> props,
                      CollectProperties(s, patterns.empty() ? additional : json(true), path));
  KV_ASSIGN_OR_RETURN(const int64_t min_props, Count(s, "minProperties", path));
  KV_ASSIGN_OR_RETURN(const int64_t max_props, Count(s, "maxProperties", path));
  // Names an extra member must not take: the listed ones, those whose schema is false too.
  std::vector<std::string> names;
  for (const Prop& p : props) names.push_back(p.name);
  if (s.contains("properties")) {
    for (const auto& item : s["properties"].items()) {
      const std::string& name = item.key();
      const auto same = [&](const Prop& p) { return p.name == name; };
      if (std::none_of(props.begin(), props.end(), same)) names.push_back(name);  // left out
    }
  }
  if (names.empty() && additional == true && min_props <= 0 && max_props < 0 && patterns.empty()) {
    return AnyObject();
  }
  KV_ASSIGN_OR_RETURN(const std::vector<std::regex> regexes, NamePatterns(patterns, path));
  const auto matches_a_pattern = [&](const std::string& name) {
    return std::any_of(regexes.begin(), regexes.end(),
                       [&](const std::regex& r) { return std::regex_search(name, r); });
  };
  // A listed or required name matches a pattern.
  const bool pattern_names = std::any_of(names.begin(), names.end(), matches_a_pattern);
  for (Prop& p : props) {
    const bool listed = s.contains("properties") && s["properties"].contains(p.name);
    const bool matches = matches_a_pattern(p.name);
    if (!listed && !patterns.empty() && !matches) {
      if (additional == false) {
        return InvalidArgument(
            fmt::format("'required' at {}: property '{}' is not in 'properties', matches no "
                        "'patternProperties' and additionalProperties is false",
                        Where(path), p.name));
      }
      p.schema = additional;
    }
    if (matches) {  // the property's own schema and the patterns' both apply
      const std::string where = Child(Child(path, "properties"), p.name);
      KV_ASSIGN_OR_RETURN(json a, FlattenSchema(root_, p.schema, where, 0));
      KV_ASSIGN_OR_RETURN(json b, FlattenSchema(root_, pattern_schema, where, 0));
      KV_ASSIGN_OR_RETURN(p.schema, MergeSchemas(root_, a, b, where));
    }
  }
  std::vector<int> values;
  for (const Prop& p : props) {
    const bool listed = s.contains("properties") && s["properties"].contains(p.name);
    const std::string where =
        listed ? Child(Child(path, "properties"), p.name) : Child(path, "additionalProperties");
    KV_ASSIGN_OR_RETURN(const int v, Nested(p.schema, where));
    values.push_back(v);
  }
  // Extra members: with patterns, keys of the patterns but the listed names, with the patterns'
  // schema, unless additionalProperties gives every other key the same schema or a pattern
  // matches every key (then any key but the listed names, as without patterns). Keys that match
  // no pattern are not generated beside a different additionalProperties, nor any pattern keys
  // where leaving out the names is past CompileRegexExcept's bounds or a pattern that a name
  // matches is one keys cannot take: a subset of what the schema allows.
  json extra_value = additional;
  int extra_key = -1;
  if (!patterns.empty()) {
    const bool trivial = pattern_schema == true || pattern_schema == json::object();
    // A pattern that every key contains a match of ("", ".*"): every key takes its schema.
    const bool every_key = std::any_of(patterns.begin(), patterns.end(), [](const std::string& p) {
      return p.empty() || p == ".*" || p == "^.*" || p == ".*$";
    });
    if (additional == pattern_schema || (additional == true && trivial) || every_key) {
      extra_value = pattern_schema;
    } else {
      std::vector<Sequence> keys;
      bool exact = true;
      for (const std::string& pattern : patterns) {
        const std::string where = Child(Child(path, "patternProperties"), pattern);
        Result<int> k = PatternKeyRule(pattern, names, Where(where), b_);
        if (!k.ok() && k.status().code() == StatusCode::kNotFound) continue;  // names only
        // Past the bounds, or a pattern the key grammar cannot take beside names it matches:
        // no pattern keys (the names keep their places).
        if (!k.ok() && (k.status().code() == StatusCode::kResourceExhausted || pattern_names)) {
          exact = false;
          break;
        }
        KV_RETURN_IF_ERROR(k.status());
        keys.push_back({Sym::Ref(*k)});
      }
      if (exact && !keys.empty()) {
        extra_key = b_->Alternatives("pattern-keys", std::move(keys));
        extra_value = pattern_schema;
      } else {
        extra_value = false;
      }
    }
  }
  int extra_pair = -1;
  int early_pair = -1;  // extra keys that start with '$' (see ObjectSet)
  if (extra_value != false) {
    KV_ASSIGN_OR_RETURN(const int v, Nested(extra_value, Child(path, "additionalProperties")));
    const auto pair_of = [&](int key) {
      Sequence pair = {Sym::Ref(key)};
      Ws(&pair);
      pair.push_back(Byte(':'));
      Ws(&pair);
      pair.push_back(Sym::Ref(v));
      Ws(&pair);
      return b_->Alternatives("extra-member", {std::move(pair)});
    };
    if (extra_key < 0) {
      extra_key = names.empty() ? GenericString() : ExtraKeyRule(names, b_);
      early_pair = pair_of(ExtraKeyRule(names, b_, "$"));
    }
    extra_pair = pair_of(extra_key);
  }
  Symbol members;
  bool feasible = false;
  if (props.size() <= static_cast<size_t>(MemberSetSpec::kMaxMembers)) {
    MemberSetSpec spec = ObjectSet(props, values, extra_pair, min_props, max_props);
    spec.early_extra = early_pair;
    feasible = spec.CanFinish(0, 0);
    if (feasible) members = b_->Set("members", std::move(spec));
  } else {
    const int chain = ObjectChain(props, values, extra_pair, min_props, max_props);
    feasible = chain >= 0;
    members = Sym::Ref(chain);
  }
  if (!feasible) {
    return InvalidArgument(fmt::format(
        "no object at {} satisfies 'minProperties'/'maxProperties' with the properties it allows",
        Where(path)));
  }
  Sequence obj = {Byte('{')};
  Ws(&obj);
  obj.insert(obj.end(), {members, Byte('}')});
  return b_->Alternatives("object", {std::move(obj)});
}

// "[" ws items "]" whose items are distinct values of `domain`: one state per set of values
// used so far (its size is the count, so minItems/maxItems hold exactly).
Result<int> Compiler::UniqueArrayRule(const json& domain, int64_t min_items, int64_t max_items,
                                      const std::string& path) {
  const size_t n = domain.size();
  if (min_items > static_cast<int64_t>(n) || (max_items >= 0 && min_items > max_items)) {
    return InvalidArgument(fmt::format(
        "'uniqueItems' at {}: minItems {} is more than the {} values the items allow (or than "
        "maxItems)",
        Where(path), min_items, n));
  }
  std::vector<Sequence> literal;
  for (const json& v : domain) literal.push_back(b_->Literal(v.dump()));
  const size_t sets = size_t{1} << n;
  std::vector<int> rule(sets);  // rule[S]: the rest of the array after the values in S
  for (size_t set = 0; set < sets; ++set) rule[set] = b_->AddRule("unique-items");
  for (size_t set = 0; set < sets; ++set) {
    const auto used = static_cast<int64_t>(std::popcount(set));
    if (used >= min_items) b_->AddAlternative(rule[set], {});
    if (max_items >= 0 && used >= max_items) continue;
    for (size_t j = 0; j < n; ++j) {
      if (set & (size_t{1} << j)) continue;
      Sequence next = set == 0 ? Sequence{} : Sequence{Byte(',')};
      if (set != 0) Ws(&next);
      next.insert(next.end(), literal[j].begin(), literal[j].end());
      Ws(&next);
      next.push_back(Sym::Ref(rule[set | (size_t{1} << j)]));
      b_->AddAlternative(rule[set], std::move(next));
    }
  }
  Sequence arr = {Byte('[')};
  Ws(&arr);
  arr.insert(arr.end(), {Sym::Ref(rule[0]), Byte(']')});
  return b_->Alternatives("array", {std::move(arr)});
}

// "[" ws elements "]": the prefixItems in order (any prefix of them), then items, within
// minItems..maxItems. Each element is followed by ws; elements after the first by "," ws.
Result<int> Compiler::ArrayRule(const json& s, const std::string& path) {
  KV_ASSIGN_OR_RETURN(const int64_t min_items, Count(s, "minItems", path));
  KV_ASSIGN_OR_RETURN(int64_t max_items, Count(s, "maxItems", path));
  json items = s.contains("items") ? s["items"] : json(true);
  json prefix = s.contains("prefixItems") ? s["prefixItems"] : json::array();
  const bool tuple = items.is_array();
  if (tuple) {
    // Drafts 4 to 2019-09: an array of items is the prefix, additionalItems the rest.
    if (s.contains("prefixItems")) {
      return InvalidArgument(fmt::format(
          "'items' at {} is an array (the draft-7 tuple form) beside 'prefixItems'", Where(path)));
    }
    prefix = std::move(items);
    items = s.contains("additionalItems") ? s["additionalItems"] : json(true);
  }
  if (!prefix.is_array()) {
    return InvalidArgument(fmt::format("'prefixItems' at {} must be an array", Where(path)));
  }
  const auto k = static_cast<int64_t>(prefix.size());
  bool unique = false;
  if (s.value("uniqueItems", false) == true) {
    // Exact where the items take a few known values (enum, const, boolean, null) and there is
    // no prefix: a grammar rule per set of values used. Otherwise the array is marked and the
    // ConstraintProcessor compares the items as they are written (unique_items.h).
    if (k == 0 && (items.is_object() || items.is_boolean())) {
      KV_ASSIGN_OR_RETURN(const json flat, FlattenSchema(root_, items, Child(path, "items"), 0));
      if (std::optional<json> domain = FiniteDomain(flat)) {
        return UniqueArrayRule(*domain, std::max<int64_t>(min_items, 0), max_items, path);
      }
    }
    unique = true;
  }
  if (items == false) max_items = max_items < 0 ? k : std::min(max_items, k);
  const int64_t lo = std::max<int64_t>(min_items, 0);
  if (max_items >= 0 && lo > max_items) {
    return InvalidArgument(fmt::format(
        "'minItems' at {} exceeds 'maxItems' (or the prefixItems with items false)", Where(path)));
  }
  std::vector<int> elems;
  for (int64_t j = 0; j < k && (max_items < 0 || j < max_items); ++j) {
    KV_ASSIGN_OR_RETURN(const int e, Nested(prefix[static_cast<size_t>(j)],
                                            Child(Child(path, tuple ? "items" : "prefixItems"),
                                                  std::to_string(j))));
    elems.push_back(e);
  }
  Sequence comma = {Byte(',')};
  Ws(&comma);
  // After the prefix: the remaining count of items, each "," ws item ws (the first without a
  // comma when there is no prefix).
  int tail = b_->Alternatives("items-end", {{}});
  const int64_t rest_lo = std::max<int64_t>(lo - k, 0);
  const int64_t rest_hi = max_items < 0 ? -1 : max_items - k;
  if (items != false && rest_hi != 0 && (max_items < 0 || max_items > k)) {
    KV_ASSIGN_OR_RETURN(const int item,
                        Nested(items, Child(path, tuple ? "additionalItems" : "items")));
    Sequence next = comma;
    next.push_back(Sym::Ref(item));
    Ws(&next);
    if (k == 0) {
      Sequence first = {Sym::Ref(item)};
      Ws(&first);
      first.push_back(Sym::Ref(b_->Repeat("items", next, std::max<int64_t>(rest_lo - 1, 0),
                                          rest_hi < 0 ? -1 : rest_hi - 1)));
      std::vector<Sequence> alts = {std::move(first)};
      if (rest_lo == 0) alts.push_back({});
      tail = b_->Alternatives("items", std::move(alts));
    } else {
      tail = b_->Repeat("items", next, rest_lo, rest_hi);
    }
  }
  // The prefix chain, from the end: state j = j elements written.
  int state = tail;
  for (size_t j = elems.size(); j-- > 0;) {
    Sequence take = j == 0 ? Sequence{} : comma;
    take.push_back(Sym::Ref(elems[j]));
    Ws(&take);
    take.push_back(Sym::Ref(state));
    std::vector<Sequence> alts = {std::move(take)};
    if (static_cast<int64_t>(j) >= lo) alts.push_back({});
    state = b_->Alternatives("prefix-items", std::move(alts));
  }
  Sequence arr = {Byte('[')};
  Ws(&arr);
  arr.insert(arr.end(), {Sym::Ref(state), Byte(']')});
  if (!unique) return b_->Alternatives("array", {std::move(arr)});
  const int rule = b_->AddRule("unique-array");  // never shared with an unmarked array
  b_->AddAlternative(rule, std::move(arr));
  b_->MarkUniqueArray(rule);
  return rule;
}

}  // namespace

Result<int> CompileJsonSchema(const nlohmann::ordered_json& schema,
                              const JsonSchemaOptions& options, GrammarBuilder* builder) {
  Compiler c(schema, options, builder);
  return c.Compile(schema, "");
}

int AddJsonObjectRule(const JsonSchemaOptions& options, GrammarBuilder* builder) {
  const json empty = json::object();
  Compiler c(empty, options, builder);
  return c.AnyObject();
}

}  // namespace kvserve::structured
