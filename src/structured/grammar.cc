#include "structured/grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <functional>
#include <limits>

namespace kvserve::structured {

ByteSet ByteSet::Of(uint8_t lo, uint8_t hi) {
  ByteSet s;
  s.Add(lo, hi);
  return s;
}

void ByteSet::Add(uint8_t lo, uint8_t hi) {
  for (int b = lo; b <= hi; ++b) bits[static_cast<size_t>(b >> 6)] |= uint64_t{1} << (b & 63);
}

void ByteSet::AddSet(const ByteSet& o) {
  for (size_t i = 0; i < 4; ++i) bits[i] |= o.bits[i];
}

int ByteSet::Count() const {
  int n = 0;
  for (uint64_t w : bits) n += std::popcount(w);
  return n;
}

namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

// Sorted, merged, surrogate-free ranges.
}  // namespace

std::vector<CodepointRange> NormalizeCodepoints(std::vector<CodepointRange> ranges, bool negated) {
  std::vector<CodepointRange> r;
  for (CodepointRange c : ranges) {
    if (c.lo > c.hi) std::swap(c.lo, c.hi);
    c.hi = std::min(c.hi, kMaxCodepoint);
    if (c.lo > kMaxCodepoint) continue;
    r.push_back(c);
  }
  std::sort(r.begin(), r.end(), [](auto a, auto b) { return a.lo < b.lo; });
  std::vector<CodepointRange> merged;
  for (CodepointRange c : r) {
    if (!merged.empty() && c.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, c.hi);
    } else {
      merged.push_back(c);
    }
  }
  if (negated) {
    std::vector<CodepointRange> inv;
    uint32_t next = 0;
    for (CodepointRange c : merged) {
      if (c.lo > next) inv.push_back({next, c.lo - 1});
      next = c.hi + 1;
    }
    if (next <= kMaxCodepoint) inv.push_back({next, kMaxCodepoint});
    merged = std::move(inv);
  }
  std::vector<CodepointRange> out;  // without surrogates
  for (CodepointRange c : merged) {
    if (c.hi < kSurrogateLo || c.lo > kSurrogateHi) {
      out.push_back(c);
      continue;
    }
    if (c.lo < kSurrogateLo) out.push_back({c.lo, kSurrogateLo - 1});
    if (c.hi > kSurrogateHi) out.push_back({kSurrogateHi + 1, c.hi});
  }
  return out;
}

