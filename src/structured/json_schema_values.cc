// Scalars for the JSON Schema compiler (json_schema.cc): integers and numbers with bounds, JSON
// string characters, and the check of enum values against their sibling keywords. The
// declarations are in json_schema_internal.h.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/status.h"
#include "structured/grammar.h"
#include "structured/json_schema_internal.h"

namespace kvserve::structured::json_schema_internal {

using json = nlohmann::ordered_json;

// Digit caps (documented in json_schema.h): they keep every generated number finite for a
// random walk and exactly representable where bounds are compared.
inline constexpr int kMaxIntegerDigits = 15;
// Numbers with no bound compare with nothing: their integer parts go to 20 digits (2^64 has 20;
// ids and timestamps in nanoseconds run past 15).
inline constexpr int kMaxPlainIntegerDigits = 20;
inline constexpr int64_t kMaxInteger = 999'999'999'999'999;    // 15 digits
inline constexpr int64_t kMaxFractionalInteger = 999'999'999;  // integer part beside a fraction
inline constexpr int kMaxFractionDigits = 6;
// Between bounds, fraction digits go up to 15 significant digits in all (json_schema_decimals.cc).
inline constexpr int kMaxBoundedFractionDigits = 15;
inline constexpr int kMaxExponentDigits = 2;

namespace {

using Sym = GrammarBuilder;  // for Sym::Ref

// One digit position of a range: the digits [lo, hi].
using DigitRanges = std::vector<std::pair<char, char>>;

// Appends to *out digit strings covering exactly [x, y] (x <= y, equal lengths).
void SameLengthRange(std::string_view x, std::string_view y, const DigitRanges& prefix,
                     std::vector<DigitRanges>* out) {
  if (x.empty()) {
    out->push_back(prefix);
    return;
  }
  DigitRanges p = prefix;
  if (x[0] == y[0]) {
    p.emplace_back(x[0], x[0]);
    SameLengthRange(x.substr(1), y.substr(1), p, out);
    return;
  }
  const size_t rest = x.size() - 1;
  const std::string zeros(rest, '0'), nines(rest, '9');
  const bool x_whole = x.substr(1) == zeros;  // x0 000.. starts a whole block
  const bool y_whole = y.substr(1) == nines;  // y0 999.. ends a whole block
  char mid_lo = static_cast<char>(x[0] + 1), mid_hi = static_cast<char>(y[0] - 1);
  if (x_whole) {
    mid_lo = x[0];
  } else {
    p.emplace_back(x[0], x[0]);
    SameLengthRange(x.substr(1), nines, p, out);
    p.pop_back();
  }
  if (y_whole) mid_hi = y[0];
  if (mid_lo <= mid_hi) {
    DigitRanges m = prefix;
    m.emplace_back(mid_lo, mid_hi);
    for (size_t i = 0; i < rest; ++i) m.emplace_back('0', '9');
    out->push_back(std::move(m));
  }
  if (!y_whole) {
    p.emplace_back(y[0], y[0]);
    SameLengthRange(zeros, y.substr(1), p, out);
  }
}

int64_t Pow10(int d) {
  int64_t p = 1;
  for (int i = 0; i < d; ++i) p *= 10;
  return p;
}

int NumDigits(int64_t v) { return static_cast<int>(std::to_string(v).size()); }

// Canonical decimal strings (no leading zeros) of [a, b], 0 <= a <= b.
std::vector<DigitRanges> NonNegativeRange(int64_t a, int64_t b) {
  std::vector<DigitRanges> out;
  for (int d = NumDigits(a); d <= NumDigits(b); ++d) {
    const int64_t lo = std::max(a, d == 1 ? int64_t{0} : Pow10(d - 1));
    const int64_t hi = std::min(b, Pow10(d) - 1);
    if (lo <= hi) SameLengthRange(std::to_string(lo), std::to_string(hi), {}, &out);
  }
  return out;
}

Sequence DigitsToSequence(const DigitRanges& r, GrammarBuilder* b) {
  Sequence s;
  for (auto [lo, hi] : r) {
    s.push_back(b->Bytes(ByteSet::Of(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi))));
  }
  return s;
}

Symbol DigitSym(GrammarBuilder* b) { return b->Bytes(ByteSet::Of('0', '9')); }

// "." [0-9]{1,max_digits}
int FractionRule(GrammarBuilder* b, int max_digits = kMaxFractionDigits) {
  const int digits = b->Repeat("frac-digits", {DigitSym(b)}, 1, max_digits);
  Sequence s = b->Literal(".");
  s.push_back(Sym::Ref(digits));
  return b->Alternatives("fraction", {std::move(s)});
}

Result<NumberBound> ReadBound(const json& schema, const char* inclusive_key,
                              const char* exclusive_key, bool lower, const std::string& path) {
  NumberBound out;
  for (const char* key : {inclusive_key, exclusive_key}) {
    auto it = schema.find(key);
    if (it == schema.end()) continue;
    if (!it->is_number()) {
      return InvalidArgument(fmt::format("'{}' at {} must be a number{}", key, path,
                                         it->is_boolean() ? " (the draft-4 boolean form is not "
                                                            "supported)"
                                                          : ""));
    }
    const double v = it->get<double>();
    const bool excl = key == exclusive_key;
    const bool tighter =
        !out.present || (lower ? v > out.value : v < out.value) || (v == out.value && excl);
    if (tighter) out = NumberBound{true, v, excl};
  }
  return out;
}

// The smallest / largest integer a bound admits, clamped to the 15-digit cap (as doubles: the
// cap is far inside the exactly representable integers).
double LowestInteger(const NumberBound& b) {
  if (!b.present) return static_cast<double>(-kMaxInteger);
  const double v = b.exclusive ? std::floor(b.value) + 1 : std::ceil(b.value);
  return std::max(v, static_cast<double>(-kMaxInteger));
}

double HighestInteger(const NumberBound& b) {
  if (!b.present) return static_cast<double>(kMaxInteger);
  const double v = b.exclusive ? std::ceil(b.value) - 1 : std::floor(b.value);
  return std::min(v, static_cast<double>(kMaxInteger));
}

bool HasAnyBound(const json& schema) {
  for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
    if (schema.contains(k)) return true;
  }
  return false;
}

}  // namespace

