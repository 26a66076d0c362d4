// Strings for the JSON Schema compiler (json_schema.cc): length bounds, formats and patterns.
// The declarations are in json_schema_internal.h.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/status.h"
#include "structured/grammar.h"
#include "structured/json_schema_internal.h"
#include "structured/regex.h"

namespace kvserve::structured::json_schema_internal {

using json = nlohmann::ordered_json;

namespace {

using Sym = GrammarBuilder;  // for Sym::Ref
inline constexpr int kMaxTimeFractionDigits = 6;

// A string body (the bytes between the quotes) and its length range in code points (max -1:
// unbounded).
struct Body {
  int rule = -1;
  int64_t min_len = 0, max_len = -1;
};

Symbol Lit(char c, GrammarBuilder* b) { return b->Bytes(ByteSet::Single(static_cast<uint8_t>(c))); }
Symbol Range(char lo, char hi, GrammarBuilder* b) {
  return b->Bytes(ByteSet::Of(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)));
}

// Full dates YYYY-MM-DD from 0001-01-01 to 9999-12-31, days per month, February 29 in leap
// years only (as Python's date.fromisoformat).
int DateRule(GrammarBuilder* b) {
  const Symbol d = Range('0', '9', b), nz = Range('1', '9', b);
  const Symbol zero = Lit('0', b);
  const int year = b->Alternatives(
      "year", {{zero, zero, zero, nz}, {zero, zero, nz, d}, {zero, nz, d, d}, {nz, d, d, d}});
  const int day28 = b->Alternatives(
      "day01-28", {{zero, nz}, {Lit('1', b), d}, {Lit('2', b), Range('0', '8', b)}});
  const int day30 =
      b->Alternatives("day01-30", {{Sym::Ref(day28)}, b->Literal("29"), b->Literal("30")});
  const int day31 = b->Alternatives("day01-31", {{Sym::Ref(day30)}, b->Literal("31")});
  std::vector<Sequence> month_days;
  for (const char* m : {"01", "03", "05", "07", "08", "10", "12"}) {
    Sequence s = b->Literal(m);
    s.push_back(Lit('-', b));
    s.push_back(Sym::Ref(day31));
    month_days.push_back(std::move(s));
  }
  for (const char* m : {"04", "06", "09", "11"}) {
    Sequence s = b->Literal(m);
    s.push_back(Lit('-', b));
    s.push_back(Sym::Ref(day30));
    month_days.push_back(std::move(s));
  }
  Sequence feb = b->Literal("02-");
  feb.push_back(Sym::Ref(day28));
  month_days.push_back(std::move(feb));
  const int md = b->Alternatives("month-day", std::move(month_days));
  // Leap years: YY followed by a non-zero multiple of 4, or a non-zero multiple of 4 then 00.
  std::vector<Sequence> mult4;
  for (int m = 4; m < 100; m += 4) mult4.push_back(b->Literal(fmt::format("{:02d}", m)));
  const int m4 = b->Alternatives("multiple-of-4", std::move(mult4));
  const int leap = b->Alternatives("leap-year", {{d, d, Sym::Ref(m4)}, {Sym::Ref(m4), zero, zero}});
  Sequence common = {Sym::Ref(year), Lit('-', b), Sym::Ref(md)};
  Sequence leap_day = {Sym::Ref(leap)};
  b->AppendLiteral("-02-29", &leap_day);
  return b->Alternatives("date", {std::move(common), std::move(leap_day)});
}

// RFC 3339 full-time: HH:MM:SS, up to 6 fraction digits, then Z or +HH:MM / -HH:MM.
int TimeRule(GrammarBuilder* b) {
  const Symbol d = Range('0', '9', b), six = Range('0', '5', b);
  const int hour =
      b->Alternatives("hour", {{Range('0', '1', b), d}, {Lit('2', b), Range('0', '3', b)}});
  const int frac = b->Repeat("time-frac", {d}, 1, kMaxTimeFractionDigits);
  Sequence dot_frac = {Lit('.', b), Sym::Ref(frac)};
  const int opt_frac = b->Optional("time-frac?", std::move(dot_frac));
  ByteSet pm = ByteSet::Single('+');
  pm.Add('-', '-');
  const int offset = b->Alternatives(
      "time-offset", {b->Literal("Z"), {b->Bytes(pm), Sym::Ref(hour), Lit(':', b), six, d}});
  return b->Alternatives("time", {{Sym::Ref(hour), Lit(':', b), six, d, Lit(':', b), six, d,
                                   Sym::Ref(opt_frac), Sym::Ref(offset)}});
}

// Lowercase 8-4-4-4-12 hex.
int UuidRule(GrammarBuilder* b) {
  ByteSet hex = ByteSet::Of('0', '9');
  hex.Add('a', 'f');
  const Symbol h = b->Bytes(hex);
  Sequence s;
  for (int group : {8, 4, 4, 4, 12}) {
    if (!s.empty()) s.push_back(Lit('-', b));
    for (int i = 0; i < group; ++i) s.push_back(h);
  }
  return b->Alternatives("uuid", {std::move(s)});
}

// local@domain: dot-separated words of RFC 5322 atext (1-16 characters, at most 3 words),
// then 1-3 labels of letters, digits and inner hyphens (1-16 characters) and a 2-8 letter
// top-level domain. Lengths 6 to 110; nothing needs JSON escaping.
int EmailRule(GrammarBuilder* b) {
  ByteSet alnum = ByteSet::Of('a', 'z');
  alnum.Add('A', 'Z');
  alnum.Add('0', '9');
  ByteSet atext = alnum;
  for (char c : std::string_view("!#$%&'*+/=?^_`{|}~-"))
    atext.Add(static_cast<uint8_t>(c), static_cast<uint8_t>(c));
  const int word = b->Repeat("email-word", {b->Bytes(atext)}, 1, 16);
  const int more_words = b->Repeat("email-words", {Lit('.', b), Sym::Ref(word)}, 0, 2);
  ByteSet inner = alnum;
  inner.Add('-', '-');
  const int inner_run = b->Repeat("label-inner", {b->Bytes(inner)}, 0, 14);
  const int label_tail = b->Optional("label-tail", {Sym::Ref(inner_run), b->Bytes(alnum)});
  const int label = b->Alternatives("label", {{b->Bytes(alnum), Sym::Ref(label_tail)}});
  const int labels = b->Repeat("labels", {Sym::Ref(label), Lit('.', b)}, 1, 3);
  ByteSet letter = ByteSet::Of('a', 'z');
  letter.Add('A', 'Z');
  const int tld = b->Repeat("tld", {b->Bytes(letter)}, 2, 8);
  return b->Alternatives("email", {{Sym::Ref(word), Sym::Ref(more_words), Lit('@', b),
                                    Sym::Ref(labels), Sym::Ref(tld)}});
}

// Dotted quad without leading zeros (Python's ipaddress refuses them).
int Ipv4Rule(GrammarBuilder* b) {
  const int octet = IntegerRangeRule(0, 255, b);
  Sequence s;
  for (int i = 0; i < 4; ++i) {
    if (i > 0) s.push_back(Lit('.', b));
    s.push_back(Sym::Ref(octet));
  }
  return b->Alternatives("ipv4", {std::move(s)});
}

// RFC 3986 in regex form (ASCII; a host is a reg-name or a dotted quad, no IP literal), for the
// uri and uri-reference formats. An IRI or IRI reference that is ASCII is a URI (reference), so
// these serve iri and iri-reference too: a subset of their strings, never an invalid one.
constexpr const char* kPct = "%[0-9A-Fa-f]{2}";
std::string UriPatterns(bool reference) {
  const std::string pchar = fmt::format("(?:[A-Za-z0-9\\-._~!$&'()*+,;=:@]|{})", kPct);
  const std::string segment = pchar + "*";
  const std::string segment_nz = pchar + "+";
  const std::string authority = fmt::format(
      "(?:(?:[A-Za-z0-9\\-._~!$&'()*+,;=:]|{0})*@)?(?:[A-Za-z0-9\\-._~!$&'()*+,;=]|{0})*"
      "(?::[0-9]*)?",
      kPct);
  const std::string abempty = "(?:/" + segment + ")*";
  const std::string absolute = "/(?:" + segment_nz + "(?:/" + segment + ")*)?";
  const std::string tail = "(?:\\?(?:" + pchar + "|[/?])*)?(?:#(?:" + pchar + "|[/?])*)?";
  const std::string uri = "[A-Za-z][A-Za-z0-9+.\\-]*:(?://" + authority + abempty + "|" + absolute +
                          "|" + segment_nz + "(?:/" + segment + ")*|)" + tail;
  if (!reference) return uri;
  const std::string noscheme =
      fmt::format("(?:[A-Za-z0-9\\-._~!$&'()*+,;=@]|{})+(?:/{})*", kPct, segment);
  return "(?:" + uri + ")|(?://" + authority + abempty + "|" + absolute + "|" + noscheme + "|)" +
         tail;
}

// RFC 4291 text forms as RFC 3986 writes them (IPv6address), the embedded IPv4 without leading
// zeros; no zone index.
std::string Ipv6Pattern() {
  const std::string h = "[0-9A-Fa-f]{1,4}";
  const std::string v4 =
      "(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}"
      "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  const std::string ls32 = "(?:" + h + ":" + h + "|" + v4 + ")";
  auto before = [&](int n) {  // [ *n( h16 ":" ) h16 ]
    return n < 0 ? std::string() : fmt::format("(?:(?:{0}:){{0,{1}}}{0})?", h, n);
  };
  std::vector<std::string> forms = {fmt::format("(?:{}:){{6}}{}", h, ls32),
                                    fmt::format("::(?:{}:){{5}}{}", h, ls32)};
  for (int n = 0; n <= 6; ++n) {
    const int rest = 4 - n;  // h16 ":" groups after "::" before ls32; then one h16, then none
    std::string after;
    if (rest >= 0) {
      after = fmt::format("(?:{}:){{{}}}{}", h, rest, ls32);
    } else if (rest == -1) {
      after = h;
    }
    forms.push_back(before(n) + "::" + after);
  }
  std::string out;
  for (const std::string& f : forms) out += (out.empty() ? "(?:" : "|(?:") + f + ")";
  return out;
}

// RFC 1123 host names: dot-separated labels of letters, digits and hyphens, neither first nor
// last a hyphen, the last label starting with a letter (an all-digit top-level label is not a
// host name to every checker); at most four labels of 62 characters (under the 253 limit).
constexpr const char* kHostname =
    "(?:[A-Za-z0-9](?:[A-Za-z0-9\\-]{0,60}[A-Za-z0-9])?\\.){0,3}"
    "[A-Za-z](?:[A-Za-z0-9\\-]{0,60}[A-Za-z0-9])?";

// RFC 3339 Appendix A durations (ISO 8601), integer fields.
constexpr const char* kDuration =
    "P(?:(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)"
    "(?:T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?"
    "|T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)|[0-9]+W)";

// RFC 6901 JSON pointers (characters that need no JSON escaping).
constexpr const char* kJsonPointer = "(?:/(?:[^~/]|~[01])*)*";

}  // namespace

