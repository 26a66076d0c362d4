// JSON Schema → grammar: the subset that structured output uses in practice.
//
// Constraints: type (one or a list; "null" in a list makes a type nullable), properties,
// required, additionalProperties (false, true, or a schema; default: true unless strict),
// patternProperties, minProperties, maxProperties, items (a schema, or drafts 4-2019's array
// with additionalItems), prefixItems, minItems, maxItems, uniqueItems, enum, const, anyOf, oneOf
// (where its branches exclude each other), allOf (of object schemas, merged), not (over types,
// over another not, over false), $ref to "#", "#/$defs/..." and "#/definitions/..." (recursion
// included), minLength, maxLength, pattern, format (date, time, date-time, duration, uuid,
// email, idn-email, ipv4, ipv6, hostname, uri, uri-reference, iri, iri-reference, json-pointer,
// relative-json-pointer on strings; int32 bounds a number), minimum, maximum,
// exclusiveMinimum, exclusiveMaximum (as digit ranges), multipleOf (whole numbers, and powers of
// ten down to 1e-6 as a cap on fraction digits), dependencies, dependentRequired and
// dependentSchemas (at most four trigger properties), and nullable (OpenAPI 3.0).
// Keywords the compiler does not know are ignored, as the specification requires: annotations
// (title, description, default, examples, $comment, $schema, $id, readOnly, contentEncoding,
// ...), vendor extensions (x-*, javaType, faker, ...), draft-04's id, misspellings; so are
// format names no draft defines (the specification makes them annotations).
// The keywords of drafts 3 to 2020-12 that constrain an instance and are not enforced here
// (propertyNames, if/then/else, divisibleBy, contains, minContains, maxContains,
// unevaluatedProperties, unevaluatedItems, $dynamicRef, $recursiveRef, extends, disallow, and the
// formats idn-hostname, uri-template and regex) are InvalidArgument naming the keyword and its JSON
// pointer, never silently dropped, except in a form that constrains nothing (then/else without if,
// if alone, minContains/ maxContains without contains, propertyNames/unevaluated* true or {}).
// Object members may come in any order, each listed property at most once, required ones
// always, extra keys anywhere among them once the required ones are written (before that, up
// to three additionalProperties keys that start with '$', ahead of the rest); over 64 listed
// properties, in the order the schema lists them (schemas are read as nlohmann::ordered_json) with
// extra keys after them.
//
// Every text the grammar matches is valid against the schema; some valid texts are never
// generated. The details:
// - JSON is compact unless flexible_whitespace; never whitespace before or after the top value.
// - Strings: any code point but '"', '\\' and U+0000-U+001F, or an escape (\uXXXX never a
//   surrogate, so every escape is one code point); minLength/maxLength count code points.
// - Numbers: at most 20 integer digits (15 between bounds), 6 fraction digits and a 2-digit
//   exponent; no "-0" within bounds. Integer bounds are exact digit ranges. A bounded number
//   is an in-range integer, or W.F with |W| < 10^9 compared with the bounds exactly as
//   decimals (a bound is the shortest decimal of its double: minimum 0.1 admits 0.1 and 0.5,
//   maximum 10 admits 10.0), with at most 15 significant digits in W and F together; an
//   exponent only where the sign alone meets the bounds (minimum 0 and no maximum: 1e-06);
//   bounds leaving nothing are InvalidArgument. multipleOf of a whole number m: a digit automaton
//   over the remainder mod m (m at most 10000), or within both bounds the listed multiples (at most
//   1000); on a "number" (not an "integer", which draft 4 keeps to whole literals) such a
//   multiple may be written with a zero fraction (6000.0).
// - format: dates from 0001-01-01 with real month lengths and leap years; time is RFC 3339
//   full-time (Z or ±HH:MM offset, up to 6 fraction digits); uuid is lowercase; email is a
//   conservative dot-atom@domain (6-110 characters). int32 bounds the range.
// - pattern: strings containing a match of the regex (regex.h), JSON Schema's search
//   semantics (each top-level alternative without ^ takes any prefix, without $ any suffix),
//   made of characters that need no JSON escaping (no '"', '\\' or controls; ASCII
//   only when \D \W \S, or \d \w \s with a negated class, appear, since their ASCII
//   meanings admit more than Python's). Beside minLength/maxLength (or a format beside them)
//   only when the pattern's own lengths already fit; pattern with format is refused.
// - additionalProperties true or a schema: extra members follow the listed ones, with keys
//   that differ from every listed name, of any length, whose characters are unescaped or
//   escapes of those JSON must escape ('"', '\\', controls; never \/ or \u0041, which could
//   spell a listed name). An object with no properties and additionalProperties true is any
//   JSON object.
// - Without "type", every type, each under the keywords for it: {"properties": {...}} takes
//   objects with those properties and any array, string, number, boolean or null.
// - enum/const: each value's compact dump(), kept where it has an allowed type and meets
//   minLength/maxLength/minimum/maximum beside it; other keywords beside enum are refused. A
//   whole number is also its other spelling (2.0 and 2: equal values), but as an "integer"
//   only without a fraction.
// - anyOf / oneOf leave out a branch that matches no value (false, not {}, an enum no value of
//   which fits, allOf parts that contradict each other); under allOf a property whose schemas
//   contradict each other can only be absent.
// - oneOf: compiled as anyOf where no value can match two branches: pairwise different types,
//   enum/const values the other branch refuses, a property one requires and the other forbids,
//   or a property both require with such disjoint schemas; or where each branch only requires
//   one property (each then forbids the others'). Otherwise refused.
// - uniqueItems: exact where the items allow at most 10 known values (enum, const, boolean,
//   null) and there is no prefix: a state per set of values used. Otherwise exact beside the
//   grammar: the array's rule is marked (GrammarBuilder::MarkUniqueArray) and matches repeats;
//   the ConstraintProcessor masks them (unique_items.h).
// - dependencies and friends: anyOf branches, one per combination of the trigger properties
//   absent or present (present: required, plus the names or schema it brings).
// - not: over types removes them; over another not is that schema merged in; over false is
//   nothing; over {} or true matches nothing (an error).
// - Enum/const values are their compact serialisations, with whitespace between the tokens of
//   arrays and objects where flexible_whitespace allows it.
// - anyOf/oneOf beside other constraints: each branch is merged with them (allOf rules).
//   $ref beside constraints is merged with its target (drafts 2019-09 on, and schemas
//   without "$schema"; where the root's "$schema" is draft 3 to 7, a $ref's siblings are
//   ignored, as those drafts say). allOf merges types (intersected),
//   properties (a property one side does not list must pass that side's
//   additionalProperties), required (union), additionalProperties, items and bounds (the
//   tighter); any other keyword must be equal on both sides.
// - patternProperties: every pattern must carry the same schema. A listed or required name
//   that a pattern matches (ECMA-262 search) takes both schemas. Other keys: any key where
//   additionalProperties has the patterns' schema (or both admit anything); otherwise only keys
//   that match a pattern (containing a match where the pattern has no ^ or $, fully matching it
//   where it has), and none where a listed name matches a pattern, unless a pattern matches
//   every key ("", ".*"): then any key but the listed names, with the patterns' schema.
// - minProperties/maxProperties count listed and extra members alike.
// - Formats beyond date/time/uuid/email/ipv4 are their RFC grammars as patterns: uri and
//   uri-reference are RFC 3986 without IP literals (iri and iri-reference take the same ASCII
//   subset), hostname is at most four labels of 62 characters whose last starts with a letter,
//   ipv6 is RFC 4291's text forms without a zone, duration is RFC 3339's (integer fields).
// - A $ref that reaches itself without an object or array between is refused (it would loop).
//   At most 20000 subschemas are compiled and 32 levels of $ref/allOf inlined.
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
Result<int> CompileJsonSchema(const nlohmann::ordered_json& schema,
                              const JsonSchemaOptions& options, GrammarBuilder* builder);
// Any JSON object (response_format json_object), any JSON value below it.
int AddJsonObjectRule(const JsonSchemaOptions& options, GrammarBuilder* builder);

}  // namespace kvserve::structured