void AppendIntegerRange(int64_t lo, int64_t hi, int suffix, GrammarBuilder* b,
                        std::vector<Sequence>* alts) {
  if (lo > hi) return;
  auto add = [&](const DigitRanges& r, bool negative) {
    Sequence s = negative ? b->Literal("-") : Sequence{};
    const Sequence digits = DigitsToSequence(r, b);
    s.insert(s.end(), digits.begin(), digits.end());
    if (suffix >= 0) s.push_back(Sym::Ref(suffix));
    alts->push_back(std::move(s));
  };
  if (hi >= 0) {
    for (const DigitRanges& r : NonNegativeRange(std::max<int64_t>(lo, 0), hi)) add(r, false);
  }
  if (lo < 0) {
    for (const DigitRanges& r : NonNegativeRange(std::max<int64_t>(1, -hi), -lo)) add(r, true);
  }
}

int IntegerRangeRule(int64_t lo, int64_t hi, GrammarBuilder* b) {
  std::vector<Sequence> alts;
  AppendIntegerRange(lo, hi, -1, b, &alts);
  return b->Alternatives(fmt::format("int[{},{}]", lo, hi), std::move(alts));
}

namespace {

// The digits of a whole number: 0, or up to `digits` digits without a leading zero.
int MagnitudeRule(int digits, GrammarBuilder* b) {
  const int tail = b->Repeat("int-tail", {DigitSym(b)}, 0, digits - 1);
  return b->Alternatives("int-magnitude",
                         {b->Literal("0"), {b->Bytes(ByteSet::Of('1', '9')), Sym::Ref(tail)}});
}

// e / E, a sign or none, and up to kMaxExponentDigits digits.
int ExponentRule(GrammarBuilder* b) {
  const int exp_digits = b->Repeat("exp-digits", {DigitSym(b)}, 1, kMaxExponentDigits);
  ByteSet e = ByteSet::Single('e');
  e.Add('E', 'E');
  ByteSet pm = ByteSet::Single('+');
  pm.Add('-', '-');
  const int exp_sign = b->Optional("exp-sign", {b->Bytes(pm)});
  return b->Alternatives("exponent", {{b->Bytes(e), Sym::Ref(exp_sign), Sym::Ref(exp_digits)}});
}

}  // namespace

// Numbers without bounds: -?(0|[1-9][0-9]{0,19}) for integers, plus an optional fraction and
// exponent for numbers.
int PlainNumberRule(bool integer, GrammarBuilder* b) {
  const int sign = b->Optional("sign", b->Literal("-"));
  Sequence s = {Sym::Ref(sign), Sym::Ref(MagnitudeRule(kMaxPlainIntegerDigits, b))};
  if (!integer) {
    s.push_back(Sym::Ref(b->Optional("fraction?", {Sym::Ref(FractionRule(b))})));
    s.push_back(Sym::Ref(b->Optional("exponent?", {Sym::Ref(ExponentRule(b))})));
  }
  return b->Alternatives(integer ? "integer" : "number", {std::move(s)});
}

