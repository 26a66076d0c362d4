// GBNF → grammar: grammars as llama.cpp writes them, so users can bring theirs.
//
// Syntax: `name ::= alternatives` rules (names of letters, digits and '-'); string literals
// "..." and character classes [...] / [^...] with ranges, with the escapes \n \r \t \\ \" \]
// \[ \- \xHH \uHHHH \UHHHHHHHH; `.` (any code point); rule references; grouping ( ... );
// alternation |; postfix * + ? {m} {m,} {m,n}; `#` comments to the end of the line. A rule may
// continue over several lines (llama.cpp's rule: a newline ends a rule unless it is inside
// parentheses, or the next line does not start a new `name ::=`).
// The start rule is `root`. Refused with InvalidArgument naming the line and column: an
// undefined rule, a missing `root`, bad escapes, unterminated literals or classes, and whatever
// GrammarBuilder::Build refuses (left recursion, a rule that never ends).
#pragma once

#include <string_view>

#include "kvserve/status.h"
#include "structured/grammar.h"

namespace kvserve::structured {

// Adds the grammar's rules and returns the id of `root`.
Result<int> CompileGbnf(std::string_view text, GrammarBuilder* builder);

}  // namespace kvserve::structured