// The formats a JSON Schema draft defines; any other name is an annotation (draft 3's
// utc-millisec, color, style and phone too: that draft left every format optional).
bool IsDefinedFormat(const std::string& format) {
  static const std::set<std::string> kDefined = {
      "date",          "time",     "date-time",    "duration",      "email",
      "idn-email",     "hostname", "host-name",    "idn-hostname",  "ipv4",
      "ip-address",    "ipv6",     "uri",          "uri-reference", "iri",
      "iri-reference", "uuid",     "uri-template", "json-pointer",  "relative-json-pointer",
      "regex"};
  return kDefined.count(format) > 0;
}

namespace {

Result<Body> PatternBody(const std::string& pattern, const std::string& path, GrammarBuilder* b,
                         std::span<const std::string> excluded = {});

Result<Body> FormatBody(const std::string& format, const std::string& path, GrammarBuilder* b) {
  if (format == "date") return Body{DateRule(b), 10, 10};
  if (format == "time") return Body{TimeRule(b), 9, 21};
  if (format == "date-time") {
    const int rule =
        b->Alternatives("date-time", {{Sym::Ref(DateRule(b)), Lit('T', b), Sym::Ref(TimeRule(b))}});
    return Body{rule, 20, 32};
  }
  if (format == "uuid") return Body{UuidRule(b), 36, 36};
  if (format == "email" || format == "idn-email") return Body{EmailRule(b), 6, 110};
  if (format == "ipv4" || format == "ip-address") return Body{Ipv4Rule(b), 7, 15};
  std::string pattern;
  if (format == "ipv6") pattern = Ipv6Pattern();
  if (format == "hostname" || format == "host-name") pattern = kHostname;
  if (format == "uri" || format == "iri") pattern = UriPatterns(false);
  if (format == "uri-reference" || format == "iri-reference") pattern = UriPatterns(true);
  if (format == "duration") pattern = kDuration;
  if (format == "json-pointer") pattern = kJsonPointer;
  if (format == "relative-json-pointer") {
    pattern = std::string("(?:0|[1-9][0-9]*)(?:#|") + kJsonPointer + ")";
  }
  if (pattern.empty()) {
    return InvalidArgument(fmt::format(
        "unsupported format '{}' at {} (supported: date, time, date-time, duration, uuid, email, "
        "ipv4, ipv6, hostname, uri, uri-reference, iri, iri-reference, json-pointer, "
        "relative-json-pointer; names JSON Schema does not define are ignored)",
        format, path));
  }
  return PatternBody(pattern, path, b);
}

// Whether the pattern uses a class escape whose ASCII meaning (regex.h) admits more than
// Python's Unicode meaning: \D \W \S anywhere, or \d \w \s when the pattern has a negated class.
bool NeedsAsciiOnly(std::string_view pattern) {
  const bool negated_class = pattern.find("[^") != std::string_view::npos;
  for (size_t i = 0; i + 1 < pattern.size(); ++i) {
    if (pattern[i] != '\\') continue;
    const char c = pattern[++i];
    if (c == 'D' || c == 'W' || c == 'S') return true;
    if (negated_class && (c == 'd' || c == 'w' || c == 's')) return true;
  }
  return false;
}

// One alternative of a restricted copy: symbols (byte sets already in the target builder, rule
// indices still in the source grammar) and the code point count of its byte symbols (a symbol
// counts as one where its set may start a code point; at least one where it must).
struct CopiedAlt {
  Sequence seq;
  int64_t fixed_min = 0, fixed_max = 0;
};

// Lowest and highest code point count of rule r (max -1: unbounded), over productive rules.
void LengthRange(const std::vector<std::vector<CopiedAlt>>& alts,
                 const std::vector<uint8_t>& productive, int start, Body* body) {
  const size_t n = alts.size();
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
  std::vector<int64_t> lo(n, kInf);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      for (const CopiedAlt& a : alts[r]) {
        int64_t len = a.fixed_min;
        for (const Symbol& sym : a.seq) {
          if (sym.kind == Symbol::Kind::kRule) len += lo[static_cast<size_t>(sym.index)];
        }
        if (len < lo[r]) lo[r] = len, changed = true;
      }
    }
  }
  // Longest: depth-first with memo; a reachable cycle means unbounded.
  std::vector<int64_t> hi(n, -2);  // -2 unvisited, -3 on the path, -1 unbounded
  auto longest = [&](auto&& self, size_t r) -> int64_t {
    if (hi[r] == -3) return -1;
    if (hi[r] != -2) return hi[r];
    hi[r] = -3;
    int64_t best = 0;
    for (const CopiedAlt& a : alts[r]) {
      int64_t len = a.fixed_max;
      for (const Symbol& sym : a.seq) {
        if (sym.kind != Symbol::Kind::kRule) continue;
        const int64_t sub = self(self, static_cast<size_t>(sym.index));
        if (sub < 0 || len < 0) {
          len = -1;
        } else {
          len += sub;
        }
      }
      best = (len < 0 || best < 0) ? -1 : std::max(best, len);
    }
    hi[r] = best;
    return best;
  };
  (void)productive;
  body->min_len = lo[static_cast<size_t>(start)];
  body->max_len = longest(longest, static_cast<size_t>(start));
}