// Integers or numbers under minimum / maximum / exclusiveMinimum / exclusiveMaximum. Integers
// are exact digit ranges. A number is either an integer of the range, or W.F with |W| < 10^9
// compared exactly with the bounds as decimals (AppendFractionalRange). No exponent.
namespace {

// Integers that are multiples of m > 1, as a right-linear grammar over the remainder of the
// digits read so far (state r: the digits so far are r mod m).
int MultipleOfRule(int64_t m, GrammarBuilder* b) {
  std::vector<int> state(static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) state[static_cast<size_t>(r)] = b->AddRule("mod-state");
  for (int64_t r = 0; r < m; ++r) {
    if (r == 0) b->AddAlternative(state[0], {});
    for (int d = 0; d <= 9; ++d) {
      const int64_t to = (r * 10 + d) % m;
      b->AddAlternative(state[static_cast<size_t>(r)],
                        {b->Bytes(ByteSet::Single(static_cast<uint8_t>('0' + d))),
                         Sym::Ref(state[static_cast<size_t>(to)])});
    }
  }
  std::vector<Sequence> magnitude = {b->Literal("0")};
  for (int d = 1; d <= 9; ++d) {
    magnitude.push_back({b->Bytes(ByteSet::Single(static_cast<uint8_t>('0' + d))),
                         Sym::Ref(state[static_cast<size_t>(d % m)])});
  }
  const int mag = b->Alternatives("multiple-magnitude", std::move(magnitude));
  const int sign = b->Optional("sign", b->Literal("-"));
  return b->Alternatives(fmt::format("multiple-of-{}", m), {{Sym::Ref(sign), Sym::Ref(mag)}});
}

inline constexpr int64_t kMaxMultipleOf = 10000;          // remainder states of an unbounded rule
inline constexpr int64_t kMaxEnumeratedMultiples = 1000;  // multiples listed within bounds

Result<int> BoundedNumberRule(const json& schema, bool integer, const std::string& path,
                              GrammarBuilder* b) {
  int fraction_digits = kMaxBoundedFractionDigits;  // or what multipleOf allows
  if (auto it = schema.find("multipleOf"); it != schema.end()) {
    if (!it->is_number() || it->get<double>() <= 0) {
      return InvalidArgument(fmt::format("'multipleOf' at {} must be a positive number", path));
    }
    const double m = it->get<double>();
    int k = 0;  // m = c / 10^k with c a whole number
    while (k <= kMaxFractionDigits &&
           std::abs(m * std::pow(10.0, k) - std::round(m * std::pow(10.0, k))) >
               1e-9 * m * std::pow(10.0, k)) {
      ++k;
    }
    const double c = std::round(m * std::pow(10.0, k));
    if (k == 0 && c > 1) {
      // Integers that are multiples of c: listed within bounds, or by remainder states.
      if (c > static_cast<double>(kMaxMultipleOf) && !HasAnyBound(schema)) {
        return InvalidArgument(
            fmt::format("'multipleOf' at {}: an unbounded multipleOf over {} is not supported",
                        path, kMaxMultipleOf));
      }
      if (!HasAnyBound(schema)) return MultipleOfRule(static_cast<int64_t>(c), b);
      KV_ASSIGN_OR_RETURN(NumberBound lower,
                          ReadBound(schema, "minimum", "exclusiveMinimum", true, path));
      KV_ASSIGN_OR_RETURN(NumberBound upper,
                          ReadBound(schema, "maximum", "exclusiveMaximum", false, path));
      if (!lower.present || !upper.present) {
        return InvalidArgument(
            fmt::format("'multipleOf' at {} with only one bound is not supported", path));
      }
      const double first = std::ceil(LowestInteger(lower) / c) * c;
      const double last = std::floor(HighestInteger(upper) / c) * c;
      if (first > last) {
        return InvalidArgument(
            fmt::format("'multipleOf' at {}: no multiple within the bounds", path));
      }
      if ((last - first) / c + 1 > static_cast<double>(kMaxEnumeratedMultiples)) {
        return InvalidArgument(
            fmt::format("'multipleOf' at {}: over {} multiples within the bounds is not supported",
                        path, kMaxEnumeratedMultiples));
      }
      std::vector<Sequence> alts;
      for (double v = first; v <= last; v += c) {
        alts.push_back(b->Literal(std::to_string(static_cast<int64_t>(v))));
      }
      return b->Alternatives("multiples", std::move(alts));
    }
    if (k == 0) {
      integer = true;  // a multiple of 1
    } else if (k <= kMaxFractionDigits && c == 1) {
      if (!integer && !HasAnyBound(schema)) {
        // -?(0|[1-9][0-9]*)(.[0-9]{1,k})?, no exponent.
        const int magnitude = MagnitudeRule(kMaxPlainIntegerDigits, b);
        const int sign = b->Optional("sign", b->Literal("-"));
        const int frac = b->Optional("fraction?", {Sym::Ref(FractionRule(b, k))});
        return b->Alternatives(fmt::format("decimal-{}", k),
                               {{Sym::Ref(sign), Sym::Ref(magnitude), Sym::Ref(frac)}});
      }
      fraction_digits = k;
    } else {
      return InvalidArgument(fmt::format(
          "'multipleOf' at {}: only whole numbers and powers of ten (0.1, 0.01, ...) down to "
          "1e-{} are supported",
          path, kMaxFractionDigits));
    }
  }
  if (!HasAnyBound(schema)) return PlainNumberRule(integer, b);
  KV_ASSIGN_OR_RETURN(NumberBound lower,
                      ReadBound(schema, "minimum", "exclusiveMinimum", true, path));
  KV_ASSIGN_OR_RETURN(NumberBound upper,
                      ReadBound(schema, "maximum", "exclusiveMaximum", false, path));
  const double lo_d = LowestInteger(lower), hi_d = HighestInteger(upper);
  std::vector<Sequence> alts;
  if (lo_d <= hi_d) {
    AppendIntegerRange(static_cast<int64_t>(lo_d), static_cast<int64_t>(hi_d), -1, b, &alts);
  }
  if (!integer) {
    AppendFractionalRange(lower, upper, fraction_digits, kMaxFractionalInteger, b, &alts);
    // With an exponent where the sign alone meets the bounds: no upper bound and a lower one
    // at or below 0 (below where exclusive) take any unsigned number; mirrored for upper.
    const bool unsigned_fits =
        !upper.present && (lower.exclusive ? lower.value < 0 : lower.value <= 0);
    const bool negative_fits =
        !lower.present && (upper.exclusive ? upper.value > 0 : upper.value >= 0);
    if ((unsigned_fits || negative_fits) && !schema.contains("multipleOf")) {
      Sequence s = negative_fits ? b->Literal("-") : Sequence{};
      s.push_back(Sym::Ref(MagnitudeRule(kMaxPlainIntegerDigits, b)));
      s.push_back(Sym::Ref(b->Optional("fraction?", {Sym::Ref(FractionRule(b))})));
      s.push_back(Sym::Ref(ExponentRule(b)));
      alts.push_back(std::move(s));
    }
  }
  if (alts.empty()) {
    return InvalidArgument(fmt::format(
        "'minimum'/'maximum' at {}: no {} within the bounds can be generated (integer parts are "
        "capped at {} digits, fractions at {} significant digits)",
        path, integer ? "integer" : "number", kMaxIntegerDigits, kMaxBoundedFractionDigits));
  }
  return b->Alternatives(integer ? "integer-range" : "number-range", std::move(alts));
}

}  // namespace

