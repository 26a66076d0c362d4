#include "structured/regex.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace kvserve::structured {
namespace {

// Groups inside groups: the parser recurses per level, and under AddressSanitizer 1000 levels
// overflowed an 8 MiB stack; 256 leave room on a worker thread.
constexpr int kMaxNesting = 256;
constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

// ---- Phase 1: the pattern as a tree -------------------------------------------------------

struct Node {
  enum class Kind : uint8_t { kEmpty, kLiteral, kClass, kConcat, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  uint32_t codepoint = 0;               // kLiteral
  std::vector<CodepointRange> ranges;   // kClass
  bool negated = false;                 // kClass
  std::vector<Node> children;           // kConcat, kAlt; kRepeat: exactly one
  int64_t min = 0, max = 0;             // kRepeat; max < 0: unbounded

  static Node Literal(uint32_t cp) {
    Node n;
    n.kind = Kind::kLiteral;
    n.codepoint = cp;
    return n;
  }
  static Node Class(std::vector<CodepointRange> ranges, bool negated) {
    Node n;
    n.kind = Kind::kClass;
    n.ranges = std::move(ranges);
    n.negated = negated;
    return n;
  }
  // A concatenation or alternation; one child is the child itself, none is the empty string.
  static Node List(Kind kind, std::vector<Node> children) {
    if (children.size() == 1) return std::move(children[0]);
    Node n;
    n.kind = children.empty() ? Kind::kEmpty : kind;
    n.children = std::move(children);
    return n;
  }
  static Node Repeat(Node child, int64_t min, int64_t max) {
    Node n;
    n.kind = Kind::kRepeat;
    n.children.push_back(std::move(child));
    n.min = min;
    n.max = max;
    return n;
  }
};

// The ASCII class escapes (Python's re.ASCII meanings), sorted and disjoint.
std::vector<CodepointRange> ClassEscapeRanges(char c) {
  switch (c) {
    case 'd':
      return {{'0', '9'}};
    case 'w':
      return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    default:  // 's'
      return {{'\t', '\r'}, {' ', ' '}};
  }
}


// Whether a class matches no code point (surrogates are never matched).
bool ClassIsEmpty(std::vector<CodepointRange> ranges, bool negated) {
  return NormalizeCodepoints(std::move(ranges), negated).empty();
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsAsciiAlnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// One escape: a code point, or a class such as \d.
struct Escape {
  bool is_class = false;
  uint32_t codepoint = 0;
  std::vector<CodepointRange> ranges;  // is_class: already complemented for \D \W \S
};

// A quantifier: {min, max} (max < 0: unbounded).
struct Quantifier {
  int64_t min = 0, max = -1;
};

class Parser {
 public:
  explicit Parser(std::string_view pattern) : p_(pattern) {}

  Result<Node> Parse() {
    KV_ASSIGN_OR_RETURN(Node root, ParseAlternation(0));
    if (!AtEnd()) return Error(pos_, "unbalanced ')'");
    return root;
  }

 private:
  bool AtEnd() const { return pos_ >= p_.size(); }
  char Peek(size_t ahead = 0) const { return pos_ + ahead < p_.size() ? p_[pos_ + ahead] : '\0'; }
  bool LookingAt(std::string_view s) const { return p_.substr(pos_).starts_with(s); }

  // Errors name the offset in code points (for ASCII patterns, also the byte offset).
  Status Error(size_t byte_pos, std::string_view what) const {
    size_t chars = 0;
    for (size_t i = 0; i < byte_pos && i < p_.size(); ++i) {
      if ((static_cast<uint8_t>(p_[i]) & 0xC0) != 0x80) ++chars;
    }
    return InvalidArgument(fmt::format("regex: {} at offset {}", what, chars));
  }

  Result<Node> ParseAlternation(int depth);
  Result<Node> ParseBranch(int depth);
  // Handles ^ $ \A \Z \z at pos_; false when there is no anchor there.
  Result<bool> ParseAnchor(int depth, bool branch_empty);
  Result<Node> ParseAtom(int depth);
  Result<Node> ParseGroup(int depth);
  Status ParseGroupName();
  Result<Node> ParseClass();
  Result<Escape> ParseEscape(bool in_class);
  Result<uint32_t> ParseHex(size_t start, int min_digits, int max_digits);
  Result<uint32_t> ParseCodepoint();
  // A quantifier (with its lazy/possessive suffix) at pos_, consumed; nullopt (nothing
  // consumed) where there is none, e.g. a `{` that is a literal.
  Result<std::optional<Quantifier>> ParseQuantifier();

  std::string_view p_;
  size_t pos_ = 0;
  std::set<std::string, std::less<>> group_names_;
};

Result<Node> Parser::ParseAlternation(int depth) {
  std::vector<Node> branches;
  KV_ASSIGN_OR_RETURN(Node first, ParseBranch(depth));
  branches.push_back(std::move(first));
  while (Peek() == '|' && !AtEnd()) {
    ++pos_;
    KV_ASSIGN_OR_RETURN(Node next, ParseBranch(depth));
    branches.push_back(std::move(next));
  }
  return Node::List(Node::Kind::kAlt, std::move(branches));
}

Result<Node> Parser::ParseBranch(int depth) {
  std::vector<Node> items;
  bool can_repeat = false;  // whether the last item takes a quantifier
  bool anchored = false;    // a ^ was seen, so the branch is not "empty" for a quantifier
  while (!AtEnd() && Peek() != '|' && Peek() != ')') {
    const size_t start = pos_;
    if (LookingAt("(?#")) {  // a comment: skipped, as if it were not there
      const size_t close = p_.find(')', pos_);
      if (close == std::string_view::npos) return Error(start, "unterminated comment '(?#'");
      pos_ = close + 1;
      continue;
    }
    KV_ASSIGN_OR_RETURN(std::optional<Quantifier> q, ParseQuantifier());
    if (q) {
      if (!can_repeat) {
        return Error(start, items.empty() || anchored ? "nothing to repeat" : "multiple repeat");
      }
      items.back() = Node::Repeat(std::move(items.back()), q->min, q->max);
      can_repeat = false;
      continue;
    }
    KV_ASSIGN_OR_RETURN(bool anchor, ParseAnchor(depth, items.empty()));
    if (anchor) {
      can_repeat = false;
      anchored = true;
      continue;
    }
    anchored = false;
    KV_ASSIGN_OR_RETURN(Node atom, ParseAtom(depth));
    items.push_back(std::move(atom));
    can_repeat = true;
  }
  return Node::List(Node::Kind::kConcat, std::move(items));
}

Result<bool> Parser::ParseAnchor(int depth, bool branch_empty) {
  const size_t start = pos_;
  if (Peek() == '^' || LookingAt("\\A")) {
    if (depth != 0 || !branch_empty) {
      return Error(start, "'^' (or \\A) is only supported at the start of the pattern or of a "
                          "top-level alternative");
    }
    pos_ += Peek() == '^' ? 1 : 2;
    return true;
  }
  if (Peek() == '$' || LookingAt("\\Z") || LookingAt("\\z")) {
    pos_ += Peek() == '$' ? 1 : 2;
    if (depth != 0 || (!AtEnd() && Peek() != '|')) {
      return Error(start, "'$' (or \\Z) is only supported at the end of the pattern or of a "
                          "top-level alternative");
    }
    return true;
  }
  return false;
}

Result<Node> Parser::ParseAtom(int depth) {
  switch (Peek()) {
    case '(':
      return ParseGroup(depth + 1);
    case '[':
      return ParseClass();
    case '.':
      ++pos_;
      return Node::Class({{'\n', '\n'}}, /*negated=*/true);
    case '\\': {
      const size_t start = pos_;
      KV_ASSIGN_OR_RETURN(Escape e, ParseEscape(/*in_class=*/false));
      if (e.is_class) return Node::Class(std::move(e.ranges), false);
      if (e.codepoint >= kSurrogateLo && e.codepoint <= kSurrogateHi) {
        return Error(start, "a surrogate code point is not a character");
      }
      return Node::Literal(e.codepoint);
    }
    default: {
      KV_ASSIGN_OR_RETURN(uint32_t cp, ParseCodepoint());
      return Node::Literal(cp);
    }
  }
}

Result<Node> Parser::ParseGroup(int depth) {
  const size_t open = pos_;
  if (depth > kMaxNesting) return Error(open, "groups nested too deeply");
  ++pos_;  // '('
  if (Peek() == '?') {
    if (LookingAt("?:")) {
      pos_ += 2;
    } else if (LookingAt("?=") || LookingAt("?!") || LookingAt("?<=") || LookingAt("?<!")) {
      return Error(open, "look-around assertions are not supported");
    } else if (LookingAt("?P=")) {
      return Error(open, "back-references are not supported");
    } else if (LookingAt("?P<") || LookingAt("?<")) {
      pos_ += LookingAt("?P<") ? 3 : 2;
      KV_RETURN_IF_ERROR(ParseGroupName());
    } else {
      return Error(open, "unsupported group syntax '(?' (flags, conditionals and the like)");
    }
  }
  KV_ASSIGN_OR_RETURN(Node body, ParseAlternation(depth));
  if (Peek() != ')' || AtEnd()) return Error(open, "missing ')' for the '(' opened");
  ++pos_;
  return body;
}

Status Parser::ParseGroupName() {
  const size_t start = pos_;
  auto word = [](char c) { return IsAsciiAlnum(c) || c == '_'; };
  while (!AtEnd() && word(Peek())) ++pos_;
  const std::string_view name = p_.substr(start, pos_ - start);
  if (name.empty() || (name[0] >= '0' && name[0] <= '9') || Peek() != '>') {
    return Error(start, "bad group name (expected letters, digits or '_' and then '>')");
  }
  if (!group_names_.emplace(name).second) {
    return Error(start, fmt::format("group name '{}' defined twice", name));
  }
  ++pos_;  // '>'
  return Status::Ok();
}

Result<Node> Parser::ParseClass() {
  const size_t open = pos_;
  ++pos_;  // '['
  const bool negated = Peek() == '^' && !AtEnd();
  if (negated) ++pos_;
  std::vector<CodepointRange> ranges;
  // Reads one member: a code point, or a class escape's ranges.
  auto member = [&]() -> Result<Escape> {
    if (Peek() == '\\') return ParseEscape(/*in_class=*/true);
    KV_ASSIGN_OR_RETURN(uint32_t cp, ParseCodepoint());
    Escape e;
    e.codepoint = cp;
    return e;
  };
  for (bool first = true;; first = false) {
    if (AtEnd()) return Error(open, "unterminated character class '['");
    if (Peek() == ']' && !first) {  // a ']' first is a literal, as in Python
      ++pos_;
      break;
    }
    const size_t item = pos_;
    KV_ASSIGN_OR_RETURN(Escape lo, member());
    const bool range = Peek() == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']';
    if (!range) {
      if (lo.is_class) {
        ranges.insert(ranges.end(), lo.ranges.begin(), lo.ranges.end());
      } else {
        ranges.push_back({lo.codepoint, lo.codepoint});
      }
      continue;
    }
    ++pos_;  // '-'
    KV_ASSIGN_OR_RETURN(Escape hi, member());
    if (lo.is_class || hi.is_class) return Error(item, "bad character range (a class escape)");
    if (lo.codepoint > hi.codepoint) {
      return Error(item, "bad character range (the start is after the end)");
    }
    ranges.push_back({lo.codepoint, hi.codepoint});
  }
  if (ClassIsEmpty(ranges, negated)) return Error(open, "the character class matches nothing");
  return Node::Class(std::move(ranges), negated);
}

Result<Escape> Parser::ParseEscape(bool in_class) {
  const size_t start = pos_;
  ++pos_;  // '\\'
  if (AtEnd()) return Error(start, "trailing backslash");
  const char c = Peek();
  Escape e;
  auto code = [&](uint32_t cp) -> Result<Escape> {
    ++pos_;
    e.codepoint = cp;
    return e;
  };
  switch (c) {
    case 'n': return code('\n');
    case 't': return code('\t');
    case 'r': return code('\r');
    case 'f': return code('\f');
    case 'v': return code('\v');
    case 'a': return code('\a');
    case 'b':
      if (in_class) return code('\b');
      return Error(start, "word boundaries (\\b) are not supported");
    case 'B':
      return Error(start, "word boundaries (\\B) are not supported");
    case 'd': case 'w': case 's': case 'D': case 'W': case 'S': {
      ++pos_;
      const bool negated = c == 'D' || c == 'W' || c == 'S';
      e.is_class = true;
      e.ranges = ClassEscapeRanges(static_cast<char>(c | 0x20));
      if (negated) e.ranges = NormalizeCodepoints(std::move(e.ranges), true);
      return e;
    }
    case '0': {  // \0 and up to two more octal digits (Python)
      ++pos_;
      uint32_t v = 0;
      for (int i = 0; i < 2 && Peek() >= '0' && Peek() <= '7' && !AtEnd(); ++i) {
        v = v * 8 + static_cast<uint32_t>(Peek() - '0');
        ++pos_;
      }
      e.codepoint = v;
      return e;
    }
    case 'x': case 'u': case 'U': {
      ++pos_;
      uint32_t cp = 0;
      if (c == 'u' && Peek() == '{' && !AtEnd()) {  // \u{H...}
        ++pos_;
        KV_ASSIGN_OR_RETURN(cp, ParseHex(start, 1, 6));
        if (Peek() != '}' || AtEnd()) return Error(start, "bad \\u{...} escape (missing '}')");
        ++pos_;
      } else {
        const int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        KV_ASSIGN_OR_RETURN(cp, ParseHex(start, digits, digits));
      }
      e.codepoint = cp;
      return e;
    }
    default:
      break;
  }
  if (c >= '1' && c <= '9') return Error(start, "back-references are not supported");
  if (c == 'k') return Error(start, "back-references (\\k<name>) are not supported");
  if (c == 'p' || c == 'P') return Error(start, "Unicode property escapes are not supported");
  if (IsAsciiAlnum(c)) return Error(start, fmt::format("bad escape \\{}", c));
  // Any other character, metacharacter or not, stands for itself.
  KV_ASSIGN_OR_RETURN(e.codepoint, ParseCodepoint());
  return e;
}

Result<uint32_t> Parser::ParseHex(size_t start, int min_digits, int max_digits) {
  uint32_t v = 0;
  int n = 0;
  while (n < max_digits && !AtEnd() && HexValue(Peek()) >= 0) {
    v = v * 16 + static_cast<uint32_t>(HexValue(Peek()));
    ++pos_;
    ++n;
  }
  if (n < min_digits) {
    return Error(start, fmt::format("bad escape (expected {} hex digits)", min_digits));
  }
  if (v > kMaxCodepoint) return Error(start, "escape beyond U+10FFFF");
  return v;
}

Result<uint32_t> Parser::ParseCodepoint() {
  const size_t start = pos_;
  const auto b0 = static_cast<uint8_t>(p_[pos_]);
  const int len = b0 < 0x80 ? 1 : (b0 & 0xE0) == 0xC0 ? 2 : (b0 & 0xF0) == 0xE0 ? 3
                  : (b0 & 0xF8) == 0xF0 ? 4 : 0;
  if (len == 0 || pos_ + static_cast<size_t>(len) > p_.size()) {
    return Error(start, "invalid UTF-8 in the pattern");
  }
  uint32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
  for (int i = 1; i < len; ++i) {
    const auto b = static_cast<uint8_t>(p_[pos_ + static_cast<size_t>(i)]);
    if ((b & 0xC0) != 0x80) return Error(start, "invalid UTF-8 in the pattern");
    cp = (cp << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLength[len] || cp > kMaxCodepoint || (cp >= kSurrogateLo && cp <= kSurrogateHi)) {
    return Error(start, "invalid UTF-8 in the pattern");
  }
  pos_ += static_cast<size_t>(len);
  return cp;
}

Result<std::optional<Quantifier>> Parser::ParseQuantifier() {
  const size_t start = pos_;
  Quantifier q;
  const char c = Peek();
  if (AtEnd()) return std::optional<Quantifier>();
  if (c == '*' || c == '+' || c == '?') {
    q.min = c == '+' ? 1 : 0;
    q.max = c == '?' ? 1 : -1;
    ++pos_;
  } else if (c == '{') {
    // {n} {n,} {,m} {n,m} {,}; anything else (`{`, `{}`, `{x}`) is a literal `{`, as in Python.
    size_t i = pos_ + 1;
    auto number = [&](int64_t* out) {
      const size_t from = i;
      int64_t v = 0;
      while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') {
        v = std::min<int64_t>(v * 10 + (p_[i] - '0'), kMaxRepeat + 1);
        ++i;
      }
      if (i > from) *out = v;
      return i > from;
    };
    const bool has_min = number(&q.min);
    bool has_max = false;
    if (i < p_.size() && p_[i] == ',') {
      ++i;
      has_max = number(&q.max);
    } else if (has_min) {
      q.max = q.min;
      has_max = true;
    }
    if (i >= p_.size() || p_[i] != '}' || i == pos_ + 1) return std::optional<Quantifier>();
    pos_ = i + 1;
    if (q.min > kMaxRepeat || (has_max && q.max > kMaxRepeat)) {
      return Error(start, fmt::format("repetition count over {}", kMaxRepeat));
    }
    if (has_max && q.max < q.min) return Error(start, "min repeat greater than max repeat");
  } else {
    return std::optional<Quantifier>();
  }
  if (!AtEnd() && (Peek() == '?' || Peek() == '+')) ++pos_;  // lazy or possessive: greedy here
  return std::optional<Quantifier>(q);
}

// ---- Phase 2: nullable sub-patterns --------------------------------------------------------
// (x)* with a nullable x would be left-recursive as a grammar rule, so a repetition of a
// nullable x repeats x minus the empty string instead: the same language.

bool Nullable(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kEmpty:
      return true;
    case Node::Kind::kLiteral:
    case Node::Kind::kClass:
      return false;
    case Node::Kind::kConcat:
      return std::all_of(n.children.begin(), n.children.end(), Nullable);
    case Node::Kind::kAlt:
      return std::any_of(n.children.begin(), n.children.end(), Nullable);
    case Node::Kind::kRepeat:
      return n.min == 0 || Nullable(n.children[0]);
  }
  return false;
}

// The node's language minus the empty string; nullopt when that leaves nothing.
std::optional<Node> NonEmpty(const Node& n) {
  if (!Nullable(n)) return n;
  switch (n.kind) {
    case Node::Kind::kAlt: {
      std::vector<Node> alts;
      for (const Node& c : n.children) {
        if (auto ne = NonEmpty(c)) alts.push_back(std::move(*ne));
      }
      if (alts.empty()) return std::nullopt;
      return Node::List(Node::Kind::kAlt, std::move(alts));
    }
    case Node::Kind::kConcat: {
      // Every child is nullable: the first non-empty child is child i, the rest follow as is.
      std::vector<Node> alts;
      for (size_t i = 0; i < n.children.size(); ++i) {
        auto ne = NonEmpty(n.children[i]);
        if (!ne) continue;
        std::vector<Node> seq{std::move(*ne)};
        seq.insert(seq.end(), n.children.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                   n.children.end());
        alts.push_back(Node::List(Node::Kind::kConcat, std::move(seq)));
      }
      if (alts.empty()) return std::nullopt;
      return Node::List(Node::Kind::kAlt, std::move(alts));
    }
    case Node::Kind::kRepeat: {
      // x{min,max} with x nullable or min == 0: x'{1,max} (empty copies make up the minimum).
      if (n.max == 0) return std::nullopt;
      auto ne = NonEmpty(n.children[0]);
      if (!ne) return std::nullopt;
      return Node::Repeat(std::move(*ne), 1, n.max);
    }
    default:
      return std::nullopt;  // kEmpty
  }
}

// ---- Phase 3: the tree as grammar rules ----------------------------------------------------

class Compiler {
 public:
  explicit Compiler(GrammarBuilder* builder) : b_(builder) {}