// Copies the built grammar `g` into *b keeping only bytes in `allowed`: alternatives that need
// another byte are dropped, then rules that can no longer finish, with theirs uses. Sets
// body->rule to the copy of the start rule (-1 when nothing is left) and its length range.
void CopyRestricted(const Grammar& g, const ByteSet& allowed, GrammarBuilder* b, Body* body) {
  const auto n = static_cast<size_t>(g.num_rules());
  std::vector<std::vector<CopiedAlt>> alts(n);  // rule indices in g's numbering
  for (size_t r = 0; r < n; ++r) {
    for (int32_t pos : g.alternatives(static_cast<int>(r))) {
      CopiedAlt a;
      bool ok = true;
      for (int32_t p = pos; g.symbol(p).kind != Symbol::Kind::kEnd && ok; ++p) {
        Symbol sym = g.symbol(p);
        // Patterns compile to plain rules; a member set (never made by regex.cc) is not copied.
        ok = sym.kind != Symbol::Kind::kSet;
        if (!ok) break;
        if (sym.kind == Symbol::Kind::kBytes) {
          ByteSet set = g.byte_set(sym.index);
          for (size_t w = 0; w < 4; ++w) set.bits[w] &= allowed.bits[w];
          ok = !set.Empty();
          if (!ok) break;
          // Bits 128-191 (bits[2]) are UTF-8 continuation bytes; the others start a code point.
          const bool starts = (set.bits[0] | set.bits[1] | set.bits[3]) != 0;
          a.fixed_max += starts ? 1 : 0;
          a.fixed_min += starts && set.bits[2] == 0 ? 1 : 0;
          sym = b->Bytes(set);
        }
        a.seq.push_back(sym);
      }
      if (ok) alts[r].push_back(std::move(a));
    }
  }
  std::vector<uint8_t> productive(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      for (const CopiedAlt& a : alts[r]) {
        bool all = true;
        for (const Symbol& sym : a.seq) {
          all = all &&
                (sym.kind != Symbol::Kind::kRule || productive[static_cast<size_t>(sym.index)]);
        }
        if (all && !productive[r]) productive[r] = 1, changed = true;
      }
    }
  }
  // Drop the alternatives that use an unproductive rule.
  for (size_t r = 0; r < n; ++r) {
    std::erase_if(alts[r], [&](const CopiedAlt& a) {
      return std::any_of(a.seq.begin(), a.seq.end(), [&](const Symbol& sym) {
        return sym.kind == Symbol::Kind::kRule && !productive[static_cast<size_t>(sym.index)];
      });
    });
  }
  const auto start = static_cast<size_t>(g.start_rule());
  body->rule = -1;
  if (!productive[start]) return;
  LengthRange(alts, productive, g.start_rule(), body);
  std::vector<int> map(n, -1);
  for (size_t r = 0; r < n; ++r) {
    if (productive[r]) map[r] = b->AddRule("pattern:" + g.rule_name(static_cast<int>(r)));
  }
  for (size_t r = 0; r < n; ++r) {
    for (CopiedAlt& a : alts[r]) {
      for (Symbol& sym : a.seq) {
        if (sym.kind == Symbol::Kind::kRule) sym.index = map[static_cast<size_t>(sym.index)];
      }
      b->AddAlternative(map[r], std::move(a.seq));
    }
  }
  body->rule = map[start];
}

