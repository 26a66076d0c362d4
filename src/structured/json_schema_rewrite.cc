// Schema rewrites of the JSON Schema compiler (json_schema.cc): the keywords it enforces by
// turning them into others (not, dependencies as anyOf branches, oneOf as exclusive anyOf
// branches), the finite item domains of uniqueItems, and the types a schema allows.
// The declarations are in json_schema_internal.h.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvserve/status.h"
#include "structured/json_schema_internal.h"

namespace kvserve::structured::json_schema_internal {

using json = nlohmann::ordered_json;

// Keys that constrain a value (everything but annotations and definitions).
bool HasConstraints(const json& s, std::initializer_list<std::string_view> ignore) {
  for (const auto& [k, v] : s.items()) {
    if (IsIgnored(k) || k == "$defs" || k == "definitions") {
      continue;
    }
    if (std::find(ignore.begin(), ignore.end(), k) != ignore.end()) continue;
    return true;
  }
  return false;
}

// Whether an enum value has one of the types in `mask` (integral floats count as integers).
bool HasType(const json& v, unsigned mask) {
  switch (v.type()) {
    case json::value_t::null:
      return mask & kNull;
    case json::value_t::boolean:
      return mask & kBool;
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return mask & kInt;
    case json::value_t::number_float: {
      const double d = v.get<double>();
      return (mask & kNum) || ((mask & kInt) && std::floor(d) == d);
    }
    case json::value_t::string:
      return mask & kStr;
    case json::value_t::array:
      return mask & kArr;
    case json::value_t::object:
      return mask & kObj;
    default:
      return false;
  }
}

bool MatchesNoValue(const Status& s) {
  if (s.code() != StatusCode::kInvalidArgument) return false;
  const std::string& m = s.message();
  for (const char* says :
       {" matches nothing", "no value satisfies the schema", "is required but its schema is false",
        "is not in 'properties' and additionalProperties is false"}) {
    if (m.find(says) != std::string::npos) return true;
  }
  return false;
}

// The declared types ("nullable": true adds null), or where there is no "type" every type: as
// the specification reads it, {"properties": {...}} constrains objects and takes any other
// value as it is (an array, a string), and so does the grammar.
Result<unsigned> AllowedTypes(const json& s, const std::string& path) {
  if (!s.contains("type")) return static_cast<unsigned>(kAllTypes);
  KV_ASSIGN_OR_RETURN(unsigned mask, TypeMask(s["type"], path));
  if (s.value("nullable", false) == true) mask |= kNull;
  return mask;
}

// `s` with its "not" folded into the other keywords, for the forms a grammar can take exactly:
// not false (nothing excluded), not {"not": X} (X, merged as allOf), and not {"type": T} (T's
// types removed). not {} or true excludes everything; any other form is refused.
Result<json> ApplyNot(const json& root, const json& s, const std::string& path) {
  json base = s;
  base.erase("not");
  const json& n = s["not"];
  const std::string where = Child(path, "not");
  if (n == false) return base;
  if (!n.is_boolean() && !n.is_object()) {
    return InvalidArgument(fmt::format("schema at {} must be an object or a boolean, not {}",
                                       Where(where), n.type_name()));
  }
  std::vector<std::string> keys;
  if (n.is_object()) {
    KV_RETURN_IF_ERROR(CheckKeywords(n, where));
    for (const auto& [k, v] : n.items()) {
      if (!IsIgnored(k) && k != "$defs" && k != "definitions") keys.push_back(k);
    }
  }
  if (keys.empty()) {
    return InvalidArgument(fmt::format(
        "schema at {} matches nothing: its 'not' holds a schema that every value satisfies",
        Where(path)));
  }
  if (keys.size() == 1 && keys[0] == "not") {
    KV_ASSIGN_OR_RETURN(json inner, FlattenSchema(root, n["not"], Child(where, "not"), 0));
    return MergeSchemas(root, base, inner, path);
  }
  if (keys.size() == 1 && keys[0] == "type") {
    KV_ASSIGN_OR_RETURN(const unsigned excluded, TypeMask(n["type"], where));
    KV_ASSIGN_OR_RETURN(unsigned allowed, AllowedTypes(base, path));
    if ((excluded & kInt) && !(excluded & kNum) && (allowed & kNum)) {
      return InvalidArgument(fmt::format(
          "'not' at {}: numbers that are not integers cannot be expressed", Where(path)));
    }
    allowed &= ~excluded;
    if (allowed == 0) {
      return InvalidArgument(
          fmt::format("schema at {} matches nothing: 'not' excludes every type", Where(path)));
    }
    base["type"] = TypeNames(allowed);
    base.erase("nullable");
    return base;
  }
  return InvalidArgument(
      fmt::format("unsupported 'not' at {}: only not over types, over another not, or over false",
                  Where(path)));
}

// `s` with dependencies / dependentRequired / dependentSchemas as anyOf branches: for each
// combination of their trigger properties, absent (a false property) or present (required, with
// what it brings: more required names, or a schema merged in). At most kMaxDependencies
// triggers (2^n branches); a combination whose merge fails, or that drops a property `s`
// requires, is left out.
constexpr size_t kMaxDependencies = 4;
Result<json> ApplyDependencies(const json& root, const json& s, const std::string& path) {
  json base = s;
  std::vector<std::pair<std::string, json>> triggers;  // name, schema it brings
  for (const char* key : {"dependencies", "dependentRequired", "dependentSchemas"}) {
    if (!s.contains(key)) continue;
    base.erase(key);
    const json& deps = s[key];
    if (!deps.is_object()) {
      return InvalidArgument(fmt::format("'{}' at {} must be an object", key, Where(path)));
    }
    for (const auto& [name, dep] : deps.items()) {
      if (dep.is_array()) {
        for (const json& r : dep) {
          if (!r.is_string()) {
            return InvalidArgument(
                fmt::format("'{}' at {}: '{}' must list property names", key, Where(path), name));
          }
        }
        triggers.emplace_back(name, json{{"required", dep}});
      } else if ((dep.is_object() || dep.is_boolean()) &&
                 std::string_view(key) != "dependentRequired") {
        KV_ASSIGN_OR_RETURN(json flat, FlattenSchema(root, dep, Child(Child(path, key), name), 0));
        triggers.emplace_back(name, std::move(flat));
      } else {
        return InvalidArgument(fmt::format("'{}' at {}: '{}' must be {}", key, Where(path), name,
                                           std::string_view(key) == "dependentRequired"
                                               ? "an array of names"
                                               : "an array of names or a schema"));
      }
    }
  }
  if (triggers.empty()) return base;
  if (triggers.size() > kMaxDependencies) {
    return InvalidArgument(
        fmt::format("unsupported dependencies at {}: more than {} trigger properties", Where(path),
                    kMaxDependencies));
  }
  if (base.contains("anyOf") || base.contains("oneOf")) {
    return InvalidArgument(
        fmt::format("unsupported dependencies at {}: beside 'anyOf'/'oneOf'", Where(path)));
  }
  std::vector<std::string> required;
  if (base.contains("required") && base["required"].is_array()) {
    for (const json& r : base["required"]) {
      if (r.is_string()) required.push_back(r.get<std::string>());
    }
  }
  json branches = json::array();
  for (size_t combo = 0; combo < (size_t{1} << triggers.size()); ++combo) {
    json branch = json::object();
    bool ok = true;
    for (size_t j = 0; j < triggers.size() && ok; ++j) {
      const auto& [name, brings] = triggers[j];
      json piece;
      if (combo & (size_t{1} << j)) {
        piece = brings;
        Result<json> with = MergeSchemas(root, piece, json{{"required", {name}}}, path);
        if (!with.ok()) return with.status();
        piece = std::move(*with);
      } else {
        if (std::find(required.begin(), required.end(), name) != required.end()) ok = false;
        piece = json{{"properties", {{name, false}}}};
      }
      Result<json> merged = MergeSchemas(root, branch, piece, path);
      ok = ok && merged.ok();
      if (ok) branch = std::move(*merged);
    }
    // A combination that requires a property another one forbids cannot hold.
    if (ok && branch.contains("required") && branch.contains("properties")) {
      for (const json& r : branch["required"]) {
        if (r.is_string() &&
            branch["properties"].value(r.get<std::string>(), json(true)) == false) {
          ok = false;
        }
      }
    }
    if (ok) branches.push_back(std::move(branch));
  }
  if (branches.empty()) {
    return InvalidArgument(fmt::format(
        "schema at {} matches nothing: no combination of its dependencies can hold", Where(path)));
  }
  base["anyOf"] = std::move(branches);
  return base;
}

namespace {

// The explicit types of a flattened schema (every type when it names none).
unsigned DeclaredTypes(const json& s) {
  if (!s.contains("type")) return kAllTypes;
  Result<unsigned> mask = TypeMask(s["type"], "");
  return mask.ok() ? *mask : static_cast<unsigned>(kAllTypes);
}

// Whether s requires property p.
bool Requires(const json& s, const std::string& p) {
  if (!s.contains("required") || !s["required"].is_array()) return false;
  return std::find(s["required"].begin(), s["required"].end(), p) != s["required"].end();
}

// Whether s forbids property p (its schema is false, or additionalProperties false leaves it out).
bool Forbids(const json& s, const std::string& p) {
  const json props = s.value("properties", json::object());
  if (props.is_object() && props.contains(p)) return props[p] == false;
  return s.value("additionalProperties", json(true)) == false && !s.contains("patternProperties");
}

// Whether no value satisfies both flattened schemas, as far as simple evidence shows: types that
// do not meet, enum/const values the other side refuses, a property one side requires and the
// other forbids, or a property both require whose schemas are disjoint.
bool ProvablyDisjoint(const json& root, const json& a, const json& b, int depth) {
  if (!a.is_object() || !b.is_object() || depth > 8) return false;
  const unsigned ta = DeclaredTypes(a), tb = DeclaredTypes(b);
  if ((ta & tb) == 0) return true;
  for (const auto& [x, y] : {std::pair<const json&, const json&>{a, b}, {b, a}}) {
    if (!x.contains("enum") && !x.contains("const")) continue;
    const json values = x.contains("const") ? json::array({x["const"]}) : x["enum"];
    if (!values.is_array()) continue;
    const json other = y.contains("const")  ? json::array({y["const"]})
                       : y.contains("enum") ? y["enum"]
                                            : json();
    bool shared = false;
    for (const json& v : values) {
      if (!HasType(v, DeclaredTypes(y))) continue;
      if (other.is_array() && std::find(other.begin(), other.end(), v) == other.end()) continue;
      shared = true;
    }
    if (!shared) return true;
  }
  // A value both accept is an object from here on: required and forbidden properties decide.
  if ((ta & tb) != kObj) return false;
  for (const auto& [x, y] : {std::pair<const json&, const json&>{a, b}, {b, a}}) {
    if (!x.contains("required") || !x["required"].is_array()) continue;
    for (const json& r : x["required"]) {
      if (!r.is_string()) continue;
      const std::string p = r.get<std::string>();
      if (Forbids(y, p)) return true;
      if (!Requires(y, p) || &x != &a) continue;  // both require p: compare once
      const json none = json::object();
      const json& pa = a.value("properties", none).value(p, json(true));
      const json& pb = b.value("properties", none).value(p, json(true));
      Result<json> fa = FlattenSchema(root, pa, "", 0), fb = FlattenSchema(root, pb, "", 0);
      if (fa.ok() && fb.ok() && ProvablyDisjoint(root, *fa, *fb, depth + 1)) return true;
    }
  }
  return false;
}

// A property that every branch (objects only) lists with schemas that pairwise admit no common
// value, though not every branch requires it: a discriminator the schema forgot to require.
std::optional<std::string> Discriminator(const json& root, const std::vector<json>& branches) {
  const json none = json::object();
  for (const json& b : branches) {
    if (!b.is_object() || DeclaredTypes(b) != kObj) return std::nullopt;
  }
  const json first_props = branches[0].value("properties", none);
  if (!first_props.is_object()) return std::nullopt;
  for (const auto& [p, first] : first_props.items()) {
    std::vector<json> schemas;
    for (const json& b : branches) {
      const json props = b.value("properties", none);
      if (!props.is_object() || !props.contains(p)) break;
      Result<json> f = FlattenSchema(root, props[p], "", 0);
      if (!f.ok()) break;
      schemas.push_back(std::move(*f));
    }
    if (schemas.size() != branches.size()) continue;
    bool disjoint = true;
    for (size_t i = 0; i < schemas.size() && disjoint; ++i) {
      for (size_t j = i + 1; j < schemas.size() && disjoint; ++j) {
        disjoint = ProvablyDisjoint(root, schemas[i], schemas[j], 1);
      }
    }
    if (disjoint) return p;
  }
  return std::nullopt;
}

}  // namespace

// A oneOf's branches as anyOf branches that no value satisfies twice, or nullopt with an error
// where that cannot be shown: pairwise provably disjoint branches (beside the constraints of
// `base`), or branches that each require one distinct property (then each also forbids the
// others'). A grammar cannot count how many branches a value matches, and compiling an
// overlapping oneOf as anyOf would accept values that match two.
Result<std::optional<json>> ExclusiveBranches(const json& root, const json& base,
                                              const json& branches, const std::string& path) {
  std::vector<json> flats;
  std::vector<std::string> only_required;
  for (size_t i = 0; i < branches.size(); ++i) {
    const std::string where = Child(Child(path, "oneOf"), std::to_string(i));
    Result<json> flattened = FlattenSchema(root, branches[i], where, 0);
    if (!flattened.ok() && MatchesNoValue(flattened.status())) flattened = json(false);
    KV_ASSIGN_OR_RETURN(json flat, std::move(flattened));
    std::vector<std::string> keys;
    for (const auto& [k, v] : flat.items()) {
      if (!IsIgnored(k)) keys.push_back(k);
    }
    if (keys.size() == 1 && keys[0] == "required" && flat["required"].is_array() &&
        flat["required"].size() == 1 && flat["required"][0].is_string()) {
      only_required.push_back(flat["required"][0].get<std::string>());
    }
    flats.push_back(std::move(flat));
  }
  const std::set<std::string> distinct(only_required.begin(), only_required.end());
  if (only_required.size() == branches.size() && distinct.size() == branches.size()) {
    json out = json::array();
    for (const std::string& name : only_required) {
      json branch = {{"required", {name}}, {"properties", json::object()}};
      for (const std::string& other : only_required) {
        if (other != name) branch["properties"][other] = false;
      }
      out.push_back(std::move(branch));
    }
    return std::optional<json>(std::move(out));
  }
  const bool beside = HasConstraints(base, {});
  std::vector<json> merged;
  for (const json& f : flats) {
    Result<json> m = beside ? MergeSchemas(root, base, f, path) : Result<json>(f);
    merged.push_back(m.ok() ? std::move(*m) : json(false));  // a failed merge matches nothing
  }
  for (size_t i = 0; i < merged.size(); ++i) {
    for (size_t j = i + 1; j < merged.size(); ++j) {
      if (merged[i] == false || merged[j] == false) continue;
      if (!ProvablyDisjoint(root, merged[i], merged[j], 0)) {
        if (std::optional<std::string> p = Discriminator(root, merged)) {
          // Objects that carry the property: each branch requires it (a subset of the oneOf,
          // whose branches then exclude each other).
          json out = json::array();
          for (const json& branch : branches) {
            json b = branch.is_object() ? branch : json::object();
            if (!b.contains("required") || !b["required"].is_array()) b["required"] = json::array();
            if (!Requires(b, *p)) b["required"].push_back(*p);
            out.push_back(std::move(b));
          }
          return std::optional<json>(std::move(out));
        }
        return InvalidArgument(fmt::format(
            "unsupported 'oneOf' at {}: branches {} and {} may both match a value, which a "
            "grammar cannot exclude (make them differ by type, by a const or enum property both "
            "require, or by a property one requires and the other forbids; or use anyOf)",
            Where(path), i, j));
      }
    }
  }
  return std::optional<json>(json(branches));
}

// The values a flattened item schema allows when it allows only a few known ones (at most
// kMaxUniqueDomain): enum or const (with type beside them), boolean, null.
constexpr size_t kMaxUniqueDomain = 10;
std::optional<json> FiniteDomain(const json& flat) {
  for (const auto& [k, v] : flat.items()) {
    if (k != "enum" && k != "const" && k != "type" && !IsIgnored(k)) return std::nullopt;
  }
  json values = json::array();
  if (flat.contains("enum") || flat.contains("const")) {
    const json all = flat.contains("const") ? json::array({flat["const"]}) : flat["enum"];
    if (!all.is_array()) return std::nullopt;
    Result<unsigned> mask = flat.contains("type")
                                ? TypeMask(flat["type"], "")
                                : Result<unsigned>(static_cast<unsigned>(kAllTypes));
    if (!mask.ok()) return std::nullopt;
    for (const json& v : all) {
      if (!HasType(v, *mask)) continue;
      if (flat.contains("const") && flat.contains("enum") &&
          std::find(flat["enum"].begin(), flat["enum"].end(), v) == flat["enum"].end()) {
        continue;
      }
      if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
    }
  } else if (flat.value("type", json()) == "boolean") {
    values = json::array({true, false});
  } else if (flat.value("type", json()) == "null") {
    values = json::array({nullptr});
  } else {
    return std::nullopt;
  }
  if (values.empty() || values.size() > kMaxUniqueDomain) return std::nullopt;
  return values;
}

}  // namespace kvserve::structured::json_schema_internal