  void Compile(const Node& n, Sequence* out) {
    switch (n.kind) {
      case Node::Kind::kEmpty:
        return;
      case Node::Kind::kLiteral: {
        std::string bytes;
        AppendUtf8(n.codepoint, &bytes);
        b_->AppendLiteral(bytes, out);
        return;
      }
      case Node::Kind::kClass:
        out->push_back(GrammarBuilder::Ref(b_->CodepointClass(n.ranges, n.negated)));
        return;
      case Node::Kind::kConcat:
        for (const Node& c : n.children) Compile(c, out);
        return;
      case Node::Kind::kAlt: {
        std::vector<Sequence> alts(n.children.size());
        for (size_t i = 0; i < n.children.size(); ++i) Compile(n.children[i], &alts[i]);
        out->push_back(GrammarBuilder::Ref(b_->Alternatives("regex-alt", std::move(alts))));
        return;
      }
      case Node::Kind::kRepeat:
        CompileRepeat(n, out);
        return;
    }
  }

 private:
  void CompileRepeat(const Node& n, Sequence* out) {
    int64_t min = n.min;
    const int64_t max = n.max;
    std::optional<Node> body = n.children[0];
    if (Nullable(*body)) {
      body = NonEmpty(*body);
      min = 0;
    }
    if (!body || max == 0) return;  // only the empty string
    Sequence seq;
    Compile(*body, &seq);
    if (min == 1 && max == 1) {
      out->insert(out->end(), seq.begin(), seq.end());
      return;
    }
    int rule;
    if (min == 0 && max == 1) {
      rule = b_->Optional("regex?", std::move(seq));
    } else if (min == 0 && max < 0) {
      rule = b_->Star("regex*", std::move(seq));
    } else if (min == 1 && max < 0) {
      rule = b_->Plus("regex+", std::move(seq));
    } else {
      // Repeat copies its sequence; one reference per copy keeps it O(max) symbols.
      if (seq.size() > 1) seq = {GrammarBuilder::Ref(b_->Alternatives("regex-item", {seq}))};
      const std::string name = max < 0 ? fmt::format("regex{{{},}}", min)
                                       : fmt::format("regex{{{},{}}}", min, max);
      rule = b_->Repeat(name, seq, min, max);
    }
    out->push_back(GrammarBuilder::Ref(rule));
  }