// The pattern's full matches restricted to characters that need no JSON escaping (no '"',
// '\\' or control characters; ASCII only where NeedsAsciiOnly), so the JSON text between the
// quotes is the decoded string itself; none of the `excluded` strings. NotFound when the
// excluded strings are all the pattern's, ResourceExhausted past CompileRegexExcept's bounds.
Result<Body> PatternBody(const std::string& pattern, const std::string& path, GrammarBuilder* b,
                         std::span<const std::string> excluded) {
  GrammarBuilder scratch;
  Result<int> root = CompileRegexExcept(pattern, excluded, &scratch);
  if (!root.ok()) {
    if (root.status().code() != StatusCode::kInvalidArgument) return root.status();
    return InvalidArgument(fmt::format("'pattern' at {}: {}", path, root.status().message()));
  }
  Result<Grammar> g = scratch.Build(*root);
  if (!g.ok()) {
    return InvalidArgument(fmt::format("'pattern' at {}: {}", path, g.status().message()));
  }
  ByteSet allowed = ByteSet::Of(0x20, NeedsAsciiOnly(pattern) ? 0x7F : 0xFF);
  allowed.bits[0] &= ~(uint64_t{1} << '"');
  allowed.bits[1] &= ~(uint64_t{1} << ('\\' - 64));
  Body body;
  CopyRestricted(*g, allowed, b, &body);
  if (body.rule < 0 && !excluded.empty()) {
    return NotFound("regex: the strings left after the excluded ones all need JSON escaping");
  }
  if (body.rule < 0) {
    return InvalidArgument(fmt::format(
        "'pattern' at {}: '{}' only matches strings that need JSON escaping (quotes, backslashes "
        "or control characters), which pattern-constrained strings do not support",
        path, pattern));
  }
  return body;
}

