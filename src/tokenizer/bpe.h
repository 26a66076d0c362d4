// BpeModel: byte-level BPE (GPT-2 style). A word's bytes are mapped to the GPT-2 byte↔unicode
// alphabet (so the vocabulary holds printable strings such as "Ġthe"), then the adjacent pair
// with the lowest merge rank is merged, repeatedly.
//
// Contract: Create() parses the "left right" merges once; afterwards EncodeWord() is const and
// thread-safe. Merges whose result is not in the vocabulary are ignored.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/status.h"
#include "tokenizer/vocab.h"

namespace kvserve {

// The GPT-2 byte → code point table: printable Latin-1 bytes map to themselves, the others to
// U+0100 upwards in byte order.
char32_t ByteToUnicode(uint8_t byte);
// Inverse of ByteToUnicode; -1 for a code point outside the table.
int UnicodeToByte(char32_t cp);
// The byte-level form of raw bytes ("Ġ" for a space, ...), as stored in the vocabulary.
std::string BytesToByteLevel(std::string_view bytes);
// Raw bytes of a byte-level string; code points outside the table are kept as UTF-8.
std::string ByteLevelToBytes(std::string_view text);

class BpeModel {
 public:
  static Result<BpeModel> Create(const Vocab* vocab, const std::vector<std::string>& merges,
                                 TokenId unk_id);

  // Appends the tokens of one pre-tokenized word (raw bytes) to `out`. With ignore_merges a word
  // that is itself a vocabulary entry becomes that single token (Llama 3).
  void EncodeWord(std::string_view word, bool ignore_merges, std::vector<TokenId>* out) const;

 private:
  struct Merge {
    int32_t rank;
    TokenId result;
  };
  // NOTE: the merges are an open-addressed array keyed by the pair (ids are >= 0, so the key
  // kEmpty never occurs), at most half full: one slot per lookup, no node per merge.
  struct MergeSlot {
    uint64_t key;
    Merge merge;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t PairKey(TokenId a, TokenId b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // The slot holding `key`, or the empty slot where it would go.
  size_t SlotOf(uint64_t key) const {
    const size_t mask = merges_.size() - 1;
    size_t i = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
    while (merges_[i].key != key && merges_[i].key != kEmpty) i = (i + 1) & mask;
    return i;
  }
  const Merge* FindMerge(TokenId a, TokenId b) const;

  const Vocab* vocab_ = nullptr;
  TokenId unk_id_ = -1;
  std::vector<TokenId> byte_ids_;  // [256] id of each byte's single-character token, or -1
  std::vector<MergeSlot> merges_;
};

}  // namespace kvserve