namespace {

int Utf8Length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// Splits [lo, hi] (one UTF-8 length) until every byte position is an independent range, and
// emits each piece as a sequence of byte ranges.
void SplitUtf8(uint32_t lo, uint32_t hi,
               std::vector<std::vector<std::pair<uint8_t, uint8_t>>>* out) {
  const int n = Utf8Length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitUtf8(lo, lo | m, out);
        SplitUtf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        SplitUtf8(lo, (hi & ~m) - 1, out);
        SplitUtf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  AppendUtf8(lo, &a);
  AppendUtf8(hi, &b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (size_t i = 0; i < a.size(); ++i) {
    seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  }
  out->push_back(std::move(seq));
}

}  // namespace

int GrammarBuilder::AddRule(std::string name) {
  rules_.push_back(RuleDef{std::move(name), {}});
  return static_cast<int>(rules_.size()) - 1;
}

void GrammarBuilder::AddAlternative(int rule, Sequence seq) {
  if ((++calls_ & 1023) == 0 && std::chrono::steady_clock::now() > deadline_) expired_ = true;
  if (expired_) return;
  num_symbols_ += static_cast<int64_t>(seq.size()) + 1;
  rules_[static_cast<size_t>(rule)].alts.push_back(std::move(seq));
}

Symbol GrammarBuilder::Bytes(const ByteSet& set) {
  for (size_t i = 0; i < byte_sets_.size(); ++i) {
    if (byte_sets_[i] == set) return Symbol{Symbol::Kind::kBytes, static_cast<int32_t>(i)};
  }
  byte_sets_.push_back(set);
  return Symbol{Symbol::Kind::kBytes, static_cast<int32_t>(byte_sets_.size() - 1)};
}

void GrammarBuilder::AppendLiteral(std::string_view text, Sequence* seq) {
  for (char c : text) seq->push_back(Bytes(ByteSet::Single(static_cast<uint8_t>(c))));
}

Sequence GrammarBuilder::Literal(std::string_view text) {
  Sequence s;
  AppendLiteral(text, &s);
  return s;
}

int GrammarBuilder::Alternatives(std::string name, std::vector<Sequence> alts) {
  const int r = AddRule(std::move(name));
  for (Sequence& s : alts) AddAlternative(r, std::move(s));
  return r;
}

int GrammarBuilder::Optional(std::string name, Sequence seq) {
  return Alternatives(std::move(name), {std::move(seq), {}});
}

int GrammarBuilder::Star(std::string name, Sequence seq) {
  const int r = AddRule(std::move(name));
  seq.push_back(Ref(r));
  AddAlternative(r, std::move(seq));
  AddAlternative(r, {});
  return r;
}

int GrammarBuilder::Plus(std::string name, Sequence seq) {
  const int star = Star(name + "*", seq);
  seq.push_back(Ref(star));
  return Alternatives(std::move(name), {std::move(seq)});
}

int GrammarBuilder::Repeat(std::string name, const Sequence& seq, int64_t min, int64_t max) {
  Sequence body;
  const int64_t copies = max < 0 ? min : max;
  // Refuse early what Build() would refuse anyway, before building millions of symbols.
  if (copies * static_cast<int64_t>(seq.size() + 2) + num_symbols_ > kMaxSymbols) {
    too_large_ = true;
    return Alternatives(std::move(name), {{}});
  }
  for (int64_t i = 0; i < min; ++i) body.insert(body.end(), seq.begin(), seq.end());
  if (max < 0) {
    body.push_back(Ref(Star(name + "*", seq)));
  } else if (max > min) {
    // (seq (seq (...)?)?)? from the inside out.
    int tail = -1;
    for (int64_t i = 0; i < max - min; ++i) {
      Sequence s = seq;
      if (tail >= 0) s.push_back(Ref(tail));
      tail = Optional(fmt::format("{}?{}", name, i), std::move(s));
    }
    body.push_back(Ref(tail));
  }
  return Alternatives(std::move(name), {std::move(body)});
}

bool MemberSetSpec::CanFinish(const MemberBits& taken, int64_t count) const {
  const MemberBits all = MemberBits::FirstN(members.size());
  // t further members: every missing required one, enough for the minimum, within the maximum
  // and, without an extra member, within the members left.
  const int64_t t_lo = std::max<int64_t>((required & ~taken).Count(), min_count - count);
  int64_t t_hi = max_count < 0 ? std::numeric_limits<int64_t>::max() : max_count - count;
  if (extra < 0) t_hi = std::min<int64_t>(t_hi, (all & ~taken).Count());
  return (required & ~all).Empty() && t_lo <= t_hi;
}

Symbol GrammarBuilder::Set(std::string name, MemberSetSpec spec) {
  MemberSet set;
  const auto after = [&](int rule) { return fmt::format("{} ,{}", name, rule_name(rule)); };
  for (int m : spec.members) {
    if (spec.separator.empty()) {
      set.after_separator.push_back(m);
      continue;
    }
    Sequence seq = spec.separator;
    seq.push_back(Ref(m));
    set.after_separator.push_back(Alternatives(after(m), {std::move(seq)}));
  }
  const auto after_separator = [&](int rule) {
    if (rule < 0 || spec.separator.empty()) return rule;
    Sequence seq = spec.separator;
    seq.push_back(Ref(rule));
    return Alternatives(after(rule), {std::move(seq)});
  };
  set.extra_after_separator = after_separator(spec.extra);
  set.early_extra_after_separator = after_separator(spec.early_extra);
  set.name = std::move(name);
  set.spec = std::move(spec);
  num_symbols_ += static_cast<int64_t>(set.spec.members.size() + set.spec.separator.size());
  sets_.push_back(std::move(set));
  return Symbol{Symbol::Kind::kSet, static_cast<int32_t>(sets_.size() - 1)};
}

int GrammarBuilder::CodepointClass(std::vector<CodepointRange> ranges, bool negated) {
  std::vector<CodepointRange> norm = NormalizeCodepoints(std::move(ranges), negated);
  std::string key;
  for (CodepointRange c : norm) key += fmt::format("{:x}-{:x},", c.lo, c.hi);
  if (auto it = class_cache_.find(key); it != class_cache_.end()) return it->second;
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> pieces;
  for (CodepointRange c : norm) {
    // Split at the UTF-8 length boundaries first.
    uint32_t lo = c.lo;
    for (uint32_t bound : {0x7Fu, 0x7FFu, 0xFFFFu, kMaxCodepoint}) {
      if (lo > c.hi) break;
      if (lo > bound) continue;
      const uint32_t hi = std::min(c.hi, bound);
      SplitUtf8(lo, hi, &pieces);
      lo = hi + 1;
    }
  }
  // Pieces of one byte merge into one set; the others stay sequences.
  std::vector<Sequence> alts;
  ByteSet ascii;
  for (const auto& p : pieces) {
    if (p.size() == 1) {
      ascii.Add(p[0].first, p[0].second);
      continue;
    }
    Sequence s;
    for (auto [lo, hi] : p) s.push_back(Bytes(ByteSet::Of(lo, hi)));
    alts.push_back(std::move(s));
  }
  if (!ascii.Empty()) alts.insert(alts.begin(), Sequence{Bytes(ascii)});
  const int r = alts.empty() ? AddRule("empty-class") : Alternatives("char", std::move(alts));
  class_cache_.emplace(std::move(key), r);
  return r;
}

Result<Grammar> GrammarBuilder::Build(int start_rule) const {
  const size_t n = rules_.size();
  if (expired_ || std::chrono::steady_clock::now() > deadline_) {
    return InvalidArgument(
        "the constraint took longer to compile than the time limit allows "
        "(--structured-compile-timeout-ms); simplify it");
  }
  if (start_rule < 0 || static_cast<size_t>(start_rule) >= n) {
    return InvalidArgument("grammar has no start rule");
  }
  if (too_large_ || num_symbols_ > kMaxSymbols) {
    return InvalidArgument(
        fmt::format("grammar too large: over {} symbols (lower the repetition counts or lengths)",
                    kMaxSymbols));
  }
  const auto valid_rule = [n](int r) { return r >= 0 && static_cast<size_t>(r) < n; };
  for (size_t r = 0; r < n; ++r) {
    if (rules_[r].alts.empty()) {
      return InvalidArgument(
          fmt::format("rule '{}' matches nothing (undefined or empty)", rules_[r].name));
    }
    for (const Sequence& s : rules_[r].alts) {
      for (const Symbol& sym : s) {
        if ((sym.kind == Symbol::Kind::kRule && !valid_rule(sym.index)) ||
            (sym.kind == Symbol::Kind::kSet &&
             (sym.index < 0 || static_cast<size_t>(sym.index) >= sets_.size()))) {
          return InvalidArgument(
              fmt::format("rule '{}' refers to an unknown rule", rules_[r].name));
        }
      }
    }
  }
  for (const MemberSet& set : sets_) {
    const MemberSetSpec& spec = set.spec;
    const auto k = static_cast<int64_t>(spec.members.size());
    if (k > MemberSetSpec::kMaxMembers ||
        !std::all_of(spec.members.begin(), spec.members.end(), valid_rule) ||
        (spec.extra >= 0 && !valid_rule(spec.extra)) ||
        (spec.early_extra >= 0 && !valid_rule(spec.early_extra))) {
      return InvalidArgument(fmt::format("member set '{}' has over {} members or an unknown one",
                                         set.name, MemberSetSpec::kMaxMembers));
    }
    if (!spec.CanFinish(MemberBits{}, 0)) {
      return InvalidArgument(fmt::format(
          "member set '{}': no list of its members meets its required members and count bounds",
          set.name));
    }
  }
  // Nullable and productive rules (fixpoints).
  std::vector<uint8_t> nullable(n, 0), productive(n, 0);
  // A set is productive when the members that are (members are never nullable) can finish it.
  const auto set_productive = [&productive](const MemberSet& set) {
    const auto prod = [&productive](int r) { return r >= 0 && productive[static_cast<size_t>(r)]; };
    MemberSetSpec usable = set.spec;
    usable.members.clear();
    usable.required = MemberBits{};
    for (size_t i = 0; i < set.spec.members.size(); ++i) {
      const bool required = set.spec.required.Has(i);
      if (!prod(set.spec.members[i]) || !prod(set.after_separator[i])) {
        if (required) return false;
        continue;
      }
      if (required) usable.required |= MemberBits::Bit(usable.members.size());
      usable.members.push_back(set.spec.members[i]);
    }
    if (!prod(set.spec.extra) || !prod(set.extra_after_separator)) usable.extra = -1;
    usable.early_extra = -1;  // never needed to finish
    return usable.CanFinish(MemberBits{}, 0);
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      for (const Sequence& s : rules_[r].alts) {
        bool all_null = true, all_prod = true;
        for (const Symbol& sym : s) {
          if (sym.kind == Symbol::Kind::kBytes) {
            all_null = false;
          } else if (sym.kind == Symbol::Kind::kSet) {
            const MemberSet& set = sets_[static_cast<size_t>(sym.index)];
            all_null = all_null && set.nullable();
            all_prod = all_prod && set_productive(set);
          } else {
            all_null = all_null && nullable[static_cast<size_t>(sym.index)];
            all_prod = all_prod && productive[static_cast<size_t>(sym.index)];
          }
        }
        if (all_null && !nullable[r]) nullable[r] = 1, changed = true;
        if (all_prod && !productive[r]) productive[r] = 1, changed = true;
      }
    }
  }
  for (size_t r = 0; r < n; ++r) {
    if (!productive[r]) {
      return InvalidArgument(fmt::format(
          "rule '{}' can never finish (every alternative recurses forever)", rules_[r].name));
    }
  }
  for (const MemberSet& set : sets_) {
    for (int m : set.spec.members) {
      if (nullable[static_cast<size_t>(m)]) {
        return InvalidArgument(fmt::format("member '{}' of set '{}' can match nothing",
                                           rules_[static_cast<size_t>(m)].name, set.name));
      }
    }
    for (int extra : {set.spec.extra, set.spec.early_extra}) {
      if (extra >= 0 && nullable[static_cast<size_t>(extra)]) {
        return InvalidArgument(
            fmt::format("the extra member of set '{}' can match nothing", set.name));
      }
    }
  }
  // Left recursion: a cycle in "r can start with s".
  std::vector<std::vector<int>> first(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Sequence& s : rules_[r].alts) {
      for (const Symbol& sym : s) {
        if (sym.kind == Symbol::Kind::kBytes) break;
        if (sym.kind == Symbol::Kind::kSet) {
          // Its first member comes without a separator; later ones follow a byte.
          const MemberSet& set = sets_[static_cast<size_t>(sym.index)];
          first[r].insert(first[r].end(), set.spec.members.begin(), set.spec.members.end());
          if (set.spec.extra >= 0) first[r].push_back(set.spec.extra);
          if (set.spec.early_extra >= 0) first[r].push_back(set.spec.early_extra);
          if (!set.nullable()) break;
          continue;
        }
        first[r].push_back(sym.index);
        if (!nullable[static_cast<size_t>(sym.index)]) break;
      }
    }
  }
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
  std::string cycle;
  std::function<bool(int)> visit = [&](int r) {
    color[static_cast<size_t>(r)] = 1;
    for (int s : first[static_cast<size_t>(r)]) {
      if (color[static_cast<size_t>(s)] == 1) {
        cycle = rules_[static_cast<size_t>(s)].name;
        return true;
      }
      if (color[static_cast<size_t>(s)] == 0 && visit(s)) return true;
    }
    color[static_cast<size_t>(r)] = 2;
    return false;
  };
  for (size_t r = 0; r < n; ++r) {
    if (color[r] == 0 && visit(static_cast<int>(r))) {
      return InvalidArgument(fmt::format(
          "rule '{}' is left-recursive (it can reach itself before matching a byte)", cycle));
    }
  }
  Grammar g;
  g.byte_sets_ = byte_sets_;
  g.sets_ = sets_;
  g.nullable_ = nullable;
  g.start_ = start_rule;
  g.rule_alts_.resize(n);
  g.rule_names_.reserve(n);
  for (size_t r = 0; r < n; ++r) {
    g.rule_names_.push_back(rules_[r].name);
    for (const Sequence& s : rules_[r].alts) {
      g.rule_alts_[r].push_back(static_cast<int32_t>(g.symbols_.size()));
      g.symbols_.insert(g.symbols_.end(), s.begin(), s.end());
      g.symbols_.push_back(Symbol{Symbol::Kind::kEnd, static_cast<int32_t>(r)});
    }
  }
  for (int r : unique_rules_) {
    if (!valid_rule(r)) return InvalidArgument("a unique array refers to an unknown rule");
    g.unique_open_.resize(g.symbols_.size(), 0);
    for (int32_t pos : g.rule_alts_[static_cast<size_t>(r)]) {
      const Symbol& open = g.symbols_[static_cast<size_t>(pos)];
      if (open.kind != Symbol::Kind::kBytes ||
          g.byte_sets_[static_cast<size_t>(open.index)] != ByteSet::Single('[')) {
        return InvalidArgument(fmt::format("unique array '{}' does not start with '['",
                                           rules_[static_cast<size_t>(r)].name));
      }
      g.unique_open_[static_cast<size_t>(pos)] = 1;
    }
  }
  return g;
}

