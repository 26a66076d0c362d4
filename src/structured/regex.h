// Regex → grammar rule: the regular expressions people write for structured output (Python `re`
// / JavaScript syntax without back-references or look-around), matched against the whole output.
//
// Supported: literals (UTF-8 code points) and escapes (\n \t \r \f \v \a \0 (plus up to two
// octal digits) \xHH \uHHHH \u{H...} \UHHHHHHHH and any escaped non-alphanumeric character),
// classes [...] with ranges, negation and the class escapes \d \w \s \D \W \S (ASCII meanings,
// as Python's re.ASCII; \b in a class is a backspace; a ']' first and a '-' first or last are
// literals), `.` (any code point but \n), groups (...), (?:...), (?P<name>...) and
// (?<name>...), comments (?#...), alternation | (empty alternatives included), quantifiers
// * + ? {n} {n,} {,m} {n,m} {,} (lazy and possessive suffixes accepted and treated as greedy: a
// grammar has no match preference), and ^ / \A at the start and $ / \Z / \z at the end of the
// pattern or of a top-level alternative (the match is always whole). A `{` that does not start a
// valid quantifier is a literal, as in Python ("a{", "{x}", "a{}").
// Refused with InvalidArgument naming the offset (in code points): back-references,
// look-around, other (?...) flags, word boundaries, \p{...}, unknown letter escapes, anchors
// elsewhere, unbalanced brackets or parentheses, a quantifier with nothing to repeat or a second
// quantifier, {n,m} with n > m or over kMaxRepeat, a class that matches nothing, surrogate
// escapes, invalid UTF-8, and groups nested over 256 deep.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "kvserve/status.h"
#include "structured/grammar.h"

namespace kvserve::structured {

inline constexpr int64_t kMaxRepeat = 100000;

// Adds rules matching exactly the strings of `pattern` (as UTF-8 bytes) and returns the rule.
Result<int> CompileRegex(std::string_view pattern, GrammarBuilder* builder);

// Work bounds of CompileRegexExcept: code points in the excluded strings together, and pattern
// nodes summed over the derivatives it takes (about trie nodes x pattern size).
inline constexpr int64_t kMaxExceptCodepoints = 1024;
inline constexpr int64_t kMaxExceptWork = 200000;

// Adds rules matching exactly the strings of `pattern` other than those in `excluded` (UTF-8)
// and returns the rule. NotFound when every string of the pattern is excluded;
// ResourceExhausted past kMaxExceptCodepoints / kMaxExceptWork (the caller picks a fallback);
// InvalidArgument for a pattern CompileRegex refuses.
Result<int> CompileRegexExcept(std::string_view pattern, std::span<const std::string> excluded,
                               GrammarBuilder* builder);

}  // namespace kvserve::structured
