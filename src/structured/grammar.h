// Grammar: a context-free grammar over bytes, the one form every constraint compiles to (JSON
// Schema, regex, choice, GBNF). The matcher (matcher.h) walks it as a pushdown automaton.
//
// A rule is a list of alternatives; an alternative is a sequence of symbols, each either a set
// of bytes (one input byte from the set), a reference to a rule, or a member set (below). Text
// is bytes: a code point
// class such as [^"\\] becomes a rule of UTF-8 byte sequences (GrammarBuilder::CodepointClass),
// so the matcher never decodes UTF-8 and tokens that end inside a character are handled for free.
//
// A member set (GrammarBuilder::Set, the members of a JSON object) matches its members in any
// order, each at most once, with an optional repeatable extra member, a separator between two
// members, some members required and the count (extras included) within bounds. A plain CFG
// would need a rule per subset of members taken; the matcher instead carries the subset on the
// set's stack frame (matcher.h).
//
// Contract: GrammarBuilder collects rules and Build() validates them into an immutable Grammar
// (thread-safe to read). Build() refuses a grammar the matcher could not walk: an empty rule, a
// rule that derives itself without consuming a byte first (left recursion, which would expand
// forever), a rule that can never finish, a member set no member list satisfies, and a grammar
// over kMaxSymbols symbols.
//
// Layout: the alternatives are flattened into one symbol array, each alternative a run of
// symbols closed by an kEnd symbol, so a parse position is one index (see matcher.h).
#pragma once

#include <array>
#include <bit>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvserve/status.h"
#include "tokenizer/unicode.h"  // AppendUtf8

namespace kvserve::structured {

// 256 bits: which bytes a kBytes symbol accepts.
struct ByteSet {
  std::array<uint64_t, 4> bits{};

  static ByteSet Of(uint8_t lo, uint8_t hi);  // [lo, hi]
  static ByteSet Single(uint8_t b) { return Of(b, b); }
  bool Has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void Add(uint8_t lo, uint8_t hi);
  void AddSet(const ByteSet& o);
  bool Empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  int Count() const;
  bool operator==(const ByteSet&) const = default;
};

struct Symbol {
  enum class Kind : uint8_t { kBytes, kRule, kSet, kEnd };
  Kind kind = Kind::kEnd;
  int32_t index = 0;  // kBytes: byte set id; kRule: rule id; kSet: member set id; kEnd: the rule
                      // it closes
};

using Sequence = std::vector<Symbol>;

// A set of members by index, up to MemberSetSpec::kMaxMembers. Room for 128: sets of 65 to 128
// members matched every order of MaskBench's large objects but made their masks slow (each
// key position then holds a stack per member left, anew for every set of members taken: over
// 200 ms for one token of JSON Schema Store's jsconfig), so sets stop at 64 for now.
struct MemberBits {
  std::array<uint64_t, 2> w{};

  constexpr MemberBits() = default;
  // Members 0..63 from a 64-bit mask (implicit: a plain mask reads as one).
  constexpr MemberBits(uint64_t lo) : w{lo, 0} {}  // NOLINT(google-explicit-constructor)
  constexpr MemberBits(uint64_t lo, uint64_t hi) : w{lo, hi} {}

