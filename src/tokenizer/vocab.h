// Vocab: the token table shared by the SPM and BPE models: text → id lookups (all tokens, and
// the subset that merges may produce), token types, and the byte-fallback ids.
//
// Contract: built once from a validated TokenizerSpec, then immutable; const methods are
// thread-safe. Lookups take string_view without allocating.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_spec.h"

namespace kvserve {

class Vocab {
 public:
  explicit Vocab(const TokenizerSpec& spec);

  int size() const { return static_cast<int>(types_.size()); }
  TokenType type(TokenId id) const { return types_[id]; }
  // Any token with exactly this text, or -1.
  TokenId Find(std::string_view text) const { return Lookup(all_, text); }
  // A token that merges may produce (normal, user-defined), or -1.
  TokenId FindMergeable(std::string_view text) const { return Lookup(mergeable_, text); }
  // The <0xXX> token for `byte`, or -1 when the vocabulary has none.
  TokenId ByteToken(uint8_t byte) const { return byte_tokens_[byte]; }

 private:
  // NOTE: the text → id tables are open-addressed arrays of (hash, id) over the token texts,
  // which are kept in one buffer: loading a 200k-token vocabulary then allocates a few arrays
  // instead of a node and a string per token, and a lookup touches one slot and one text.
  struct Slot {
    uint32_t hash = 0;
    TokenId id = -1;  // -1: empty
  };
  std::string_view Text(TokenId id) const {
    return std::string_view(text_).substr(start_[id], start_[id + 1] - start_[id]);
  }
  // The slot of `text` (whose hash is `hash`) in `table`, or the empty slot where it would go.
  size_t SlotFor(const std::vector<Slot>& table, std::string_view text, size_t hash) const;
  TokenId Lookup(const std::vector<Slot>& table, std::string_view text) const;
  // Adds `id` under its text (whose hash is `hash`) unless a token with that text is there (the
  // first one wins).
  void Insert(std::vector<Slot>& table, TokenId id, size_t hash);

  std::vector<TokenType> types_;
  std::string text_;           // every token's text, in id order
  std::vector<size_t> start_;  // token i's text is text_[start_[i], start_[i + 1])
  std::vector<Slot> all_;      // power-of-two sizes, at most half full
  std::vector<Slot> mergeable_;
  std::array<TokenId, 256> byte_tokens_;
};

}  // namespace kvserve
