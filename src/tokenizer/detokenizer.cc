#include "tokenizer/detokenizer.h"

#include "tokenizer/unicode.h"

namespace kvserve {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tok, bool skip_special,
                                           bool strip_leading_space)
    : tok_(&tok),
      skip_special_(skip_special),
      strip_pending_(strip_leading_space && tok.strips_leading_space()) {}

std::string StreamingDetokenizer::Push(TokenId id) {
  if (skip_special_ && tok_->IsSpecial(id)) return {};
  std::string piece = tok_->TokenToPiece(id);
  if (piece.empty()) return {};
  if (strip_pending_) {
    strip_pending_ = false;
    if (pending_.empty() && piece.front() == ' ') piece.erase(0, 1);
  }
  pending_ += piece;
  const size_t complete = CompleteUtf8Prefix(pending_);
  std::string out = SanitizeUtf8(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return out;
}

std::string StreamingDetokenizer::Flush() {
  std::string out = SanitizeUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace kvserve