  GrammarBuilder* b_;
};

// ---- Phase 4: the pattern minus a finite set of strings -----------------------------------
// NOTE: L(P) minus a finite set N is regular; it is built with Brzozowski derivatives along a
// trie of N. At trie node t (the prefix w) with residual R = D_w(P) (the rest of the strings
// of P after w): the string may end where R is nullable and t ends no name; it may go on with a
// child's code point c into the child with D_c(R); and with any other code point it leaves the
// trie, after which nothing is excluded: those code points are split into classes on which
// R's first-position atoms agree (so D is the same for the whole class), each class followed
// by its derivative compiled as an ordinary pattern. Derivatives are built on the tree with
// alternatives flattened and de-duplicated, and their total size is bounded (kMaxExceptWork).

// Nodes in the tree (the derivative work's unit).
int64_t NodeSize(const Node& n) {
  int64_t size = 1;
  for (const Node& c : n.children) size += NodeSize(c);
  return size;
}

// A canonical spelling of the tree, for de-duplicating alternatives.
void AppendKey(const Node& n, std::string* out) {
  *out += fmt::format("{}", static_cast<int>(n.kind));
  switch (n.kind) {
    case Node::Kind::kLiteral:
      *out += fmt::format(":{}", n.codepoint);
      break;
    case Node::Kind::kClass:
      *out += n.negated ? "^" : "";
      for (const CodepointRange& r : n.ranges) *out += fmt::format("{}-{},", r.lo, r.hi);
      break;
    case Node::Kind::kRepeat:
      *out += fmt::format("{{{},{}}}", n.min, n.max);
      break;
    default:
      break;
  }
  *out += '(';
  for (const Node& c : n.children) AppendKey(c, out);
  *out += ')';
}

// The code points an atom (kLiteral or kClass) matches: sorted, merged, no surrogates.
std::vector<CodepointRange> AtomRanges(const Node& n) {
  if (n.kind == Node::Kind::kLiteral) return {{n.codepoint, n.codepoint}};
  return NormalizeCodepoints(n.ranges, n.negated);
}

bool AtomMatches(const Node& n, uint32_t cp) {
  if (n.kind == Node::Kind::kLiteral) return n.codepoint == cp;
  if (cp >= kSurrogateLo && cp <= kSurrogateHi) return false;
  const bool in = std::any_of(n.ranges.begin(), n.ranges.end(),
                              [&](const CodepointRange& r) { return r.lo <= cp && cp <= r.hi; });
  return in != n.negated;
}

// A concatenation of `items`, nested concatenations spliced in and empty strings left out.
Node MakeConcat(std::vector<Node> items) {
  std::vector<Node> flat;
  for (Node& item : items) {
    if (item.kind == Node::Kind::kEmpty) continue;
    if (item.kind == Node::Kind::kConcat) {
      for (Node& c : item.children) flat.push_back(std::move(c));
    } else {
      flat.push_back(std::move(item));
    }
  }
  return Node::List(Node::Kind::kConcat, std::move(flat));
}

// The union of `alts` (nested unions spliced in, duplicates dropped); nullopt when none.
std::optional<Node> MakeAlt(std::vector<Node> alts) {
  std::vector<Node> flat;
  std::set<std::string> seen;
  auto add = [&](Node n) {
    std::string key;
    AppendKey(n, &key);
    if (seen.insert(std::move(key)).second) flat.push_back(std::move(n));
  };
  for (Node& a : alts) {
    if (a.kind == Node::Kind::kAlt) {
      for (Node& c : a.children) add(std::move(c));
    } else {
      add(std::move(a));
    }
  }
  if (flat.empty()) return std::nullopt;
  return Node::List(Node::Kind::kAlt, std::move(flat));
}

// D_c(n): the strings s with c s in n's language; nullopt when there are none. Every node in a
// result matches something, so nullopt is the only empty language.
std::optional<Node> Derive(const Node& n, uint32_t c) {
  switch (n.kind) {
    case Node::Kind::kEmpty:
      return std::nullopt;
    case Node::Kind::kLiteral:
    case Node::Kind::kClass:
      if (!AtomMatches(n, c)) return std::nullopt;
      return Node();
    case Node::Kind::kConcat: {
      // D(x1 x2..xn) = D(x1) x2..xn, and D(x2..xn) too where x1 is nullable.
      std::vector<Node> alts;
      for (size_t i = 0; i < n.children.size(); ++i) {
        if (std::optional<Node> d = Derive(n.children[i], c)) {
          std::vector<Node> seq{std::move(*d)};
          seq.insert(seq.end(), n.children.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                     n.children.end());
          alts.push_back(MakeConcat(std::move(seq)));
        }
        if (!Nullable(n.children[i])) break;
      }
      return MakeAlt(std::move(alts));
    }
    case Node::Kind::kAlt: {
      std::vector<Node> alts;
      for (const Node& child : n.children) {
        if (std::optional<Node> d = Derive(child, c)) alts.push_back(std::move(*d));
      }
      return MakeAlt(std::move(alts));
    }
    case Node::Kind::kRepeat: {
      // x{min,max} with x nullable is (x minus "") {0,max}; otherwise the first code point
      // starts the first copy: D(x{min,max}) = D(x) x{min-1,max-1}.
      std::optional<Node> body = n.children[0];
      int64_t min = n.min;
      if (Nullable(*body)) {
        body = NonEmpty(*body);
        min = 0;
      }
      if (!body || n.max == 0) return std::nullopt;
      std::optional<Node> d = Derive(*body, c);
      if (!d) return std::nullopt;
      std::vector<Node> seq{std::move(*d)};
      const int64_t max = n.max < 0 ? -1 : n.max - 1;
      if (max != 0) {
        seq.push_back(Node::Repeat(std::move(*body), std::max<int64_t>(min - 1, 0), max));
      }
      return MakeConcat(std::move(seq));
    }
  }
  return std::nullopt;
}

// The atoms that can match a string's first code point.
void FirstAtoms(const Node& n, std::vector<const Node*>* out) {
  switch (n.kind) {
    case Node::Kind::kLiteral:
    case Node::Kind::kClass:
      out->push_back(&n);
      return;
    case Node::Kind::kConcat:
      for (const Node& c : n.children) {
        FirstAtoms(c, out);
        if (!Nullable(c)) return;
      }
      return;
    case Node::Kind::kAlt:
      for (const Node& c : n.children) FirstAtoms(c, out);
      return;
    case Node::Kind::kRepeat:
      if (n.max != 0) FirstAtoms(n.children[0], out);
      return;
    default:
      return;
  }
}

class ExceptCompiler {
 public:
  struct TrieNode {
    std::map<uint32_t, int> next;
    bool terminal = false;  // a name ends here
  };

