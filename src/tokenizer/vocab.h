// Vocab: the token table shared by the SPM and BPE models: text → id lookups (all tokens, and
// the subset that merges may produce), token types, and the byte-fallback ids.
//
// Contract: built once from a validated TokenizerSpec, then immutable; const methods are
// thread-safe. Lookups take string_view without allocating.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer_spec.h"

namespace kvserve {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};
using TokenMap = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

class Vocab {
 public:
  explicit Vocab(const TokenizerSpec& spec);

  int size() const { return static_cast<int>(types_.size()); }
  TokenType type(TokenId id) const { return types_[id]; }
  // Any token with exactly this text, or -1.
  TokenId Find(std::string_view text) const;
  // A token that merges may produce (normal, user-defined), or -1.
  TokenId FindMergeable(std::string_view text) const;
  // The <0xXX> token for `byte`, or -1 when the vocabulary has none.
  TokenId ByteToken(uint8_t byte) const { return byte_tokens_[byte]; }

 private:
  std::vector<TokenType> types_;
  TokenMap all_;
  TokenMap mergeable_;
  std::array<TokenId, 256> byte_tokens_;
};

}  // namespace kvserve
