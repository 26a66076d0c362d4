#include "structured/unique_items.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "tokenizer/unicode.h"  // AppendUtf8

namespace kvserve::structured {

// A trial of CompletesDuplicate: the tracker's frames read-only, with what the trial bytes
// change on top of them.
struct TrialSink {
  using Tracker = UniqueItemsTracker;
  const Tracker* tracker;
  size_t depth;                        // the tracker's frames still open
  std::vector<std::string> extra;      // keys the trial gave frames_[depth - 1]
  std::vector<Tracker::Frame> opened;  // frames the trial opened (items as a list in parts)

  bool OnValue(const std::string& key) {
    if (!opened.empty()) {
      Tracker::Frame& f = opened.back();
      if (f.unique && std::find(f.parts.begin(), f.parts.end(), key) != f.parts.end()) {
        return false;
      }
      if (f.unique || f.captured) f.parts.push_back(key);
      return true;
    }
    if (depth == 0) return true;
    const Tracker::Frame& f = tracker->frames_[depth - 1];
    if (!f.unique && !f.captured) return true;
    if (f.unique &&
        (f.items.contains(key) || std::find(extra.begin(), extra.end(), key) != extra.end())) {
      return false;
    }
    extra.push_back(key);
    return true;
  }
  // An array the trial opens counts as unique (see CompletesDuplicate).
  void OnOpen(bool array, bool /*unique*/) {
    bool captured = false;
    if (!opened.empty()) {
      captured = opened.back().unique || opened.back().captured;
    } else if (depth > 0) {
      captured = tracker->frames_[depth - 1].unique || tracker->frames_[depth - 1].captured;
    }
    opened.push_back(Tracker::Frame{array, array, captured, {}, {}});
  }
  bool OnClose() {
    if (!opened.empty()) {
      Tracker::Frame f = std::move(opened.back());
      opened.pop_back();
      if (!f.captured) return true;
      return OnValue(Tracker::ContainerKey(f.array, std::move(f.parts)));
    }
    if (depth == 0) return true;
    const Tracker::Frame& f = tracker->frames_[depth - 1];
    std::vector<std::string> parts;
    if (f.captured) {
      parts = f.parts;
      parts.insert(parts.end(), extra.begin(), extra.end());
    }
    --depth;
    extra.clear();
    if (!f.captured) return true;
    return OnValue(Tracker::ContainerKey(f.array, std::move(parts)));
  }
};

namespace {

bool IsHexDigit(uint8_t b) {
  return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}
uint32_t HexValue(uint8_t b) {
  if (b <= '9') return b - '0';
  return (b | 0x20) - 'a' + 10;
}
bool IsNumberByte(uint8_t b) {
  return (b >= '0' && b <= '9') || b == '-' || b == '+' || b == '.' || b == 'e' || b == 'E';
}
bool IsWordByte(uint8_t b) {
  return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || b == '_';
}

// A surrogate code unit on its own, as the three bytes UTF-8's scheme gives it (not valid
// UTF-8, but distinct from every character, as the unpaired unit is in JSON).
void AppendLoneSurrogate(uint32_t unit, std::string* out) {
  out->push_back(static_cast<char>(0xE0 | (unit >> 12)));
  out->push_back(static_cast<char>(0x80 | ((unit >> 6) & 0x3F)));
  out->push_back(static_cast<char>(0x80 | (unit & 0x3F)));
}

void FlushHigh(uint32_t* high, std::string* text) {
  if (*high != 0) AppendLoneSurrogate(*high, text);
  *high = 0;
}

// A number written as an integer literal (digits and a minus sign): keyed as it is written.
bool IsIntegerLiteral(std::string_view t) {
  return t.find_first_not_of("-0123456789") == std::string_view::npos;
}

}  // namespace

void UniqueItemsTracker::AppendCodeUnit(Lexer* lex, uint32_t unit) {
  if (unit >= 0xD800 && unit <= 0xDBFF) {
    FlushHigh(&lex->high, &lex->text);
    lex->high = unit;
  } else if (unit >= 0xDC00 && unit <= 0xDFFF && lex->high != 0) {
    const char32_t cp = 0x10000 + ((lex->high - 0xD800) << 10) + (unit - 0xDC00);
    lex->high = 0;
    AppendUtf8(cp, &lex->text);
  } else {
    FlushHigh(&lex->high, &lex->text);
    if (unit >= 0xD800 && unit <= 0xDFFF) {
      AppendLoneSurrogate(unit, &lex->text);
    } else {
      AppendUtf8(static_cast<char32_t>(unit), &lex->text);
    }
  }
}

std::string UniqueItemsTracker::Key(const Lexer& lex) {
  if (lex.mode == Mode::kString) return "s" + lex.text;
  if (lex.mode == Mode::kWord) return "w" + lex.text;
  // Numbers by value as Python's json and == see them (MaskBench's and most validators'
  // reading): an integer literal is an exact integer, anything else a double, and the two meet
  // where the double is integral with that exact value (1, 1.0 and 1e0 meet; 2^53 + 1 and
  // 9007199254740993.0, a double of 2^53, do not). Integers key as their digits; other doubles
  // as their shortest form.
  const std::string& t = lex.text;
  if (IsIntegerLiteral(t)) {
    return t == "-0" ? "n0" : "n" + t;
  }
  const double d = std::strtod(t.c_str(), nullptr);
  if (std::isfinite(d) && d == std::trunc(d)) {
    return d == 0 ? "n0" : fmt::format("n{:.0f}", d);  // exact: a double's whole value
  }
  return fmt::format("n{}", d);
}

std::string UniqueItemsTracker::ContainerKey(bool array, std::vector<std::string> parts) {
  std::string key(1, array ? 'a' : 'o');
  if (!array) {
    std::vector<std::pair<std::string, std::string>> members;
    for (size_t i = 0; i + 1 < parts.size(); i += 2) {
      members.emplace_back(std::move(parts[i]), std::move(parts[i + 1]));
    }
    std::sort(members.begin(), members.end());
    parts.clear();
    for (auto& [k, v] : members) {
      parts.push_back(std::move(k));
      parts.push_back(std::move(v));
    }
  }
  for (const std::string& part : parts) key += fmt::format("{}:{}", part.size(), part);
  return key;
}

template <class Sink>
bool UniqueItemsTracker::Complete(Lexer* lex, Sink* sink) {
  if (lex->mode == Mode::kString) FlushHigh(&lex->high, &lex->text);
  const bool ok = sink->OnValue(Key(*lex));
  lex->mode = Mode::kStructure;
  lex->text.clear();
  return ok;
}

template <class Sink>
bool UniqueItemsTracker::Step(Lexer* lex, uint8_t byte, bool opens_unique, Sink* sink) {
  switch (lex->mode) {
    case Mode::kString:
      if (byte == '"') return Complete(lex, sink);
      if (byte == '\\') {
        lex->mode = Mode::kEscape;
      } else {
        FlushHigh(&lex->high, &lex->text);
        lex->text.push_back(static_cast<char>(byte));
      }
      return true;
    case Mode::kEscape: {
      lex->mode = Mode::kString;
      uint32_t unit = byte;
      switch (byte) {
        case 'u':
          lex->mode = Mode::kHex;
          lex->hex = 0;
          lex->hex_digits = 0;
          return true;
        case 'b':
          unit = '\b';
          break;
        case 'f':
          unit = '\f';
          break;
        case 'n':
          unit = '\n';
          break;
        case 'r':
          unit = '\r';
          break;
        case 't':
          unit = '\t';
          break;
        default:
          break;  // '"', '\\', '/' stand for themselves
      }
      AppendCodeUnit(lex, unit);
      return true;
    }
    case Mode::kHex:
      if (!IsHexDigit(byte)) {  // not JSON; keep going as a string
        lex->mode = Mode::kString;
        return Step(lex, byte, opens_unique, sink);
      }
      lex->hex = lex->hex * 16 + HexValue(byte);
      if (++lex->hex_digits == 4) {
        lex->mode = Mode::kString;
        AppendCodeUnit(lex, lex->hex);
      }
      return true;
    case Mode::kNumber:
    case Mode::kWord: {
      if (lex->mode == Mode::kNumber ? IsNumberByte(byte) : IsWordByte(byte)) {
        lex->text.push_back(static_cast<char>(byte));
        return true;
      }
      const bool ok = Complete(lex, sink);
      return Step(lex, byte, opens_unique, sink) && ok;
    }
    case Mode::kStructure:
      break;
  }
  switch (byte) {
    case '"':
      lex->mode = Mode::kString;
      lex->text.clear();
      lex->high = 0;
      break;
    case '[':
      sink->OnOpen(true, opens_unique);
      break;
    case '{':
      sink->OnOpen(false, false);
      break;
    case ']':
    case '}':
      return sink->OnClose();
    default:
      if (byte == '-' || (byte >= '0' && byte <= '9')) {
        lex->mode = Mode::kNumber;
        lex->text.assign(1, static_cast<char>(byte));
      } else if (IsWordByte(byte)) {
        lex->mode = Mode::kWord;
        lex->text.assign(1, static_cast<char>(byte));
      }
      break;  // ',', ':', whitespace and anything outside JSON
  }
  return true;
}

bool UniqueItemsTracker::OnValue(const std::string& key) {
  if (frames_.empty()) return true;
  Frame& f = frames_.back();
  if (f.captured) f.parts.push_back(key);
  return !f.unique || f.items.insert(key).second;
}

void UniqueItemsTracker::OnOpen(bool array, bool unique) {
  const bool captured = !frames_.empty() && (frames_.back().unique || frames_.back().captured);
  frames_.push_back(Frame{array, array && unique, captured, {}, {}});
}

bool UniqueItemsTracker::OnClose() {
  if (frames_.empty()) return true;
  Frame f = std::move(frames_.back());
  frames_.pop_back();
  if (!f.captured) return true;
  return OnValue(ContainerKey(f.array, std::move(f.parts)));
}

bool UniqueItemsTracker::Feed(uint8_t byte, bool opens_unique) {
  return Step(&lex_, byte, opens_unique, this);
}

std::vector<std::string> UniqueItemsTracker::Remainders() const {
  std::vector<std::string> out;
  if (!InUniqueArray()) return out;
  // The item so far as a key prefix, and the spelling a key's rest needs (keys hold a string's
  // decoded bytes and a number's value, which a plain integer or word spells as it is keyed).
  std::string prefix;
  switch (lex_.mode) {
    case Mode::kString:
      if (lex_.high != 0) return out;
      prefix = "s" + lex_.text;
      break;
    case Mode::kNumber: {
      if (!IsIntegerLiteral(lex_.text) || lex_.text.starts_with("-0") ||
          lex_.text.starts_with("0")) {
        return out;
      }
      prefix = "n" + lex_.text;
      break;
    }
    case Mode::kWord:
      prefix = "w" + lex_.text;
      break;
    case Mode::kStructure:
      break;  // an item next: every key is a rest (its first byte below)
    default:
      return out;
  }
  for (const std::string& key : frames_.back().items) {
    if (key.size() <= prefix.size() || !key.starts_with(prefix)) continue;
    std::string rest = key.substr(prefix.size());
    if (lex_.mode == Mode::kStructure) {
      // A whole item: a string's quote, then its text; a number or word as keyed. Arrays and
      // objects ("a", "o") end only with their bracket, a '"' the check sees anyway.
      const char kind = rest[0];
      rest.erase(0, 1);
      if (kind == 's') {
        rest.insert(0, 1, '"');
      } else if (kind != 'n' && kind != 'w') {
        continue;
      }
    }
    const bool plain = std::none_of(
        rest.begin() + (lex_.mode == Mode::kStructure ? 1 : 0), rest.end(),
        [](char c) { return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20; });
    if (plain && !rest.empty()) out.push_back(std::move(rest));
  }
  return out;
}

UniqueItemsTracker::TrialOutcome UniqueItemsTracker::Trial(std::string_view bytes) const {
  Lexer lex = lex_;
  TrialSink sink{this, frames_.size(), {}, {}};
  for (const char c : bytes) {
    if (!Step(&lex, static_cast<uint8_t>(c), true, &sink)) return TrialOutcome::kDuplicate;
  }
  if (lex.mode != Mode::kNumber && lex.mode != Mode::kWord && lex.mode != Mode::kString) {
    return TrialOutcome::kFine;
  }
  // Would the item, ended here, repeat one? Asked of a copy of the sink: OnValue records.
  if (lex.mode == Mode::kString && lex.high != 0) return TrialOutcome::kFine;
  TrialSink probe = sink;
  return probe.OnValue(Key(lex)) ? TrialOutcome::kFine : TrialOutcome::kAtRisk;
}

}  // namespace kvserve::structured