  ExceptCompiler(std::vector<TrieNode> trie, GrammarBuilder* builder)
      : trie_(std::move(trie)), b_(builder) {}

  bool over_budget() const { return work_ > kMaxExceptWork; }

  // The rule for the strings w s (w: trie node t's prefix, s in r's language) that are not
  // names; -1 when there are none.
  int Build(size_t t, const Node& r) {
    if (over_budget()) return -1;
    std::vector<Sequence> alts;
    if (!trie_[t].terminal && Nullable(r)) alts.push_back({});
    for (const auto& [cp, child] : trie_[t].next) {
      std::optional<Node> d = Derive(r, cp);
      if (!d) continue;
      work_ += NodeSize(*d);
      const int rest = Build(static_cast<size_t>(child), *d);
      if (rest < 0) continue;
      Sequence seq;
      std::string utf8;
      AppendUtf8(cp, &utf8);
      b_->AppendLiteral(utf8, &seq);
      seq.push_back(GrammarBuilder::Ref(rest));
      alts.push_back(std::move(seq));
    }
    LeaveTrie(t, r, &alts);
    if (alts.empty() || over_budget()) return -1;
    return b_->Alternatives("regex-except", std::move(alts));
  }

 private:
  // Alternatives for the code points that are no child of t: one per class of code points on
  // which r's first atoms agree, followed by the class's derivative.
  void LeaveTrie(size_t t, const Node& r, std::vector<Sequence>* alts) {
    std::vector<const Node*> atoms;
    FirstAtoms(r, &atoms);
    std::vector<std::vector<CodepointRange>> atom_ranges;
    std::set<uint32_t> cuts;  // starts of elementary intervals
    for (const Node* a : atoms) {
      atom_ranges.push_back(AtomRanges(*a));
      for (const CodepointRange& x : atom_ranges.back()) cuts.insert({x.lo, x.hi + 1});
    }
    for (const auto& [cp, child] : trie_[t].next) cuts.insert({cp, cp + 1});
    // Each elementary interval [lo, next cut) lies wholly inside or outside every atom.
    std::map<std::vector<bool>, std::vector<CodepointRange>> classes;
    for (auto it = cuts.begin(); it != cuts.end() && *it <= kMaxCodepoint; ++it) {
      const uint32_t lo = *it;
      const uint32_t hi = std::next(it) == cuts.end() ? kMaxCodepoint : *std::next(it) - 1;
      if (trie_[t].next.count(lo) != 0) continue;
      std::vector<bool> in(atoms.size());
      bool any = false;
      for (size_t i = 0; i < atoms.size(); ++i) {
        in[i] = std::any_of(atom_ranges[i].begin(), atom_ranges[i].end(),
                            [&](const CodepointRange& x) { return x.lo <= lo && lo <= x.hi; });
        any = any || in[i];
      }
      if (any) classes[std::move(in)].push_back({lo, hi});
    }
    for (auto& [in, ranges] : classes) {
      std::optional<Node> d = Derive(r, ranges[0].lo);
      if (!d) continue;  // unreachable: some first atom matches the class
      work_ += NodeSize(*d);
      if (over_budget()) return;
      Sequence seq = {GrammarBuilder::Ref(b_->CodepointClass(ranges, false))};
      Compiler(b_).Compile(*d, &seq);
      alts->push_back(std::move(seq));
    }
  }

