// JSON Schema → grammar: the subset that structured output uses in practice.
//
// Constraints: type (one or a list; "null" in a list makes a type nullable), properties,
// required, additionalProperties (false, true, or a schema; default: true unless strict),
// items, prefixItems, minItems, maxItems, enum, const, anyOf, oneOf (compiled as anyOf: a
// grammar cannot count matches), allOf (of object schemas, merged), $ref to "#", "#/$defs/..."
// and "#/definitions/..." (recursion included), minLength, maxLength, pattern, format (date,
// time, date-time, uuid, email, and the ones below that are annotations), minimum, maximum,
// exclusiveMinimum, exclusiveMaximum on integers (as digit ranges), and nullable (OpenAPI 3.0).
// Annotations are ignored: title, description, examples, default, $comment, $schema, $id,
// deprecated, readOnly, writeOnly, and any key starting with "x-".
// Anything else is InvalidArgument naming the keyword and its JSON pointer: never silently
// dropped. Properties are emitted in the schema's order; required ones always, optional ones
// may be skipped.
#pragma once

#include <nlohmann/json.hpp>

#include "kvserve/status.h"
#include "structured/grammar.h"

namespace kvserve::structured {

struct JsonSchemaOptions {
  // Off: compact JSON, `{"a":1,"b":[1,2]}`. On: up to kMaxWhitespace bytes of space, \n or \t
  // wherever JSON allows whitespace.
  bool flexible_whitespace = false;
  static constexpr int kMaxWhitespace = 8;
  // additionalProperties defaults to false instead of true (OpenAI's strict mode).
  bool strict = false;
};

// Adds rules for values valid against `schema` and returns the rule.
Result<int> CompileJsonSchema(const nlohmann::json& schema, const JsonSchemaOptions& options,
                              GrammarBuilder* builder);
// Any JSON object (response_format json_object), any JSON value below it.
int AddJsonObjectRule(const JsonSchemaOptions& options, GrammarBuilder* builder);

}  // namespace kvserve::structured