namespace {

std::string ByteSetString(const ByteSet& s) {
  auto esc = [](int b) {
    if (b >= 0x21 && b < 0x7F && b != ']' && b != '\\' && b != '-' && b != '"') {
      return std::string(1, static_cast<char>(b));
    }
    return fmt::format("\\x{:02X}", b);
  };
  if (s.Count() == 1) {
    for (int b = 0; b < 256; ++b) {
      if (s.Has(static_cast<uint8_t>(b))) return fmt::format("\"{}\"", esc(b));
    }
  }
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!s.Has(static_cast<uint8_t>(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && s.Has(static_cast<uint8_t>(e + 1))) ++e;
    out += esc(b);
    if (e > b) out += fmt::format("-{}", esc(e));
    b = e + 1;
  }
  out += "]";
  return out;
}

}  // namespace

std::string Grammar::SymbolString(const Symbol& s) const {
  const auto rule = [this](int r) {
    return fmt::format("{}#{}", rule_names_[static_cast<size_t>(r)], r);
  };
  switch (s.kind) {
    case Symbol::Kind::kBytes:
      return ByteSetString(byte_set(s.index));
    case Symbol::Kind::kRule:
      return rule(s.index);
    case Symbol::Kind::kEnd:
      return "\"\"";
    case Symbol::Kind::kSet:
      break;
  }
  // set{a#1! b#2 extra#3* early#4<=2 / "," / 1..*}: members (! required, * the repeatable extra,
  // <=n the early extra and its budget), the separator, the count bounds.
  const MemberSetSpec& spec = member_set(s.index).spec;
  std::string out = "set{";
  for (size_t i = 0; i < spec.members.size(); ++i) {
    out += fmt::format("{}{}{}", i == 0 ? "" : " ", rule(spec.members[i]),
                       spec.required.Has(i) ? "!" : "");
  }
  if (spec.extra >= 0) out += fmt::format(" {}*", rule(spec.extra));
  if (spec.early_extra >= 0)
    out += fmt::format(" {}<={}", rule(spec.early_extra), spec.early_extras);
  out += " /";
  for (const Symbol& sep : spec.separator) out += fmt::format(" {}", SymbolString(sep));
  out += fmt::format(" / {}..", spec.min_count);
  out += spec.max_count < 0 ? "*}" : fmt::format("{}}}", spec.max_count);
  return out;
}

std::string Grammar::ToString() const {
  std::string out;
  for (int r = 0; r < num_rules(); ++r) {
    out += fmt::format("{}#{} ::=", rule_names_[static_cast<size_t>(r)], r);
    bool first_alt = true;
    for (int32_t pos : alternatives(r)) {
      if (!first_alt) out += " |";
      first_alt = false;
      for (int32_t p = pos; symbol(p).kind != Symbol::Kind::kEnd; ++p) {
        out += fmt::format(" {}", SymbolString(symbol(p)));
      }
      if (symbol(pos).kind == Symbol::Kind::kEnd) out += " \"\"";
    }
    out += "\n";
  }
  return out;
}

}  // namespace kvserve::structured
