// SpmModel: SentencePiece-style BPE as llama.cpp's "llama" vocabulary does it. The text is split
// into UTF-8 characters; the adjacent pair whose concatenation is the highest-scoring vocabulary
// piece is merged, repeatedly; a character with no piece falls back to its <0xXX> byte tokens.
//
// Contract: immutable after construction; Encode() is const and thread-safe. The caller has
// already applied the "▁" space replacement and the add_space_prefix rule.
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace kvserve {

class SpmModel {
 public:
  // `vocab` and `scores` must outlive the model. scores may be empty (all 0).
  SpmModel(const Vocab* vocab, const std::vector<float>* scores, TokenId unk_id)
      : vocab_(vocab), scores_(scores), unk_id_(unk_id) {}

  // Appends the tokens of `text` (valid UTF-8) to `out`.
  void Encode(std::string_view text, std::vector<TokenId>* out) const;

 private:
  float Score(TokenId id) const { return scores_->empty() ? 0.0f : (*scores_)[id]; }
  void EmitSymbol(std::string_view piece, std::vector<TokenId>* out) const;

  const Vocab* vocab_;
  const std::vector<float>* scores_;
  TokenId unk_id_;
};

}  // namespace kvserve
