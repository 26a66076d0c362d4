#include "tokenizer/spm.h"

#include <queue>

#include "tokenizer/unicode.h"

namespace kvserve {
namespace {

struct Symbol {
  size_t start;  // byte offset into the text
  size_t len;    // bytes; 0 once merged into its left neighbour
  int prev, next;
};

struct Bigram {
  float score;
  int left;    // symbol index
  size_t len;  // byte length of the merged text when queued (detects stale entries)
  TokenId id;
  // Highest score first; among equal scores the leftmost pair first.
  bool operator<(const Bigram& o) const {
    return score < o.score || (score == o.score && left > o.left);
  }
};

}  // namespace

// NOTE: invariant of the merge loop: every live symbol is a vocabulary piece or a single
// character; a queued bigram is stale (skipped) once either side has changed length, so each
// pop either merges two current neighbours or is discarded. Ties break to the left, as
// SentencePiece and llama.cpp do.
void SpmModel::Encode(std::string_view text, std::vector<TokenId>* out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t len = 0;
    DecodeUtf8At(text, pos, &len);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({pos, len, index - 1, index + 1});
    pos += len;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Bigram> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t len = symbols[left].len + symbols[right].len;
    const TokenId id = vocab_->FindMergeable(text.substr(symbols[left].start, len));
    if (id < 0) return;
    queue.push({Score(id), left, len, id});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));

  while (!queue.empty()) {
    const Bigram top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    if (left.len == 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (left.len + right.len != top.len) continue;  // stale
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    try_add(left.prev, top.left);
    try_add(top.left, left.next);
  }
  for (int i = 0; i >= 0; i = symbols[i].next) {
    EmitSymbol(text.substr(symbols[i].start, symbols[i].len), out);
  }
}

void SpmModel::EmitSymbol(std::string_view piece, std::vector<TokenId>* out) const {
  const TokenId id = vocab_->FindMergeable(piece);
  if (id >= 0) {
    out->push_back(id);
    return;
  }
  // Byte fallback; without <0xXX> tokens the character becomes one <unk>.
  const size_t first = out->size();
  for (char c : piece) {
    const TokenId byte_id = vocab_->ByteToken(static_cast<uint8_t>(c));
    if (byte_id < 0) {
      out->resize(first);
      if (unk_id_ >= 0) out->push_back(unk_id_);
      return;
    }
    out->push_back(byte_id);
  }
}

}  // namespace kvserve
