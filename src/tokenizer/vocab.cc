#include "tokenizer/vocab.h"

#include <cstdio>

namespace kvserve {

Vocab::Vocab(const TokenizerSpec& spec) {
  const size_t n = spec.tokens.size();
  types_.resize(n, TokenType::kNormal);
  for (size_t i = 0; i < spec.types.size() && i < n; ++i) types_[i] = spec.types[i];
  byte_tokens_.fill(-1);
  all_.reserve(n);
  mergeable_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<TokenId>(i);
    const std::string& text = spec.tokens[i];
    all_.emplace(text, id);  // first occurrence wins for duplicates
    if (types_[i] == TokenType::kNormal || types_[i] == TokenType::kUserDefined) {
      mergeable_.emplace(text, id);
    }
    if (types_[i] == TokenType::kByte && text.size() == 6 && text.compare(0, 3, "<0x") == 0 &&
        text[5] == '>') {
      unsigned value = 0;
      if (std::sscanf(text.c_str() + 3, "%2X", &value) == 1 && value < 256) {
        if (byte_tokens_[value] < 0) byte_tokens_[value] = id;
      }
    }
  }
}

TokenId Vocab::Find(std::string_view text) const {
  const auto it = all_.find(text);
  return it == all_.end() ? -1 : it->second;
}

TokenId Vocab::FindMergeable(std::string_view text) const {
  const auto it = mergeable_.find(text);
  return it == mergeable_.end() ? -1 : it->second;
}

}  // namespace kvserve