// The code points of a UTF-8 string (input from the JSON parser, so well formed).
bool NeedsEscape(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

Result<int64_t> LengthKeyword(const json& schema, const char* key, const std::string& path) {
  auto it = schema.find(key);
  if (it == schema.end()) return int64_t{-1};
  if (!it->is_number() || it->get<double>() < 0 ||
      std::floor(it->get<double>()) != it->get<double>() || it->get<double>() > 1e9) {
    return InvalidArgument(fmt::format("'{}' at {} must be a non-negative integer", key, path));
  }
  return static_cast<int64_t>(it->get<double>());
}

}  // namespace

std::string SearchPattern(const std::string& pattern);

// '"' body '"' for a string schema: characters counted by minLength/maxLength, or a format, or
// a pattern (the last two only where their own lengths lie inside minLength/maxLength).
Result<int> StringRule(const json& schema, int json_char, const std::string& path,
                       GrammarBuilder* b) {
  KV_ASSIGN_OR_RETURN(const int64_t min_len, LengthKeyword(schema, "minLength", path));
  KV_ASSIGN_OR_RETURN(const int64_t max_len, LengthKeyword(schema, "maxLength", path));
  auto format = schema.find("format");
  if (format != schema.end() && format->is_string() &&
      !IsDefinedFormat(format->get<std::string>())) {
    format = schema.end();  // an annotation
  }
  const auto pattern = schema.find("pattern");
  if (format != schema.end() && pattern != schema.end()) {
    return InvalidArgument(fmt::format("'pattern' with 'format' at {} is not supported", path));
  }
  if (max_len >= 0 && std::max<int64_t>(min_len, 0) > max_len) {
    return InvalidArgument(fmt::format("'minLength' > 'maxLength' at {}", path));
  }
  Body body;
  if (format != schema.end()) {
    if (!format->is_string())
      return InvalidArgument(fmt::format("'format' at {} must be a string", path));
    KV_ASSIGN_OR_RETURN(body, FormatBody(format->get<std::string>(), path, b));
  } else if (pattern != schema.end()) {
    if (!pattern->is_string())
      return InvalidArgument(fmt::format("'pattern' at {} must be a string", path));
    KV_ASSIGN_OR_RETURN(body, PatternBody(SearchPattern(pattern->get<std::string>()), path, b));
  } else {
    body.rule = b->Repeat(fmt::format("chars{{{},{}}}", std::max<int64_t>(min_len, 0), max_len),
                          {Sym::Ref(json_char)}, std::max<int64_t>(min_len, 0), max_len);
    Sequence s = b->Literal("\"");
    s.push_back(Sym::Ref(body.rule));
    s.push_back(Lit('"', b));
    return b->Alternatives("string", {std::move(s)});
  }
  // A format or pattern keeps its own grammar: the length bounds must already hold for it.
  const bool min_ok = min_len < 0 || body.min_len >= min_len;
  const bool max_ok = max_len < 0 || (body.max_len >= 0 && body.max_len <= max_len);
  if (!min_ok || !max_ok) {
    return InvalidArgument(fmt::format(
        "'{}' with '{}' at {} is not supported: its strings are {} to {} characters long, not "
        "within the bounds (put the length into the pattern, e.g. {{1,20}})",
        format != schema.end() ? "format" : "pattern", !min_ok ? "minLength" : "maxLength", path,
        body.min_len, body.max_len < 0 ? std::string("unbounded") : std::to_string(body.max_len)));
  }
  Sequence s = b->Literal("\"");
  s.push_back(Sym::Ref(body.rule));
  s.push_back(Lit('"', b));
  return b->Alternatives("string", {std::move(s)});
}

