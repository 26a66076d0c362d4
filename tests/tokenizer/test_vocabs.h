// Tiny hand-made vocabularies for the tokenizer tests.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer_spec.h"

namespace kvserve::testing {

// SPM: <unk> <s> </s>, 256 byte tokens (ids 3..258), then `pieces` with scores as given.
inline TokenizerSpec SpmSpec(const std::vector<std::pair<std::string, float>>& pieces,
                             bool add_space_prefix = false) {
  TokenizerSpec spec;
  spec.model = TokenizerModel::kSpm;
  auto add = [&](std::string t, float s, TokenType type) {
    spec.tokens.push_back(std::move(t));
    spec.scores.push_back(s);
    spec.types.push_back(type);
  };
  add("<unk>", 0, TokenType::kUnknown);
  add("<s>", 0, TokenType::kControl);
  add("</s>", 0, TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    add(buf, 0, TokenType::kByte);
  }
  for (const auto& [text, score] : pieces) add(text, score, TokenType::kNormal);
  spec.unk_id = 0, spec.bos_id = 1, spec.eos_id = 2;
  spec.add_bos = true;
  spec.add_space_prefix = add_space_prefix;
  return spec;
}

// Byte-level BPE: the 256 byte characters (id == byte value), then `extra` normal tokens, then
// `specials` as {text, type}; merges as given ("left right" in byte-level form).
inline TokenizerSpec BpeSpec(const std::vector<std::string>& merges,
                             const std::vector<std::string>& extra,
                             const std::vector<std::pair<std::string, TokenType>>& specials = {},
                             const std::string& pre = "llama-bpe") {
  TokenizerSpec spec;
  spec.model = TokenizerModel::kBpe;
  spec.pre = pre;
  spec.add_space_prefix = false;
  for (int b = 0; b < 256; ++b) {
    spec.tokens.push_back(BytesToByteLevel(std::string(1, static_cast<char>(b))));
    spec.types.push_back(TokenType::kNormal);
  }
  for (const std::string& t : extra) {
    spec.tokens.push_back(t);
    spec.types.push_back(TokenType::kNormal);
  }
  for (const auto& [t, type] : specials) {
    spec.tokens.push_back(t);
    spec.types.push_back(type);
  }
  spec.merges = merges;
  return spec;
}

}  // namespace kvserve::testing
