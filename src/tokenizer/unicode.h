// UTF-8 helpers and Unicode NFC normalization for the tokenizers.
//
// Contract: pure functions, thread-safe. Invalid UTF-8 never crashes anything here: a byte that
// does not start a valid, shortest-form sequence (or a truncated sequence, a surrogate, a code
// point above U+10FFFF) decodes as U+FFFD and consumes exactly one byte, the same "maximal
// subpart" rule browsers and HF tokenizers use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Decodes the code point at text[pos]; sets *len_bytes to the bytes consumed (>= 1).
// REQUIRES: pos < text.size().
char32_t DecodeUtf8At(std::string_view text, size_t pos, size_t* len_bytes);
// Appends the UTF-8 encoding of `cp` (cp must be a scalar value; others append U+FFFD).
void AppendUtf8(char32_t cp, std::string* out);
std::string CodepointToUtf8(char32_t cp);
// Length of a UTF-8 sequence from its first byte (1 for invalid lead bytes).
size_t Utf8SequenceLength(uint8_t lead);
// Returns `text` with every invalid sequence replaced by U+FFFD (unchanged when valid).
std::string SanitizeUtf8(std::string_view text);
// Number of leading bytes of `text` that form complete, valid UTF-8, ignoring a trailing
// incomplete-but-so-far-valid sequence. Used by streaming detokenization.
size_t CompleteUtf8Prefix(std::string_view text);
// Splits into code points (after sanitizing).
std::vector<char32_t> DecodeUtf8(std::string_view text);

// Canonical composition (NFC) of valid UTF-8. ASCII input returns at once.
std::string NormalizeNfc(std::string_view text);

namespace unicode_data {
struct DecompositionEntry {
  char32_t cp, first, second;  // second == 0 for singleton decompositions
};
struct CombiningClassRange {
  char32_t first, last;
  uint8_t ccc;
};
struct CompositionEntry {
  char32_t first, second, composite;
};
extern const DecompositionEntry kDecompositions[];  // sorted by cp
extern const size_t kNumDecompositions;
extern const CombiningClassRange kCombiningClasses[];  // sorted, disjoint
extern const size_t kNumCombiningClasses;
extern const CompositionEntry kCompositions[];  // sorted by (first, second)
extern const size_t kNumCompositions;
}  // namespace unicode_data

}  // namespace kvserve