// JSON Schema's patterns are searched, not matched whole: the strings that contain a match.
// Each top-level alternative without ^ gets any prefix, without $ any suffix ('.' is any code
// point but a newline, which a pattern string never holds unescaped anyway).
std::string SearchPattern(const std::string& pattern) {
  std::vector<std::string> alts(1);
  int depth = 0;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      alts.back() += pattern.substr(i, 2);
      ++i;
      continue;
    }
    if (in_class) {
      in_class = c != ']';
    } else if (c == '[') {
      in_class = true;
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') {  // a ']' first is a literal
        alts.back() += "[]";
        ++i;
        continue;
      }
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (c == '|' && depth == 0) {
      alts.emplace_back();
      continue;
    }
    alts.back() += c;
  }
  std::string out;
  for (const std::string& alt : alts) {
    std::string core = alt;
    const bool start = core.starts_with("^") || core.starts_with("\\A");
    if (start) core.erase(0, core[0] == '^' ? 1 : 2);
    // An anchor at the end: '$', '\Z' or '\z' not itself escaped.
    size_t slashes = 0;
    bool end = false;
    if (core.ends_with("$")) {
      for (size_t j = core.size() - 1; j-- > 0 && core[j] == '\\';) ++slashes;
      end = slashes % 2 == 0;
      if (end) core.pop_back();
    } else if (core.ends_with("\\Z") || core.ends_with("\\z")) {
      for (size_t j = core.size() - 2; j-- > 0 && core[j] == '\\';) ++slashes;
      end = slashes % 2 == 0;
      if (end) core.resize(core.size() - 2);
    }
    if (!out.empty()) out += '|';
    out += (start ? "" : ".*") + std::string("(?:") + core + ")" + (end ? "" : ".*");
  }
  return out;
}