  static MemberBits Bit(size_t i) {
    MemberBits b;
    b.w[i >> 6] = uint64_t{1} << (i & 63);
    return b;
  }
  // Members [0, n).
  static MemberBits FirstN(size_t n) {
    MemberBits b;
    for (size_t i = 0; i < b.w.size(); ++i) {
      const size_t lo = i * 64;
      b.w[i] = n >= lo + 64 ? ~uint64_t{0} : n > lo ? (uint64_t{1} << (n - lo)) - 1 : 0;
    }
    return b;
  }
  bool Has(size_t i) const { return (w[i >> 6] >> (i & 63)) & 1; }
  bool Empty() const { return (w[0] | w[1]) == 0; }
  int Count() const { return std::popcount(w[0]) + std::popcount(w[1]); }
  MemberBits operator|(const MemberBits& o) const { return {w[0] | o.w[0], w[1] | o.w[1]}; }
  MemberBits operator&(const MemberBits& o) const { return {w[0] & o.w[0], w[1] & o.w[1]}; }
  MemberBits operator~() const { return {~w[0], ~w[1]}; }
  MemberBits& operator|=(const MemberBits& o) { return *this = *this | o; }
  bool operator==(const MemberBits&) const = default;
};

// What a kSet symbol matches: members[i] at most once each, in any order; `extra` (-1: none) any
// number of times once every required member is written, and before that `early_extra` (-1:
// none; a narrower rule than `extra`) at most `early_extras` times, first, ahead of every other
// member; `separator` between two members; every member whose bit is in `required`;
// min_count..max_count members in all, extras included (max_count -1: unbounded). Extras wait
// for the required members so that a model cannot put them off forever behind extras (a loop
// of extra keys is how small models fail to end objects); the few early ones take what real
// documents lead with ("$schema": JSON Schema's compiler offers keys that start with '$'), and
// a narrow rule keeps their masks cheap.
struct MemberSetSpec {
  static constexpr int kMaxMembers = 64;  // see MemberBits

  std::vector<int> members;  // rules, none nullable; at most kMaxMembers
  int extra = -1;            // a rule, not nullable
  Sequence separator;
  MemberBits required;
  int64_t min_count = 0;
  int64_t max_count = -1;
  int early_extra = -1;  // a rule, not nullable
  int early_extras = 0;

  // Whether, with the members in `taken` written and `count` members in all, some list of
  // further members meets the required members and the count bounds (the matcher offers no
  // member after which none does, so every prefix it accepts can still finish).
  bool CanFinish(const MemberBits& taken, int64_t count) const;
};

// A member set as the matcher walks it: the spec, plus for each member (and the extra) the rule
// "separator member" used once a member was written.
struct MemberSet {
  std::string name;
  MemberSetSpec spec;
  std::vector<int> after_separator;  // [members.size()] rules
  int extra_after_separator = -1;
  int early_extra_after_separator = -1;

  // Whether the set can match nothing: no member required and none needed by the count.
  bool nullable() const { return spec.required.Empty() && spec.min_count == 0; }
};

// A code point range [lo, hi], for CodepointClass.
struct CodepointRange {
  uint32_t lo = 0, hi = 0;
};

// Sorted, merged ranges without surrogates; with `negated`, their complement in [0, 0x10FFFF].
// Empty when the class matches no code point.
std::vector<CodepointRange> NormalizeCodepoints(std::vector<CodepointRange> ranges, bool negated);

class Grammar {
 public:
  int num_rules() const { return static_cast<int>(rule_alts_.size()); }
  int start_rule() const { return start_; }
  const std::string& rule_name(int rule) const { return rule_names_[static_cast<size_t>(rule)]; }
  // Positions (indices into symbols()) where the rule's alternatives begin.
  const std::vector<int32_t>& alternatives(int rule) const {
    return rule_alts_[static_cast<size_t>(rule)];
  }
  const Symbol& symbol(int32_t pos) const { return symbols_[static_cast<size_t>(pos)]; }
  int32_t num_symbols() const { return static_cast<int32_t>(symbols_.size()); }
  const ByteSet& byte_set(int32_t id) const { return byte_sets_[static_cast<size_t>(id)]; }
  const MemberSet& member_set(int32_t id) const { return sets_[static_cast<size_t>(id)]; }
  // Whether the rule can derive the empty string.
  bool nullable(int rule) const { return nullable_[static_cast<size_t>(rule)] != 0; }
  // Whether the kBytes symbol at `pos` is the '[' of an array whose items must be distinct
  // (GrammarBuilder::MarkUniqueArray). The grammar itself does not compare items: the
  // ConstraintProcessor does, with a UniqueItemsTracker (unique_items.h).
  bool opens_unique_array(int32_t pos) const {
    return !unique_open_.empty() && unique_open_[static_cast<size_t>(pos)] != 0;
  }
  bool has_unique_arrays() const { return !unique_open_.empty(); }

