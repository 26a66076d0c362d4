#include "tokenizer/special_tokens.h"

#include <algorithm>

namespace kvserve {

SpecialTokenMatcher::SpecialTokenMatcher(const std::vector<std::string>& tokens, const Vocab& vocab)
    : by_first_byte_(256) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto id = static_cast<TokenId>(i);
    const TokenType type = vocab.type(id);
    if (tokens[i].empty()) continue;
    if (type != TokenType::kControl && type != TokenType::kUnknown &&
        type != TokenType::kUserDefined) {
      continue;
    }
    by_first_byte_[static_cast<uint8_t>(tokens[i][0])].push_back(
        {tokens[i], id, type == TokenType::kUserDefined});
  }
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [](const Candidate& a, const Candidate& b) {
      return a.text.size() > b.text.size();
    });
  }
}

std::vector<Fragment> SpecialTokenMatcher::Partition(std::string_view text,
                                                     bool parse_special) const {
  std::vector<Fragment> fragments;
  size_t raw_start = 0;
  for (size_t pos = 0; pos < text.size();) {
    const Candidate* match = nullptr;
    for (const Candidate& c : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      if ((c.always || parse_special) && text.substr(pos, c.text.size()) == c.text) {
        match = &c;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    if (pos > raw_start) fragments.push_back({text.substr(raw_start, pos - raw_start), -1});
    fragments.push_back({match->text, match->id});
    pos += match->text.size();
    raw_start = pos;
  }
  if (raw_start < text.size()) fragments.push_back({text.substr(raw_start), -1});
  return fragments;
}

}  // namespace kvserve