  std::vector<TrieNode> trie_;
  GrammarBuilder* b_;
  int64_t work_ = 0;
};

}  // namespace

Result<int> CompileRegex(std::string_view pattern, GrammarBuilder* builder) {
  KV_ASSIGN_OR_RETURN(Node root, Parser(pattern).Parse());
  Sequence seq;
  Compiler(builder).Compile(root, &seq);
  return builder->Alternatives("regex", {std::move(seq)});
}

}  // namespace kvserve::structured

namespace kvserve::structured {

Result<int> CompileRegexExcept(std::string_view pattern, std::span<const std::string> excluded,
                               GrammarBuilder* builder) {
  if (excluded.empty()) return CompileRegex(pattern, builder);
  KV_ASSIGN_OR_RETURN(Node root, Parser(pattern).Parse());
  // Only the pattern's own strings need excluding; the others would only grow the trie.
  std::vector<std::vector<char32_t>> names;
  int64_t work = 0;
  for (const std::string& name : excluded) {
    std::vector<char32_t> cps = DecodeUtf8(name);
    std::optional<Node> rest = root;
    for (size_t i = 0; i < cps.size() && rest; ++i) {
      rest = Derive(*rest, cps[i]);
      if (rest) work += NodeSize(*rest);
      if (work > kMaxExceptWork) {
        return ResourceExhausted(
            fmt::format("regex: excluding strings takes over {} units of work", kMaxExceptWork));
      }
    }
    if (rest && Nullable(*rest)) names.push_back(std::move(cps));
  }
  if (names.empty()) return CompileRegex(pattern, builder);
  std::vector<ExceptCompiler::TrieNode> trie(1);
  int64_t num_codepoints = 0;
  for (const std::vector<char32_t>& name : names) {
    size_t at = 0;
    for (uint32_t cp : name) {
      if (++num_codepoints > kMaxExceptCodepoints) {
        return ResourceExhausted(fmt::format("regex: the excluded strings are over {} code points",
                                             kMaxExceptCodepoints));
      }
      auto [it, added] = trie[at].next.emplace(cp, static_cast<int>(trie.size()));
      const auto next = static_cast<size_t>(it->second);
      if (added) trie.emplace_back();
      at = next;
    }
    trie[at].terminal = true;
  }
  ExceptCompiler compiler(std::move(trie), builder);
  const int rule = compiler.Build(0, root);
  if (compiler.over_budget()) {
    return ResourceExhausted(
        fmt::format("regex: excluding strings takes over {} units of work", kMaxExceptWork));
  }
  if (rule < 0) return NotFound("regex: every string of the pattern is excluded");
  return builder->Alternatives("regex", {{GrammarBuilder::Ref(rule)}});
}

}  // namespace kvserve::structured