// '"' key '"' for the keys of a patternProperties entry: strings of characters that need no
// JSON escaping that contain a match of `pattern` (JSON Schema's search semantics) where the
// pattern has no anchors, and that fully match it otherwise (a subset of the keys it matches),
// other than the `excluded` names. A key has no escapes at all, so it cannot spell an excluded
// name differently. NotFound when no key is left; ResourceExhausted past the bounds of
// CompileRegexExcept (regex.h).
Result<int> PatternKeyRule(const std::string& pattern, const std::vector<std::string>& excluded,
                           const std::string& path, GrammarBuilder* b) {
  KV_ASSIGN_OR_RETURN(const Body body, PatternBody(SearchPattern(pattern), path, b, excluded));
  Sequence s = b->Literal("\"");
  s.push_back(Sym::Ref(body.rule));
  s.push_back(Lit('"', b));
  return b->Alternatives("pattern-key", {std::move(s)});
}

namespace {

// The escapes of the characters JSON must escape ('"', '\\' and U+0000-U+001F): \" \\ \b \f
// \n \r \t and \u00XX, leaving out those of the characters in `skip`. No escape of a character
// that may stand unescaped (\/, \u0041): a key spelt that way could repeat a listed name.
int MandatoryEscapeRule(const std::set<uint32_t>& skip, GrammarBuilder* b) {
  ByteSet hex = ByteSet::Of('0', '9');
  hex.Add('a', 'f');
  hex.Add('A', 'F');
  std::vector<Sequence> alts;
  for (const auto& [c, letter] : std::vector<std::pair<uint32_t, char>>{
           {'"', '"'}, {'\\', '\\'}, {8, 'b'}, {12, 'f'}, {10, 'n'}, {13, 'r'}, {9, 't'}}) {
    if (skip.count(c) == 0) alts.push_back(b->Literal(std::string{'\\', letter}));
  }
  if (skip.empty()) {
    Sequence u = b->Literal("\\u00");
    u.insert(u.end(), {b->Bytes(ByteSet::Of('0', '1')), b->Bytes(hex)});
    alts.push_back(std::move(u));
  } else {
    for (uint32_t c = 0; c < 0x20; ++c) {
      if (skip.count(c) != 0) continue;
      Sequence u = b->Literal(fmt::format("\\u00{:x}", c >> 4));
      ByteSet low = ByteSet::Single(static_cast<uint8_t>(fmt::format("{:x}", c & 15)[0]));
      low.Add(static_cast<uint8_t>(fmt::format("{:X}", c & 15)[0]),
              static_cast<uint8_t>(fmt::format("{:X}", c & 15)[0]));
      u.push_back(b->Bytes(low));
      alts.push_back(std::move(u));
    }
  }
  return b->Alternatives("key-escape", std::move(alts));
}

}  // namespace

