// GBNF → grammar: grammars as llama.cpp writes them, so users can bring theirs.
//
// Syntax: `name ::= alternatives` rules (names of letters, digits and '-'); string literals
// "..." and character classes [...] / [^...] with ranges, with the escapes \n \r \t \\ \" \]
// \[ \- \xHH \uHHHH \UHHHHHHHH; `.` (any code point, \n included); rule references, before or
// after their definition; grouping ( ... ); alternation | (empty alternatives included);
// postfix * + ? {m} {m,} {m,n} (blanks allowed inside the braces; operators may follow each
// other: "a"?* is "a"*); `#` comments to the end of the line. A rule may continue over several
// lines: a newline outside parentheses ends a rule only where the next non-blank line starts a
// new `name ::=` or the text ends (a superset of llama.cpp, which continues a rule only inside
// parentheses and after `|` or `::=`); a `|` ending a rule's last line adds an empty
// alternative.
// The start rule is `root`. Refused with InvalidArgument "gbnf: line:column: ..." (columns in
// code points): an undefined rule (at its first use), a missing `root`, a rule defined twice,
// bad escapes, unterminated literals, classes or parentheses, a class that matches nothing,
// {m,n} with m > n or over 100000, an operator with nothing to repeat, invalid UTF-8, token
// syntax such as <...>, and whatever GrammarBuilder::Build refuses (left recursion, including
// the repetition of a rule or group that can match the empty string, and a rule that never
// ends): CompileGbnf runs Build's checks itself, so those name the offending rule's position.
#pragma once

#include <string_view>

#include "kvserve/status.h"
#include "structured/grammar.h"

namespace kvserve::structured {

// Adds the grammar's rules and returns the id of `root`.
Result<int> CompileGbnf(std::string_view text, GrammarBuilder* builder);

}  // namespace kvserve::structured