  // A readable dump in GBNF-like syntax (tests and --debug output).
  std::string ToString() const;

 private:
  std::string SymbolString(const Symbol& s) const;

  friend class GrammarBuilder;
  std::vector<Symbol> symbols_;
  std::vector<std::vector<int32_t>> rule_alts_;
  std::vector<std::string> rule_names_;
  std::vector<ByteSet> byte_sets_;
  std::vector<MemberSet> sets_;
  std::vector<uint8_t> nullable_;
  std::vector<uint8_t> unique_open_;  // [num_symbols] or empty: no unique array
  int start_ = 0;
};

class GrammarBuilder {
 public:
  static constexpr int64_t kMaxSymbols = 2'000'000;

  // A new empty rule (alternatives are added later, so rules may refer to each other before
  // they are defined). Names need not be unique; they label errors and dumps.
  int AddRule(std::string name);
  void AddAlternative(int rule, Sequence seq);
  int num_rules() const { return static_cast<int>(rules_.size()); }
  const std::string& rule_name(int rule) const { return rules_[static_cast<size_t>(rule)].name; }
  bool rule_defined(int rule) const { return !rules_[static_cast<size_t>(rule)].alts.empty(); }

  Symbol Bytes(const ByteSet& set);  // REQUIRES: !set.Empty()
  static Symbol Ref(int rule) { return Symbol{Symbol::Kind::kRule, rule}; }
  // The bytes of `text`, one symbol each, appended to *seq.
  void AppendLiteral(std::string_view text, Sequence* seq);
  Sequence Literal(std::string_view text);

  // Rules built from others; each returns a new rule (or a cached one for the same input).
  int Alternatives(std::string name, std::vector<Sequence> alts);
  int Optional(std::string name, Sequence seq);  // seq | ""
  int Star(std::string name, Sequence seq);      // (seq)*, right-recursive (constant stack)
  int Plus(std::string name, Sequence seq);      // seq (seq)*
  // seq repeated min..max times (max < 0: unbounded). Sizes are O(max) symbols.
  int Repeat(std::string name, const Sequence& seq, int64_t min, int64_t max);
  // A kSet symbol matching spec's members in any order (see MemberSetSpec); Build() checks the
  // spec (member count, nullable members, bounds no member list meets).
  Symbol Set(std::string name, MemberSetSpec spec);
  // One code point from the union of `ranges` (or its complement in [0, 0x10FFFF] minus
  // surrogates when negated), as UTF-8. Cached by content.
  int CodepointClass(std::vector<CodepointRange> ranges, bool negated);

  // Marks `rule` as an array whose items must be distinct JSON values: each alternative starts
  // with its '[' byte. Its items must be scalars (strings, numbers, booleans, null), which is
  // what UniqueItemsTracker compares; the rule should be a fresh AddRule, not one the
  // combinators above may share with an unmarked array.
  void MarkUniqueArray(int rule) { unique_rules_.push_back(rule); }

  // Validates and flattens. An InvalidArgument status naming the offending rule, or saying the
  // grammar is over kMaxSymbols symbols.
  Result<Grammar> Build(int start_rule) const;

  // A compile deadline: once past it, the builder stops growing (every later rule is empty) and
  // Build() refuses with DeadlineExceeded-style InvalidArgument, so a pathological constraint
  // costs at most the time limit.
  void SetDeadline(std::chrono::steady_clock::time_point deadline) { deadline_ = deadline; }

 private:
  struct RuleDef {
    std::string name;
    std::vector<Sequence> alts;
  };
  std::vector<RuleDef> rules_;
  std::vector<ByteSet> byte_sets_;
  std::vector<MemberSet> sets_;
  std::unordered_map<std::string, int> class_cache_;
  std::vector<int> unique_rules_;
  int64_t num_symbols_ = 0;
  bool too_large_ = false;  // a Repeat was refused before it built over kMaxSymbols
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  bool expired_ = false;
  int64_t calls_ = 0;
};

}  // namespace kvserve::structured