Result<int> NumberRule(const json& schema, bool integer, const std::string& path,
                       GrammarBuilder* b) {
  KV_ASSIGN_OR_RETURN(const int rule, BoundedNumberRule(schema, integer, path, b));
  // A number that multipleOf makes whole may be written with a zero fraction (6000.0 is a
  // multiple of 1 as a number; as an "integer" type draft 4 would refuse it, so not there).
  const auto m = schema.find("multipleOf");
  if (integer || m == schema.end() || m->get<double>() < 1 ||
      m->get<double>() != std::floor(m->get<double>())) {
    return rule;
  }
  Sequence zeros = b->Literal(".");
  zeros.push_back(Sym::Ref(b->Repeat("zero-digits", b->Literal("0"), 1, kMaxFractionDigits)));
  const int zero_fraction = b->Optional("zero-fraction?", std::move(zeros));
  return b->Alternatives("whole-number", {{Sym::Ref(rule), Sym::Ref(zero_fraction)}});
}

// One character of a JSON string: any code point but '"', '\\' and U+0000-U+001F, or an escape.
// \u escapes exclude surrogates, so every escape is exactly one code point (as Python counts).
int JsonCharRule(GrammarBuilder* b) {
  const int plain = b->CodepointClass({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true);
  ByteSet simple;
  for (char c : std::string_view("\"\\/bfnrt"))
    simple.Add(static_cast<uint8_t>(c), static_cast<uint8_t>(c));
  ByteSet hex = ByteSet::Of('0', '9');
  hex.Add('a', 'f');
  hex.Add('A', 'F');
  ByteSet hex_not_d = ByteSet::Of('0', '9');
  hex_not_d.Add('a', 'c');
  hex_not_d.Add('e', 'f');
  hex_not_d.Add('A', 'C');
  hex_not_d.Add('E', 'F');
  ByteSet d = ByteSet::Single('d');
  d.Add('D', 'D');
  const Symbol h = b->Bytes(hex);
  const int unit = b->Alternatives(
      "u-escape",
      {{b->Bytes(hex_not_d), h, h, h}, {b->Bytes(d), b->Bytes(ByteSet::Of('0', '7')), h, h}});
  Sequence esc_simple = b->Literal("\\");
  esc_simple.push_back(b->Bytes(simple));
  Sequence esc_u = b->Literal("\\u");
  esc_u.push_back(Sym::Ref(unit));
  return b->Alternatives("json-char", {{Sym::Ref(plain)}, esc_simple, esc_u});
}

// Code points of a UTF-8 string.
int64_t CodepointCount(std::string_view s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

// Whether a scalar enum/const value satisfies the length and numeric bounds beside it.
bool ScalarFits(const json& v, const json& schema) {
  if (v.is_string()) {
    const int64_t n = CodepointCount(v.get_ref<const std::string&>());
    if (auto it = schema.find("minLength");
        it != schema.end() && it->is_number() && n < it->get<double>()) {
      return false;
    }
    if (auto it = schema.find("maxLength");
        it != schema.end() && it->is_number() && n > it->get<double>()) {
      return false;
    }
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    auto num = [&](const char* k, double* out) {
      auto it = schema.find(k);
      if (it == schema.end() || !it->is_number()) return false;
      *out = it->get<double>();
      return true;
    };
    double bound = 0;
    if (num("minimum", &bound) && x < bound) return false;
    if (num("exclusiveMinimum", &bound) && x <= bound) return false;
    if (num("maximum", &bound) && x > bound) return false;
    if (num("exclusiveMaximum", &bound) && x >= bound) return false;
  }
  return true;
}

// Any JSON value (string_rule: a JSON string; ws: -1 or the whitespace rule); *object_rule is
// set to its object alternative.
int AnyJsonValueRule(int ws, int string_rule, int* object_rule, GrammarBuilder* b) {
  const int value = b->AddRule("value");
  const int str = string_rule;
  auto Ws = [&](Sequence* s) {
    if (ws >= 0) s->push_back(Sym::Ref(ws));
  };
  auto Byte = [&](char c) { return b->Bytes(ByteSet::Single(static_cast<uint8_t>(c))); };
  // open ws close | open ws item ("," ws item)* close, where item ends with its own ws.
  auto Bracketed = [&](const char* name, char open, Sequence item, char close) {
    Ws(&item);
    const int item_rule = b->Alternatives(std::string(name) + "-item", {std::move(item)});
    Sequence next = {Byte(',')};
    Ws(&next);
    next.push_back(Sym::Ref(item_rule));
    const int rest = b->Star(std::string(name) + "-rest", std::move(next));
    Sequence empty = {Byte(open)}, full = {Byte(open)};
    Ws(&empty);
    Ws(&full);
    empty.push_back(Byte(close));
    full.insert(full.end(), {Sym::Ref(item_rule), Sym::Ref(rest), Byte(close)});
    return b->Alternatives(name, {std::move(empty), std::move(full)});
  };
  // object ::= "{" ws "}" | "{" ws member ("," ws member)* "}", member ::= string ws ":" ws value
  // ws
  Sequence member = {Sym::Ref(str)};
  Ws(&member);
  member.push_back(Byte(':'));
  Ws(&member);
  member.push_back(Sym::Ref(value));
  *object_rule = Bracketed("object", '{', std::move(member), '}');
  // array ::= "[" ws "]" | "[" ws value ws ("," ws value ws)* "]"
  const int array = Bracketed("array", '[', {Sym::Ref(value)}, ']');
  const int number = PlainNumberRule(false, b);
  for (const Sequence& s :
       {Sequence{Sym::Ref(*object_rule)}, Sequence{Sym::Ref(array)}, Sequence{Sym::Ref(str)},
        Sequence{Sym::Ref(number)}, b->Literal("true"), b->Literal("false"), b->Literal("null")}) {
    b->AddAlternative(value, s);
  }
  return value;
}

}  // namespace kvserve::structured::json_schema_internal
