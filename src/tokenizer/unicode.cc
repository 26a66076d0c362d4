#include "tokenizer/unicode.h"

#include <algorithm>

namespace kvserve {
namespace {

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// Hangul syllable composition constants (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr int kSCount = kLCount * kNCount;

uint8_t CombiningClass(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* begin = unicode_data::kCombiningClasses;
  const auto* end = begin + unicode_data::kNumCombiningClasses;
  const auto* it =
      std::upper_bound(begin, end, cp, [](char32_t c, const auto& r) { return c < r.first; });
  if (it == begin) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

void DecomposeInto(char32_t cp, std::vector<char32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const int s = static_cast<int>(cp - kSBase);
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const auto* begin = unicode_data::kDecompositions;
  const auto* end = begin + unicode_data::kNumDecompositions;
  const auto* it =
      std::lower_bound(begin, end, cp, [](const auto& e, char32_t c) { return e.cp < c; });
  if (it == end || it->cp != cp) {
    out->push_back(cp);
    return;
  }
  DecomposeInto(it->first, out);
  if (it->second != 0) DecomposeInto(it->second, out);
}

// Returns the primary composite of (a, b), or 0 when there is none.
char32_t Compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto* begin = unicode_data::kCompositions;
  const auto* end = begin + unicode_data::kNumCompositions;
  const auto* it = std::lower_bound(begin, end, std::pair(a, b), [](const auto& e, auto key) {
    return std::pair(e.first, e.second) < key;
  });
  if (it == end || it->first != a || it->second != b) return 0;
  return it->composite;
}

}  // namespace

size_t Utf8SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

char32_t DecodeUtf8At(std::string_view text, size_t pos, size_t* len_bytes) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  const uint8_t b0 = s[pos];
  *len_bytes = 1;
  if (b0 < 0x80) return b0;
  size_t len = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return kReplacementChar;
  }
  if (pos + len > n) return kReplacementChar;
  for (size_t i = 1; i < len; ++i) {
    if (!IsContinuation(s[pos + i])) return kReplacementChar;
    cp = (cp << 6) | (s[pos + i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return kReplacementChar;
  *len_bytes = len;
  return cp;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = kReplacementChar;
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string CodepointToUtf8(char32_t cp) {
  std::string s;
  AppendUtf8(cp, &s);
  return s;
}

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len = 0;
    const char32_t cp = DecodeUtf8At(text, pos, &len);
    if (cp == kReplacementChar && len == 1 && static_cast<uint8_t>(text[pos]) >= 0x80) {
      AppendUtf8(kReplacementChar, &out);
    } else {
      out.append(text.substr(pos, len));
    }
    pos += len;
  }
  return out;
}

size_t CompleteUtf8Prefix(std::string_view text) {
  // Find the last lead byte among the final 3 bytes; if its sequence is incomplete but every
  // byte present can still start a valid sequence, hold those bytes back.
  const size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t i = n - back;
    const auto b0 = static_cast<uint8_t>(text[i]);
    if (IsContinuation(b0)) continue;
    const size_t need = Utf8SequenceLength(b0);
    if (b0 < 0xC2 || b0 > 0xF4 || need <= back) return n;
    if (back >= 2) {
      const auto b1 = static_cast<uint8_t>(text[i + 1]);
      const uint8_t lo = b0 == 0xE0 ? 0xA0 : b0 == 0xF0 ? 0x90 : 0x80;
      const uint8_t hi = b0 == 0xED ? 0x9F : b0 == 0xF4 ? 0x8F : 0xBF;
      if (b1 < lo || b1 > hi) return n;
    }
    return i;
  }
  return n;
}

std::vector<char32_t> DecodeUtf8(std::string_view text) {
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t len = 0;
    cps.push_back(DecodeUtf8At(text, pos, &len));
    pos += len;
  }
  return cps;
}

std::string NormalizeNfc(std::string_view text) {
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return static_cast<uint8_t>(c) < 0x80; })) {
    return std::string(text);
  }
  std::vector<char32_t> cps;
  for (char32_t cp : DecodeUtf8(text)) DecomposeInto(cp, &cps);
  // Canonical ordering: stable-sort each run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (CombiningClass(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && CombiningClass(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [](char32_t a, char32_t b) { return CombiningClass(a) < CombiningClass(b); });
    i = j;
  }
  // Canonical composition.
  std::vector<char32_t> out;
  out.reserve(cps.size());
  size_t starter = SIZE_MAX;
  int last_ccc = -1;
  for (char32_t cp : cps) {
    const int ccc = CombiningClass(cp);
    if (starter != SIZE_MAX && (last_ccc < ccc || (last_ccc == 0 && out.size() == starter + 1))) {
      if (const char32_t c = Compose(out[starter], cp); c != 0) {
        out[starter] = c;
        continue;
      }
    }
    if (ccc == 0) {
      starter = out.size();
      last_ccc = 0;
    } else {
      last_ccc = ccc;
    }
    out.push_back(cp);
  }
  std::string result;
  result.reserve(text.size());
  for (char32_t cp : out) AppendUtf8(cp, &result);
  return result;
}

}  // namespace kvserve
