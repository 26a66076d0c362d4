#include "structured/gbnf.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace kvserve::structured {
namespace {

constexpr int64_t kMaxGbnfRepeat = 100000;
// Parentheses inside parentheses: the parser recurses per level, and under AddressSanitizer 1000
// levels overflowed an 8 MiB stack; 256 leave room on a worker thread.
constexpr int kMaxNesting = 256;
constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;
constexpr size_t kNoPos = std::string_view::npos;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

bool IsWordChar(char c) {
  return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-';
}

// The length of the valid UTF-8 sequence at text[pos], or 0 where it is invalid.
int Utf8SequenceLength(std::string_view text, size_t pos) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  const int len = b0 < 0x80 ? 1 : (b0 & 0xE0) == 0xC0 ? 2 : (b0 & 0xF0) == 0xE0 ? 3
                  : (b0 & 0xF8) == 0xF0 ? 4 : 0;
  if (len == 0 || pos + static_cast<size_t>(len) > text.size()) return 0;
  uint32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
  for (int i = 1; i < len; ++i) {
    const auto b = static_cast<uint8_t>(text[pos + static_cast<size_t>(i)]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLength[len] || cp > kMaxCodepoint) return 0;
  if (cp >= kSurrogateLo && cp <= kSurrogateHi) return 0;
  return len;
}

// The code point at text[*pos] (valid UTF-8, checked up front), advancing *pos past it.
uint32_t DecodeAt(std::string_view text, size_t* pos) {
  const int len = Utf8SequenceLength(text, *pos);
  const auto b0 = static_cast<uint8_t>(text[*pos]);
  uint32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
  for (int i = 1; i < len; ++i) {
    cp = (cp << 6) | (static_cast<uint8_t>(text[*pos + static_cast<size_t>(i)]) & 0x3F);
  }
  *pos += static_cast<size_t>(std::max(len, 1));
  return cp;
}

// A name as it is used and defined.
struct RuleInfo {
  int id = -1;
  size_t first_ref = kNoPos;   // where it is first referred to
  size_t defined_at = kNoPos;  // where its definition starts
};

// One element with its postfix operators applied so far.
struct Item {
  Sequence seq;
  // Where the last operator made the element optional (x? x* x{0,k}): x itself, so that an
  // unbounded operator after it repeats x rather than a nullable sequence (which would be
  // left-recursive): (x?)* is x*.
  std::optional<Sequence> optional_of;
};

class GbnfCompiler {
 public:
  GbnfCompiler(std::string_view text, GrammarBuilder* builder) : text_(text), b_(builder) {}

  Result<int> Compile();

 private:
  // ---- Source positions and tokens.
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  bool AtNewline() const { return !AtEnd() && (Peek() == '\n' || Peek() == '\r'); }
  std::string Where(size_t pos) const;  // "line:column", both from 1, columns in code points
  Status Error(size_t pos, std::string_view what) const {
    return InvalidArgument(fmt::format("gbnf: {}: {}", Where(pos), what));
  }
  // Skips blanks and comments, and line breaks too where newline_ok.
  void SkipSpace(bool newline_ok);
  // Skips space inside a rule: at its top level a line break ends the rule when the next
  // non-blank line starts another rule (or the text ends); otherwise the rule goes on.
  void SkipSpaceInRule(bool nested);
  bool RuleStartsAt(size_t pos) const;
  std::string_view ParseName();
  int RuleFor(std::string_view name, size_t ref_pos);
  std::string GeneratedName(size_t pos) const {
    return fmt::format("{}@{}", current_rule_, Where(pos));
  }

  // ---- Rules, alternatives, sequences, elements.
  Status ParseRule();
  Status ParseAlternates(int rule, bool nested, int depth);
  Result<Sequence> ParseSequence(bool nested, int depth);
  Result<Item> ParseElement(bool nested, int depth);
  Result<Sequence> ParseGroup(int depth);
  Status ParsePostfix(bool nested, Item* item);
  Status ApplyRepeat(size_t op_pos, int64_t min, int64_t max, Item* item);
  Result<Sequence> ParseLiteral();
  Result<Sequence> ParseClass();
  Result<uint32_t> ParseClassChar();
  Result<uint32_t> ParseEscape();