// A key for an extra property that differs from every listed name: a trie over the names; at
// each node, end where the prefix is not a name, follow a child, or leave the trie with any
// other character (unescaped, or an escape of a character JSON must escape) and then any more.
int ExtraKeyRule(const std::vector<std::string>& names, GrammarBuilder* b, std::string_view lead) {
  struct Node {
    std::map<uint32_t, int> next;
    bool terminal = false;
  };
  std::vector<Node> trie(1);
  for (const std::string& name : names) {
    if (!name.starts_with(lead)) continue;
    int at = 0;
    for (const char32_t cp : DecodeUtf8(std::string_view(name).substr(lead.size()))) {
      auto it = trie[static_cast<size_t>(at)].next.find(cp);
      if (it == trie[static_cast<size_t>(at)].next.end()) {
        trie.emplace_back();
        const int id = static_cast<int>(trie.size()) - 1;
        trie[static_cast<size_t>(at)].next[cp] = id;
        at = id;
      } else {
        at = it->second;
      }
    }
    trie[static_cast<size_t>(at)].terminal = true;
  }
  const std::vector<CodepointRange> forbidden = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  const int plain = b->CodepointClass(forbidden, true);
  const int any_escape = MandatoryEscapeRule({}, b);
  const int tail_char = b->Alternatives("key-char", {{Sym::Ref(plain)}, {Sym::Ref(any_escape)}});
  const int tail_chars = b->Star("key-tail", {Sym::Ref(tail_char)});
  const int tail = b->Alternatives("key-tail-end", {{Sym::Ref(tail_chars), Lit('"', b)}});
  std::vector<int> rules;
  for (size_t i = 0; i < trie.size(); ++i) rules.push_back(b->AddRule("extra-key"));
  for (size_t i = 0; i < trie.size(); ++i) {
    const Node& n = trie[i];
    if (!n.terminal) b->AddAlternative(rules[i], {Lit('"', b)});
    std::vector<CodepointRange> other = forbidden;
    std::set<uint32_t> escaped_children;  // a name goes on with a character JSON must escape
    for (const auto& [cp, child] : n.next) {
      other.push_back({cp, cp});
      if (NeedsEscape(cp)) {
        escaped_children.insert(cp);  // the key leaves such a name: its escape is not offered
        continue;
      }
      std::string utf8;
      AppendUtf8(cp, &utf8);
      Sequence s = b->Literal(utf8);
      s.push_back(Sym::Ref(rules[static_cast<size_t>(child)]));
      b->AddAlternative(rules[i], std::move(s));
    }
    b->AddAlternative(rules[i], {Sym::Ref(b->CodepointClass(other, true)), Sym::Ref(tail)});
    const int escape =
        escaped_children.empty() ? any_escape : MandatoryEscapeRule(escaped_children, b);
    b->AddAlternative(rules[i], {Sym::Ref(escape), Sym::Ref(tail)});
  }
  Sequence key = b->Literal("\"" + std::string(lead));
  key.push_back(Sym::Ref(rules[0]));
  return b->Alternatives("extra-key", {std::move(key)});
}

}  // namespace kvserve::structured::json_schema_internal
