// Numbers with a fraction between decimal bounds, for the JSON Schema compiler's NumberRule
// (json_schema_values.cc). The declarations are in json_schema_internal.h.
//
// NOTE: a bound is read as the shortest decimal that round-trips its double (what the schema
// wrote: 0.1, 79.3333), and a number W.F is compared with it digit by digit: its whole part
// first, then, where the whole parts are equal, its fraction digits against the bound's. So the
// grammar admits exactly the decimals of that form inside the interval, up to the digit caps:
// nothing near a bound is lost (minimum 0.1 admits 0.5 and 0.1; maximum 10 admits 10.0), and
// nothing outside is admitted. Numbers carry at most kMaxSignificantDigits digits besides leading
// zeros, which keeps an exact decimal comparison and a comparison of doubles (a validator's) in
// agreement: two different decimals of at most 15 significant digits are different doubles, and
// rounding to a double keeps order.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "structured/grammar.h"
#include "structured/json_schema_internal.h"

namespace kvserve::structured::json_schema_internal {
namespace {

inline constexpr int kMaxSignificantDigits = 15;

// A non-negative decimal: its whole part and its fraction digits, without trailing zeros.
struct Decimal {
  int64_t whole = 0;
  std::string fraction;
};

// |v| as the shortest decimal that reads back as v; nullopt when its whole part is over `cap`.
std::optional<Decimal> DecimalOf(double v, int64_t cap) {
  const std::string text = fmt::format("{}", std::abs(v));  // "0.1", "12", "1e+20", "1.5e-07"
  const size_t e = text.find_first_of("eE");
  const std::string mantissa = text.substr(0, e);
  const int exponent = e == std::string::npos ? 0 : std::atoi(text.c_str() + e + 1);
  std::string digits;
  int point = -1;  // digits before the decimal point
  for (char c : mantissa) {
    if (c == '.') {
      point = static_cast<int>(digits.size());
    } else {
      digits.push_back(c);
    }
  }
  if (point < 0) point = static_cast<int>(digits.size());
  point += exponent;
  std::string whole, fraction;
  if (point <= 0) {
    fraction = std::string(static_cast<size_t>(-point), '0') + digits;
  } else if (point >= static_cast<int>(digits.size())) {
    whole = digits + std::string(static_cast<size_t>(point) - digits.size(), '0');
  } else {
    whole = digits.substr(0, static_cast<size_t>(point));
    fraction = digits.substr(static_cast<size_t>(point));
  }
  whole.erase(0, whole.find_first_not_of('0'));
  while (!fraction.empty() && fraction.back() == '0') fraction.pop_back();
  if (whole.size() > 18) return std::nullopt;
  Decimal out;
  out.whole = whole.empty() ? 0 : std::stoll(whole);
  if (out.whole > cap) return std::nullopt;
  out.fraction = std::move(fraction);
  return out;
}

// One side's constraint on the fraction digits still to come: the digits w must satisfy
// 0.w >= 0.rest (lower) or 0.w <= 0.rest (upper), strictly where exclusive. Off: no constraint.
struct FractionBound {
  bool on = false;
  std::string rest;  // never ends in '0'
  bool exclusive = false;

  FractionBound Tail() const { return {on, rest.empty() ? rest : rest.substr(1), exclusive}; }
};

// Rules for strings of fraction digits between two FractionBounds, memoised by their state.
class FractionDigits {
 public:
  explicit FractionDigits(GrammarBuilder* b) : b_(b) {}

  // Digit strings w of length [nonempty ? 1 : 0, n] with lo <= 0.w <= hi; -1 when none.
  int Rule(FractionBound lo, FractionBound hi, int n, bool nonempty) {
    if (lo.on && lo.rest.empty() && !lo.exclusive) lo.on = false;  // 0.w >= 0 always holds
    if (!lo.on) lo = {};
    if (!hi.on) hi = {};
    const auto key =
        std::make_tuple(lo.on, lo.rest, lo.exclusive, hi.on, hi.rest, hi.exclusive, n, nonempty);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    std::vector<Sequence> alts;
    // w empty is 0: below any lower bound still on; above an upper one only if exclusive at 0.
    const bool empty_ok = !nonempty && !lo.on && (!hi.on || !hi.exclusive || !hi.rest.empty());
    if (empty_ok) alts.push_back({});
    if (n > 0) {
      // The next digit d: below lo_c or above hi_c leaves the bounds; strictly between them frees
      // the rest; equal to one keeps that side's constraint on the remaining digits.
      const int lo_c = lo.on ? (lo.rest.empty() ? 0 : lo.rest[0] - '0') : -1;
      const int hi_c = hi.on ? (hi.rest.empty() ? 0 : hi.rest[0] - '0') : 10;
      if (lo_c + 1 <= hi_c - 1) {
        const auto from = static_cast<uint8_t>('0' + lo_c + 1);
        const auto to = static_cast<uint8_t>('0' + hi_c - 1);
        alts.push_back({b_->Bytes(ByteSet::Of(from, to)), Sym::Ref(AnyDigits(n - 1))});
      }
      auto tight = [&](int d, const FractionBound& l, const FractionBound& h) {
        const int rest = Rule(l, h, n - 1, false);
        if (rest >= 0) {
          alts.push_back(
              {b_->Bytes(ByteSet::Single(static_cast<uint8_t>('0' + d))), Sym::Ref(rest)});
        }
      };
      if (lo.on && hi.on && lo_c == hi_c) {
        tight(lo_c, lo.Tail(), hi.Tail());
      } else {
        if (lo.on && lo_c < hi_c) tight(lo_c, lo.Tail(), {});
        if (hi.on && hi_c > lo_c) tight(hi_c, {}, hi.Tail());
      }
    }
    const int rule = alts.empty() ? -1 : b_->Alternatives("bounded-frac", std::move(alts));
    memo_.emplace(key, rule);
    return rule;
  }

