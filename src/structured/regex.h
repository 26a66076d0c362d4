// Regex → grammar rule: the regular expressions people write for structured output (Python `re`
// / JavaScript syntax without back-references or look-around), matched against the whole output.
//
// Supported: literals and escapes (\n \t \r \f \v \0 \xHH \uHHHH \u{H...} and escaped
// metacharacters), classes [...] with ranges, negation and the class escapes \d \w \s \D \W \S
// (ASCII meanings, as Python's re.ASCII), `.` (any code point but \n), groups (...), (?:...),
// (?P<name>...) and (?<name>...), alternation |, quantifiers * + ? {n} {n,} {n,m} (lazy and
// possessive suffixes accepted and treated as greedy: a grammar has no match preference),
// and ^ at the start and $ at the end (the match is always whole).
// Refused with InvalidArgument naming the position: back-references, look-around, other (?...)
// flags, unbalanced brackets or parentheses, a quantifier with nothing to repeat, {n,m} with
// n > m or over kMaxRepeat.
#pragma once

#include <string_view>

#include "kvserve/status.h"
#include "structured/grammar.h"

namespace kvserve::structured {

inline constexpr int64_t kMaxRepeat = 100000;

// Adds rules matching exactly the strings of `pattern` (as UTF-8 bytes) and returns the rule.
Result<int> CompileRegex(std::string_view pattern, GrammarBuilder* builder);

}  // namespace kvserve::structured
