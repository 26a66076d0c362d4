// Schema-level helpers of the JSON Schema compiler (json_schema.cc): keyword checks, local $ref
// resolution, and inlining of $ref and allOf into one merged schema. The declarations are in
// json_schema_internal.h.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "kvserve/status.h"
#include "structured/json_schema_internal.h"

namespace kvserve::structured::json_schema_internal {

using json = nlohmann::ordered_json;

inline constexpr int kMaxInlineDepth = 32;  // $ref / allOf inlined into one another

// The keywords this compiler enforces (with $defs and definitions, which hold subschemas).
const std::set<std::string>& Enforced() {
  static const std::set<std::string> kEnforced = {"type",
                                                  "properties",
                                                  "required",
                                                  "additionalProperties",
                                                  "items",
                                                  "prefixItems",
                                                  "minItems",
                                                  "maxItems",
                                                  "enum",
                                                  "const",
                                                  "anyOf",
                                                  "oneOf",
                                                  "allOf",
                                                  "$ref",
                                                  "minLength",
                                                  "maxLength",
                                                  "pattern",
                                                  "format",
                                                  "minimum",
                                                  "maximum",
                                                  "nullable",
                                                  "exclusiveMinimum",
                                                  "exclusiveMaximum",
                                                  "$defs",
                                                  "definitions",
                                                  "additionalItems",
                                                  "not",
                                                  "minProperties",
                                                  "maxProperties",
                                                  "multipleOf",
                                                  "patternProperties",
                                                  "dependencies",
                                                  "dependentRequired",
                                                  "dependentSchemas",
                                                  "uniqueItems"};
  return kEnforced;
}

// The keywords of JSON Schema (drafts 3 to 2020-12) that assert something about an instance or
// apply subschemas to it, and that this compiler does not enforce: refused, never dropped.
const std::set<std::string>& Unenforced() {
  static const std::set<std::string> kUnenforced = {"propertyNames",
                                                    "if",
                                                    "then",
                                                    "else",
                                                    "divisibleBy",
                                                    "contains",
                                                    "minContains",
                                                    "maxContains",
                                                    "unevaluatedProperties",
                                                    "unevaluatedItems",
                                                    "$dynamicRef",
                                                    "$recursiveRef",
                                                    "extends",
                                                    "disallow"};
  return kUnenforced;
}

// A keyword that constrains nothing here: an annotation, a vendor extension, an unknown or misspelt
// keyword (the specification says to ignore those), or, once CheckKeywords passed, an unenforced
// keyword in its inert form.
bool IsIgnored(const std::string& k) { return Enforced().count(k) == 0; }

std::string Where(const std::string& path) { return path.empty() ? "(root)" : path; }

std::string Child(const std::string& path, std::string_view key) {
  std::string out = path + "/";
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

bool IsTrivialSchema(const json& v) { return v == true || (v.is_object() && v.empty()); }

// Whether an unenforced keyword constrains nothing where it stands (its default value, or a
// keyword that the specification makes inert without its partner).
bool IsInert(const std::string& k, const json& v, const json& s) {
  if (k == "then" || k == "else") return !s.contains("if");
  if (k == "if") return !s.contains("then") && !s.contains("else");
  if (k == "minContains" || k == "maxContains") return !s.contains("contains");
  if (k == "propertyNames" || k == "unevaluatedProperties" || k == "unevaluatedItems") {
    return IsTrivialSchema(v);
  }
  return false;
}

}  // namespace

Status CheckKeywords(const json& s, const std::string& path) {
  for (const auto& [k, v] : s.items()) {
    if (Unenforced().count(k) == 0 || IsInert(k, v, s)) continue;
    return InvalidArgument(
        fmt::format("unsupported JSON Schema keyword '{}' at {}", k, Where(path)));
  }
  for (const char* defs : {"$defs", "definitions"}) {
    if (s.contains(defs) && !s[defs].is_object()) {
      return InvalidArgument(fmt::format("'{}' at {} must be an object", defs, Where(path)));
    }
  }
  return Status::Ok();
}

Result<unsigned> TypeMask(const json& t, const std::string& path) {
  static const std::map<std::string, unsigned> kTypes = {
      {"null", kNull},  {"boolean", kBool}, {"integer", kInt}, {"number", kInt | kNum},
      {"string", kStr}, {"array", kArr},    {"object", kObj}};
  unsigned mask = 0;
  const json list = t.is_array() ? t : json::array({t});
  for (const json& name : list) {
    auto it = name.is_string() ? kTypes.find(name.get<std::string>()) : kTypes.end();
    if (it == kTypes.end()) {
      return InvalidArgument(
          fmt::format("'type' at {}: unknown type {}", Where(path), name.dump()));
    }
    mask |= it->second;
  }
  if (mask == 0) return InvalidArgument(fmt::format("'type' at {} is an empty list", Where(path)));
  return mask;
}

json TypeNames(unsigned mask) {
  json out = json::array();
  for (auto [bit, name] : {std::pair{kNull, "null"},
                           {kBool, "boolean"},
                           {kStr, "string"},
                           {kArr, "array"},
                           {kObj, "object"}}) {
    if (mask & bit) out.push_back(name);
  }
  if (mask & kNum) {
    out.push_back("number");
  } else if (mask & kInt) {
    out.push_back("integer");
  }
  return out;
}

// The node a local $ref ("#" or "#/a/b~1c") points at in `root`.
Result<const json*> ResolveRef(const json& root, const json& ref, const std::string& path) {
  const std::string r = ref.is_string() ? ref.get<std::string>() : ref.dump();
  if (!ref.is_string() || r.empty() || r[0] != '#' || (r.size() > 1 && r[1] != '/')) {
    return InvalidArgument(
        fmt::format("unsupported $ref '{}' at {}: only local JSON pointers ('#', '#/$defs/name', "
                    "'#/definitions/name') are supported",
                    r, Where(path)));
  }
  const json* node = &root;
  for (size_t pos = 1; pos < r.size();) {
    const size_t end = std::min(r.find('/', pos + 1), r.size());
    std::string token;
    for (size_t i = pos + 1; i < end; ++i) {
      if (r[i] == '~' && i + 1 < end && (r[i + 1] == '0' || r[i + 1] == '1')) {
        token += r[i + 1] == '0' ? '~' : '/';
        ++i;
      } else {
        token += r[i];
      }
    }
    const json* next = nullptr;
    if (node->is_object() && node->contains(token)) {
      next = &(*node)[token];
    } else if (node->is_array() && !token.empty() && token.size() < 9 &&
               token.find_first_not_of("0123456789") == std::string::npos &&
               std::stoul(token) < node->size()) {
      next = &(*node)[std::stoul(token)];
    }
    if (next == nullptr) {
      return InvalidArgument(fmt::format("$ref '{}' at {} points at nothing", r, Where(path)));
    }
    node = next;
    pos = end;
  }
  return node;
}

Result<json> FlattenSchema(const json& root, const json& s, const std::string& path, int depth);

namespace {

Result<json> Merge(const json& root, const json& a, const json& b, const std::string& path,
                   int depth);

// a AND b for any two schemas (booleans included).
Result<json> MergeSub(const json& root, const json& a, const json& b, const std::string& path,
                      int depth) {
  if (a == true) return b;
  if (b == true) return a;
  if (a == false || b == false) return json(false);
  KV_ASSIGN_OR_RETURN(json fa, FlattenSchema(root, a, path, depth + 1));
  KV_ASSIGN_OR_RETURN(json fb, FlattenSchema(root, b, path, depth + 1));
  return Merge(root, fa, fb, path, depth + 1);
}

// properties, additionalProperties and required of a AND b. A property listed on one side
// only must also pass the other side's additionalProperties (absent: true, as a validator
// reads it), so `false` there makes it a forbidden (false) property.
Status MergeObjectKeywords(const json& root, const json& a, const json& b, const std::string& path,
                           int depth, json* out) {
  const json none = json::object();
  const json& pa = a.contains("properties") ? a["properties"] : none;
  const json& pb = b.contains("properties") ? b["properties"] : none;
  if (!pa.is_object() || !pb.is_object()) {
    return InvalidArgument(fmt::format("'properties' at {} must be an object", Where(path)));
  }
  const json add_a = a.value("additionalProperties", json(true));
  const json add_b = b.value("additionalProperties", json(true));
  json props = json::object();
  // A property whose two schemas no value meets both can only be absent: false (and an object
  // that requires it matches nothing, which compiling it says).
  const auto merge_property = [&](const std::string& k, const json& x, const json& y) -> Status {
    Result<json> m = MergeSub(root, x, y, Child(Child(path, "properties"), k), depth);
    if (!m.ok() && !MatchesNoValue(m.status())) return m.status();
    props[k] = m.ok() ? std::move(*m) : json(false);
    return Status::Ok();
  };
  for (const auto& [k, v] : pa.items()) {
    KV_RETURN_IF_ERROR(merge_property(k, v, pb.contains(k) ? pb[k] : add_b));
  }
  for (const auto& [k, v] : pb.items()) {
    if (pa.contains(k)) continue;
    KV_RETURN_IF_ERROR(merge_property(k, add_a, v));
  }
  out->erase("properties");
  if (!props.empty()) (*out)["properties"] = std::move(props);
  out->erase("additionalProperties");
  if (a.contains("additionalProperties") || b.contains("additionalProperties")) {
    KV_ASSIGN_OR_RETURN((*out)["additionalProperties"],
                        MergeSub(root, add_a, add_b, Child(path, "additionalProperties"), depth));
  }
  json required = json::array();
  for (const json* side : {&a, &b}) {
    if (!side->contains("required")) continue;
    if (!(*side)["required"].is_array()) {
      return InvalidArgument(fmt::format("'required' at {} must be an array", Where(path)));
    }
    for (const json& name : (*side)["required"]) {
      if (std::find(required.begin(), required.end(), name) == required.end()) {
        required.push_back(name);
      }
    }
  }
  out->erase("required");
  if (!required.empty()) (*out)["required"] = std::move(required);
  return Status::Ok();
}

// a AND b for two flattened schemas: types intersect, bounds tighten, object keywords merge,
// items merge; any other keyword must be equal on both sides.
Result<json> Merge(const json& root, const json& a, const json& b, const std::string& path,
                   int depth) {
  static const std::set<std::string> kLower = {"minimum", "exclusiveMinimum", "minLength",
                                               "minItems", "minProperties"};
  static const std::set<std::string> kUpper = {"maximum", "exclusiveMaximum", "maxLength",
                                               "maxItems", "maxProperties"};
  json out = a;
  for (const auto& [k, vb] : b.items()) {
    if (k == "properties" || k == "additionalProperties" || k == "required") continue;
    auto it = out.find(k);
    if (it == out.end()) {
      out[k] = vb;
    } else if (k == "type") {
      KV_ASSIGN_OR_RETURN(const unsigned ta, TypeMask(*it, path));
      KV_ASSIGN_OR_RETURN(const unsigned tb, TypeMask(vb, path));
      if ((ta & tb) == 0) {
        return InvalidArgument(fmt::format("'allOf' at {}: the 'type's {} and {} do not intersect",
                                           Where(path), it->dump(), vb.dump()));
      }
      *it = TypeNames(ta & tb);
    } else if ((kLower.count(k) || kUpper.count(k)) && it->is_number() && vb.is_number()) {
      const bool take_b = kLower.count(k) ? vb.get<double>() > it->get<double>()
                                          : vb.get<double>() < it->get<double>();
      if (take_b) *it = vb;
    } else if (k == "enum" && it->is_array() && vb.is_array()) {
      json both = json::array();  // the values both allow, in a's order
      for (const json& v : *it) {
        if (std::find(vb.begin(), vb.end(), v) != vb.end()) both.push_back(v);
      }
      if (both.empty()) {
        return InvalidArgument(fmt::format(
            "'allOf' at {} matches nothing: its 'enum's have no value in common", Where(path)));
      }
      *it = std::move(both);
    } else if (k == "items") {
      KV_ASSIGN_OR_RETURN(*it, MergeSub(root, *it, vb, Child(path, "items"), depth));
    } else if (*it != vb) {
      return InvalidArgument(fmt::format(
          "'allOf' at {}: conflicting '{}' values cannot be merged (only type, properties, "
          "required, additionalProperties, items and bounds are merged)",
          Where(path), k));
    }
  }
  const bool objects = a.contains("properties") || b.contains("properties") ||
                       a.contains("additionalProperties") || b.contains("additionalProperties") ||
                       a.contains("required") || b.contains("required");
  if (objects) KV_RETURN_IF_ERROR(MergeObjectKeywords(root, a, b, path, depth, &out));
  return out;
}

}  // namespace

bool RefHidesSiblings(const json& root) {
  if (!root.is_object()) return false;
  auto it = root.find("$schema");
  if (it == root.end() || !it->is_string()) return false;
  const std::string& uri = it->get_ref<const std::string&>();
  for (const char* draft : {"draft-03", "draft-04", "draft-06", "draft-07"}) {
    if (uri.find(draft) != std::string::npos) return true;
  }
  return false;
}

// `s` with $ref and allOf at its top inlined and merged (a $ref alone where RefHidesSiblings),
// annotations and definitions dropped, and "nullable": true folded into "type".
Result<json> FlattenSchema(const json& root, const json& s, const std::string& path, int depth) {
  if (depth > kMaxInlineDepth) {
    return InvalidArgument(
        fmt::format("'$ref'/'allOf' at {} nest more than {} deep (a circular reference?)",
                    Where(path), kMaxInlineDepth));
  }
  if (s.is_boolean()) {
    if (s.get<bool>()) return json::object();
    return InvalidArgument(fmt::format("schema false at {} matches nothing", Where(path)));
  }
  if (!s.is_object()) {
    return InvalidArgument(fmt::format("schema at {} must be an object or a boolean, not {}",
                                       Where(path), s.type_name()));
  }
  KV_RETURN_IF_ERROR(CheckKeywords(s, path));
  json out = json::object();
  for (const auto& [k, v] : s.items()) {
    if (IsIgnored(k) || k == "$defs" || k == "definitions" || k == "allOf" || k == "$ref" ||
        k == "nullable") {
      continue;
    }
    out[k] = v;
  }
  if (s.value("nullable", false) == true && out.contains("type")) {
    KV_ASSIGN_OR_RETURN(const unsigned mask, TypeMask(out["type"], path));
    out["type"] = TypeNames(mask | kNull);
  }
  if (s.contains("$ref")) {
    KV_ASSIGN_OR_RETURN(const json* target, ResolveRef(root, s["$ref"], path));
    const std::string target_path = s["$ref"].get<std::string>().substr(1);
    KV_ASSIGN_OR_RETURN(json t, FlattenSchema(root, *target, target_path, depth + 1));
    if (RefHidesSiblings(root)) return t;
    KV_ASSIGN_OR_RETURN(out, Merge(root, t, out, path, depth));
  }
  if (s.contains("allOf")) {
    const json& all = s["allOf"];
    if (!all.is_array() || all.empty()) {
      return InvalidArgument(fmt::format("'allOf' at {} must be a non-empty array", Where(path)));
    }
    for (size_t i = 0; i < all.size(); ++i) {
      const std::string branch = Child(Child(path, "allOf"), std::to_string(i));
      KV_ASSIGN_OR_RETURN(json f, FlattenSchema(root, all[i], branch, depth + 1));
      KV_ASSIGN_OR_RETURN(out, Merge(root, out, f, branch, depth));
    }
  }
  return out;
}

Result<json> MergeSchemas(const json& root, const json& a, const json& b, const std::string& path) {
  return Merge(root, a, b, path, 0);
}

}  // namespace kvserve::structured::json_schema_internal
