#include "tokenizer/vocab.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <functional>

namespace kvserve {
namespace {

size_t TableSize(size_t n) { return std::bit_ceil(std::max<size_t>(16, 2 * n)); }

}  // namespace

Vocab::Vocab(const TokenizerSpec& spec) {
  const size_t n = spec.tokens.size();
  types_.resize(n, TokenType::kNormal);
  for (size_t i = 0; i < spec.types.size() && i < n; ++i) types_[i] = spec.types[i];
  byte_tokens_.fill(-1);
  size_t bytes = 0;
  for (const std::string& t : spec.tokens) bytes += t.size();
  text_.reserve(bytes);
  start_.reserve(n + 1);
  for (const std::string& t : spec.tokens) {
    start_.push_back(text_.size());
    text_ += t;
  }
  start_.push_back(text_.size());
  all_.resize(TableSize(n));
  mergeable_.resize(TableSize(n));
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<TokenId>(i);
    const std::string& text = spec.tokens[i];
    const size_t hash = std::hash<std::string_view>()(text);
    Insert(all_, id, hash);
    if (types_[i] == TokenType::kNormal || types_[i] == TokenType::kUserDefined) {
      Insert(mergeable_, id, hash);
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

size_t Vocab::SlotFor(const std::vector<Slot>& table, std::string_view text, size_t hash) const {
  const size_t mask = table.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = table[i];
    if (s.id < 0 || (s.hash == static_cast<uint32_t>(hash) && Text(s.id) == text)) return i;
  }
}

TokenId Vocab::Lookup(const std::vector<Slot>& table, std::string_view text) const {
  return table[SlotFor(table, text, std::hash<std::string_view>()(text))].id;  // -1 if empty
}

void Vocab::Insert(std::vector<Slot>& table, TokenId id, size_t hash) {
  Slot& s = table[SlotFor(table, Text(id), hash)];
  if (s.id < 0) s = Slot{static_cast<uint32_t>(hash), id};  // else the first token keeps it
}

}  // namespace kvserve