  // ---- The end: every name defined, a root, and what Build() would refuse.
  Result<int> Finish();
  Status Validate(int root) const;

  std::string_view text_;
  GrammarBuilder* b_;
  size_t pos_ = 0;
  std::string current_rule_;
  std::map<std::string, RuleInfo, std::less<>> rules_;
  struct SourcePoint {
    size_t pos = 0;
    int line = 1, column = 1;
  };
  mutable SourcePoint where_;  // Where()'s last answer
};

// ---- Source positions and tokens ------------------------------------------------------------

std::string GbnfCompiler::Where(size_t pos) const {
  // Positions asked for mostly increase, so counting resumes from the last one.
  pos = std::min(pos, text_.size());
  if (pos < where_.pos) where_ = SourcePoint{};
  for (size_t i = where_.pos; i < pos; ++i) {
    if (text_[i] == '\n') {
      ++where_.line;
      where_.column = 1;
    } else if ((static_cast<uint8_t>(text_[i]) & 0xC0) != 0x80) {
      ++where_.column;
    }
  }
  where_.pos = pos;
  return fmt::format("{}:{}", where_.line, where_.column);
}

void GbnfCompiler::SkipSpace(bool newline_ok) {
  while (!AtEnd()) {
    const char c = Peek();
    if (c == ' ' || c == '\t' || (newline_ok && (c == '\n' || c == '\r'))) {
      ++pos_;
    } else if (c == '#') {
      while (!AtNewline() && !AtEnd()) ++pos_;
    } else {
      return;
    }
  }
}

void GbnfCompiler::SkipSpaceInRule(bool nested) {
  SkipSpace(nested);
  if (nested || !AtNewline()) return;
  const size_t newline = pos_;
  SkipSpace(true);
  if (AtEnd() || RuleStartsAt(pos_)) pos_ = newline;  // the line break ends the rule
}

bool GbnfCompiler::RuleStartsAt(size_t pos) const {
  size_t i = pos;
  while (i < text_.size() && IsWordChar(text_[i])) ++i;
  if (i == pos) return false;
  while (i < text_.size() && (text_[i] == ' ' || text_[i] == '\t')) ++i;
  return text_.substr(i).starts_with("::=");
}

std::string_view GbnfCompiler::ParseName() {
  const size_t start = pos_;
  while (!AtEnd() && IsWordChar(Peek())) ++pos_;
  return text_.substr(start, pos_ - start);
}

int GbnfCompiler::RuleFor(std::string_view name, size_t ref_pos) {
  auto it = rules_.find(name);
  if (it == rules_.end()) {
    it = rules_.emplace(std::string(name), RuleInfo{}).first;
    it->second.id = b_->AddRule(std::string(name));
  }
  if (ref_pos != kNoPos && it->second.first_ref == kNoPos) it->second.first_ref = ref_pos;
  return it->second.id;
}

// ---- Rules, alternatives, sequences ---------------------------------------------------------

Status GbnfCompiler::ParseRule() {
  const size_t start = pos_;
  const std::string_view name = ParseName();
  if (name.empty()) {
    return Error(start, fmt::format("expected a rule name (letters, digits and '-'), not '{}'",
                                    text_.substr(start, 1)));
  }
  SkipSpace(false);
  if (!text_.substr(pos_).starts_with("::=")) {
    return Error(pos_, fmt::format("expected '::=' after the rule name '{}'", name));
  }
  pos_ += 3;
  const int rule = RuleFor(name, kNoPos);
  RuleInfo& info = rules_.find(name)->second;
  if (info.defined_at != kNoPos) {
    return Error(start, fmt::format("rule '{}' is defined twice (first at {})", name,
                                    Where(info.defined_at)));
  }
  info.defined_at = start;
  current_rule_ = std::string(name);
  SkipSpaceInRule(false);
  KV_RETURN_IF_ERROR(ParseAlternates(rule, /*nested=*/false, 0));
  if (!AtEnd() && !AtNewline()) {
    return Error(pos_, Peek() == ')' ? "unbalanced ')'" : "expected the end of the line");
  }
  return Status::Ok();
}

Status GbnfCompiler::ParseAlternates(int rule, bool nested, int depth) {
  for (;;) {
    KV_ASSIGN_OR_RETURN(Sequence seq, ParseSequence(nested, depth));
    b_->AddAlternative(rule, std::move(seq));
    if (Peek() != '|' || AtEnd()) return Status::Ok();
    ++pos_;
    SkipSpaceInRule(nested);
  }
}

Result<Sequence> GbnfCompiler::ParseSequence(bool nested, int depth) {
  Sequence seq;
  for (;;) {
    SkipSpaceInRule(nested);
    if (AtEnd() || AtNewline() || Peek() == '|' || Peek() == ')') return seq;
    KV_ASSIGN_OR_RETURN(Item item, ParseElement(nested, depth));
    seq.insert(seq.end(), item.seq.begin(), item.seq.end());
  }
}

Result<Item> GbnfCompiler::ParseElement(bool nested, int depth) {
  const size_t start = pos_;
  Item item;
  const char c = Peek();
  if (c == '"') {
    KV_ASSIGN_OR_RETURN(item.seq, ParseLiteral());
  } else if (c == '[') {
    KV_ASSIGN_OR_RETURN(item.seq, ParseClass());
  } else if (c == '.') {
    ++pos_;
    item.seq.push_back(GrammarBuilder::Ref(b_->CodepointClass({}, /*negated=*/true)));
  } else if (c == '(') {
    KV_ASSIGN_OR_RETURN(item.seq, ParseGroup(depth + 1));
  } else if (IsWordChar(c)) {
    const std::string_view name = ParseName();
    item.seq.push_back(GrammarBuilder::Ref(RuleFor(name, start)));
  } else if (c == '*' || c == '+' || c == '?' || c == '{') {
    return Error(start, fmt::format("'{}' has nothing before it to repeat", c));
  } else {
    size_t end = pos_;
    DecodeAt(text_, &end);
    return Error(start, fmt::format("unexpected '{}'", text_.substr(pos_, end - pos_)));
  }
  KV_RETURN_IF_ERROR(ParsePostfix(nested, &item));
  return item;
}

Result<Sequence> GbnfCompiler::ParseGroup(int depth) {
  const size_t open = pos_;
  if (depth > kMaxNesting) return Error(open, "parentheses nested too deeply");
  ++pos_;  // '('
  const int rule = b_->AddRule(GeneratedName(open));
  SkipSpace(true);
  KV_RETURN_IF_ERROR(ParseAlternates(rule, /*nested=*/true, depth));
  if (Peek() != ')' || AtEnd()) return Error(open, "'(' is never closed");
  ++pos_;
  return Sequence{GrammarBuilder::Ref(rule)};
}

// ---- Postfix operators ----------------------------------------------------------------------

Status GbnfCompiler::ParsePostfix(bool nested, Item* item) {
  for (;;) {
    SkipSpace(nested);
    const size_t op = pos_;
    const char c = Peek();
    if (AtEnd() || (c != '*' && c != '+' && c != '?' && c != '{')) return Status::Ok();
    ++pos_;
    if (c != '{') {
      KV_RETURN_IF_ERROR(ApplyRepeat(op, c == '+' ? 1 : 0, c == '?' ? 1 : -1, item));
      continue;
    }
    // {m} {m,} {m,n}, blanks allowed inside.
    auto number = [&](int64_t* out) {
      SkipSpace(nested);
      if (!IsDigit(Peek()) || AtEnd()) return false;
      int64_t v = 0;
      while (!AtEnd() && IsDigit(Peek())) {
        v = std::min<int64_t>(v * 10 + (Peek() - '0'), kMaxGbnfRepeat + 1);
        ++pos_;
      }
      *out = v;
      SkipSpace(nested);
      return true;
    };
    int64_t min = 0, max = -1;
    if (!number(&min)) return Error(op, "expected a number after '{'");
    if (Peek() == ',' && !AtEnd()) {
      ++pos_;
      number(&max);
    } else {
      max = min;
    }
    if (Peek() != '}' || AtEnd()) return Error(op, "expected '}' to close the repetition");
    ++pos_;
    if (min > kMaxGbnfRepeat || max > kMaxGbnfRepeat) {
      return Error(op, fmt::format("repetition count over {}", kMaxGbnfRepeat));
    }
    if (max >= 0 && max < min) return Error(op, "repetition {m,n} with m greater than n");
    KV_RETURN_IF_ERROR(ApplyRepeat(op, min, max, item));
  }
}

Status GbnfCompiler::ApplyRepeat(size_t op_pos, int64_t min, int64_t max, Item* item) {
  if (item->seq.empty()) return Status::Ok();  // "" repeated is ""
  Sequence operand = std::move(item->seq);
  if (max < 0 && item->optional_of) {  // (x?)* (x*)+ (x{0,k}){n,}: x*
    operand = std::move(*item->optional_of);
    min = 0;
  }
  item->optional_of.reset();
  item->seq.clear();
  if (max == 0) return Status::Ok();
  if (min == 1 && max == 1) {
    item->seq = std::move(operand);
    return Status::Ok();
  }
  const std::string name = GeneratedName(op_pos);
  if (min == 0) item->optional_of = operand;
  int rule;
  if (min == 0 && max == 1) {
    rule = b_->Optional(name, operand);
  } else if (min == 0 && max < 0) {
    rule = b_->Star(name, operand);
  } else if (min == 1 && max < 0) {
    rule = b_->Plus(name, operand);
  } else {
    // Repeat copies its sequence; one reference per copy keeps it O(max) symbols.
    if (operand.size() > 1) operand = {GrammarBuilder::Ref(b_->Alternatives(name, {operand}))};
    rule = b_->Repeat(name, operand, min, max);
  }
  item->seq.push_back(GrammarBuilder::Ref(rule));
  return Status::Ok();
}

// ---- Literals, classes and escapes ----------------------------------------------------------

Result<Sequence> GbnfCompiler::ParseLiteral() {
  const size_t open = pos_;
  ++pos_;  // '"'
  std::string bytes;
  for (;;) {
    if (AtEnd()) return Error(open, "unterminated string literal");
    const char c = Peek();
    if (c == '"') break;
    if (c != '\\') {
      bytes.push_back(c);  // raw UTF-8, validated up front
      ++pos_;
      continue;
    }
    const size_t escape = pos_;
    KV_ASSIGN_OR_RETURN(uint32_t cp, ParseEscape());
    if (cp >= kSurrogateLo && cp <= kSurrogateHi) {
      return Error(escape, "a surrogate code point is not a character");
    }
    AppendUtf8(cp, &bytes);
  }
  ++pos_;  // '"'
  return b_->Literal(bytes);
}

Result<Sequence> GbnfCompiler::ParseClass() {
  const size_t open = pos_;
  ++pos_;  // '['
  const bool negated = Peek() == '^' && !AtEnd();
  if (negated) ++pos_;
  std::vector<CodepointRange> ranges;
  for (;;) {
    if (AtEnd()) return Error(open, "unterminated character class");
    if (Peek() == ']') break;
    const size_t item = pos_;
    KV_ASSIGN_OR_RETURN(uint32_t lo, ParseClassChar());
    uint32_t hi = lo;
    if (Peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
      ++pos_;
      KV_ASSIGN_OR_RETURN(hi, ParseClassChar());
      if (hi < lo) return Error(item, "character range with its start after its end");
    }
    ranges.push_back({lo, hi});
  }
  ++pos_;  // ']'
  const int rule = b_->CodepointClass(std::move(ranges), negated);
  if (!b_->rule_defined(rule)) return Error(open, "the character class matches nothing");
  return Sequence{GrammarBuilder::Ref(rule)};
}

Result<uint32_t> GbnfCompiler::ParseClassChar() {
  if (Peek() == '\\') return ParseEscape();
  return DecodeAt(text_, &pos_);
}

Result<uint32_t> GbnfCompiler::ParseEscape() {
  const size_t start = pos_;
  ++pos_;  // '\\'
  if (AtEnd()) return Error(start, "'\\' at the end of the text");
  const char c = Peek();
  ++pos_;
  switch (c) {
    case 'n': return uint32_t{'\n'};
    case 'r': return uint32_t{'\r'};
    case 't': return uint32_t{'\t'};
    case '\\': case '"': case '[': case ']': case '-':
      return static_cast<uint32_t>(c);
    case 'x': case 'u': case 'U': {
      const int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
      uint32_t v = 0;
      for (int i = 0; i < digits; ++i) {
        if (AtEnd() || HexValue(Peek()) < 0) {
          return Error(start, fmt::format("expected {} hex digits after '\\{}'", digits, c));
        }
        v = v * 16 + static_cast<uint32_t>(HexValue(Peek()));
        ++pos_;
      }
      if (v > kMaxCodepoint) return Error(start, "escape beyond U+10FFFF");
      return v;
    }
    default: {
      size_t end = start + 1;
      DecodeAt(text_, &end);
      return Error(start, fmt::format("unknown escape '{}'", text_.substr(start, end - start)));
    }
  }
}

// ---- The end --------------------------------------------------------------------------------

Result<int> GbnfCompiler::Compile() {
  for (size_t i = 0; i < text_.size();) {
    const int len = Utf8SequenceLength(text_, i);
    if (len == 0) return Error(i, "invalid UTF-8");
    i += static_cast<size_t>(len);
  }
  SkipSpace(true);
  while (!AtEnd()) {
    KV_RETURN_IF_ERROR(ParseRule());
    SkipSpace(true);
  }
  return Finish();
}

Result<int> GbnfCompiler::Finish() {
  const RuleInfo* undefined = nullptr;  // the one referred to first
  for (const auto& [name, info] : rules_) {
    if (info.defined_at == kNoPos && (!undefined || info.first_ref < undefined->first_ref)) {
      undefined = &info;
    }
  }
  if (undefined) {
    return Error(undefined->first_ref,
                 fmt::format("undefined rule '{}'", b_->rule_name(undefined->id)));
  }
  auto root = rules_.find("root");
  if (root == rules_.end()) return Error(0, "no 'root' rule (the grammar starts at root)");
  KV_RETURN_IF_ERROR(Validate(root->second.id));
  return root->second.id;
}

// Runs Build()'s checks now, so that left recursion or a rule that never ends is reported at
// the rule's line and column. Generated rules are named "<rule>@<line>:<column>...".
Status GbnfCompiler::Validate(int root) const {
  auto built = b_->Build(root);
  if (built.ok()) return Status::Ok();
  const std::string& message = built.status().message();
  const size_t q1 = message.find('\'');
  const size_t q2 = q1 == std::string::npos ? q1 : message.find('\'', q1 + 1);
  if (q2 == std::string::npos) return InvalidArgument("gbnf: " + message);
  const std::string name = message.substr(q1 + 1, q2 - q1 - 1);
  std::string where;
  if (const size_t at = name.find('@'); at != std::string::npos) {
    size_t end = at + 1;
    while (end < name.size() && (IsDigit(name[end]) || name[end] == ':')) ++end;
    where = name.substr(at + 1, end - at - 1);
  } else if (auto it = rules_.find(name); it != rules_.end()) {
    where = Where(it->second.defined_at);
  }
  if (where.empty()) return InvalidArgument("gbnf: " + message);
  return InvalidArgument(fmt::format("gbnf: {}: {}", where, message));
}

}  // namespace

Result<int> CompileGbnf(std::string_view text, GrammarBuilder* builder) {
  return GbnfCompiler(text, builder).Compile();
}

}  // namespace kvserve::structured