  // "." and digits between the bounds; -1 when none.
  int Fraction(const FractionBound& lo, const FractionBound& hi, int n) {
    const int digits = Rule(lo, hi, n, true);
    if (digits < 0) return -1;
    Sequence s = b_->Literal(".");
    s.push_back(Sym::Ref(digits));
    return b_->Alternatives("bounded-fraction", {std::move(s)});
  }

  // Up to n more digits, any.
  int AnyDigits(int n) {
    if (auto it = any_.find(n); it != any_.end()) return it->second;
    const int rule = b_->Repeat("frac-digits", {b_->Bytes(ByteSet::Of('0', '9'))}, 0, n);
    any_.emplace(n, rule);
    return rule;
  }

 private:
  using Sym = GrammarBuilder;
  using Key = std::tuple<bool, std::string, bool, bool, std::string, bool, int, bool>;
  GrammarBuilder* b_;
  std::map<Key, int> memo_;
  std::map<int, int> any_;
};

int WholeDigits(int64_t v) { return static_cast<int>(std::to_string(v).size()); }

// Appends `sign` W.F for the magnitudes W.F in [lo, hi] (bounds exclusive where said; hi nullopt:
// any whole part up to `cap`, any fraction), with at most `max_fraction_digits` fraction digits.
void AppendMagnitudes(const Decimal& lo, bool lo_exclusive, const std::optional<Decimal>& hi,
                      bool hi_exclusive, int64_t cap, int max_fraction_digits,
                      std::string_view sign, GrammarBuilder* b, std::vector<Sequence>* alts) {
  const int64_t hi_whole = hi ? hi->whole : cap;
  if (lo.whole > hi_whole) return;
  const int n = std::min(max_fraction_digits, kMaxSignificantDigits - WholeDigits(hi_whole));
  if (n <= 0) return;
  FractionDigits digits(b);
  const FractionBound lower{true, lo.fraction, lo_exclusive};
  const FractionBound upper{hi.has_value(), hi ? hi->fraction : std::string(), hi_exclusive};
  std::vector<Sequence> out;
  auto add = [&](int64_t whole, int fraction) {
    if (fraction < 0) return;
    Sequence s = b->Literal(std::to_string(whole));
    s.push_back(GrammarBuilder::Ref(fraction));
    out.push_back(std::move(s));
  };
  if (lo.whole == hi_whole) {
    add(lo.whole, digits.Fraction(lower, upper, n));
  } else {
    add(lo.whole, digits.Fraction(lower, {}, n));
    const int64_t last_free = hi ? hi_whole - 1 : hi_whole;
    if (lo.whole + 1 <= last_free) {
      const int any = digits.Fraction({}, {}, n);
      AppendIntegerRange(lo.whole + 1, last_free, any, b, &out);
    }
    if (hi) add(hi_whole, digits.Fraction({}, upper, n));
  }
  for (Sequence& s : out) {
    if (!sign.empty()) {
      const Sequence prefix = b->Literal(sign);
      s.insert(s.begin(), prefix.begin(), prefix.end());
    }
    alts->push_back(std::move(s));
  }
}

}  // namespace

void AppendFractionalRange(const NumberBound& lower, const NumberBound& upper,
                           int max_fraction_digits, int64_t cap, GrammarBuilder* b,
                           std::vector<Sequence>* alts) {
  // One side of zero: magnitudes from the bound nearer zero when it lies on that side (else
  // from zero, which the negative side excludes: no "-0.0") to the farther bound. Non-negative
  // numbers: [max(lower, 0), upper]; negative ones -M: M in [max(-upper, 0), -lower], M > 0.
  const auto append_side = [&](const NumberBound& nearer, const NumberBound& farther,
                               bool negative) {
    const auto on_side = [&](double v) { return negative ? v < 0 : v >= 0; };
    if (farther.present && !on_side(farther.value)) return;
    std::optional<Decimal> lo = Decimal{};
    bool lo_exclusive = negative;
    if (nearer.present && on_side(nearer.value)) {
      lo = DecimalOf(nearer.value, cap);
      lo_exclusive = nearer.exclusive;
    }
    const std::optional<Decimal> hi =
        farther.present ? DecimalOf(farther.value, cap) : std::optional<Decimal>();
    if (lo) {
      AppendMagnitudes(*lo, lo_exclusive, hi, farther.exclusive, cap, max_fraction_digits,
                       negative ? "-" : "", b, alts);
    }
  };
  append_side(lower, upper, /*negative=*/false);
  append_side(upper, lower, /*negative=*/true);
}

}  // namespace kvserve::structured::json_schema_internal
