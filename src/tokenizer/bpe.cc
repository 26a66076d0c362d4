#include "tokenizer/bpe.h"

#include <algorithm>
#include <array>
#include <bit>
#include <queue>

#include "tokenizer/unicode.h"

namespace kvserve {
namespace {

struct ByteTables {
  std::array<char32_t, 256> to_cp;
  std::unordered_map<char32_t, uint8_t> to_byte;
  ByteTables() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_cp[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteTables& Tables() {
  static const ByteTables tables;
  return tables;
}

}  // namespace

char32_t ByteToUnicode(uint8_t byte) { return Tables().to_cp[byte]; }

int UnicodeToByte(char32_t cp) {
  const auto& m = Tables().to_byte;
  const auto it = m.find(cp);
  return it == m.end() ? -1 : it->second;
}

std::string BytesToByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(ByteToUnicode(static_cast<uint8_t>(c)), &out);
  return out;
}

std::string ByteLevelToBytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t len = 0;
    const char32_t cp = DecodeUtf8At(text, pos, &len);
    const int byte = UnicodeToByte(cp);
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
    } else {
      out.append(text.substr(pos, len));
    }
    pos += len;
  }
  return out;
}

Result<BpeModel> BpeModel::Create(const Vocab* vocab, const std::vector<std::string>& merges,
                                  TokenId unk_id) {
  BpeModel model;
  model.vocab_ = vocab;
  model.unk_id_ = unk_id;
  model.byte_ids_.resize(256, -1);
  for (int b = 0; b < 256; ++b) {
    model.byte_ids_[b] = vocab->Find(CodepointToUtf8(ByteToUnicode(static_cast<uint8_t>(b))));
  }
  model.merges_.assign(std::bit_ceil(std::max<size_t>(16, 2 * merges.size())),
                       MergeSlot{kEmpty, Merge{0, -1}});
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& merge = merges[rank];
    const size_t space = merge.find(' ', 1);
    if (space == std::string::npos) {
      return DataLoss("BPE merge " + std::to_string(rank) + " ('" + merge +
                      "') is not of the form 'left right'");
    }
    const std::string_view left(merge.data(), space);
    const std::string_view right(merge.data() + space + 1, merge.size() - space - 1);
    const TokenId a = vocab->Find(left);
    const TokenId b = vocab->Find(right);
    const TokenId result = vocab->Find(std::string(left) + std::string(right));
    if (a < 0 || b < 0 || result < 0) continue;
    const uint64_t key = PairKey(a, b);
    MergeSlot& slot = model.merges_[model.SlotOf(key)];
    if (slot.key == kEmpty) {  // else an earlier merge of the same pair keeps it
      slot = MergeSlot{key, Merge{static_cast<int32_t>(rank), result}};
    }
  }
  return model;
}

const BpeModel::Merge* BpeModel::FindMerge(TokenId a, TokenId b) const {
  if (merges_.empty()) return nullptr;  // not made by Create()
  const MergeSlot& slot = merges_[SlotOf(PairKey(a, b))];
  return slot.key == kEmpty ? nullptr : &slot.merge;
}

// NOTE: the merge loop keeps symbols in a linked list over the word's bytes and a min-heap of
// candidate pairs keyed by (rank, position). A popped pair is applied only if both symbols still
// carry the ids it was queued with; otherwise it is stale. Lowest rank first and leftmost among
// equal ranks is exactly HF tokenizers' order, so results match merge for merge.
void BpeModel::EncodeWord(std::string_view word, bool ignore_merges,
                          std::vector<TokenId>* out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    const TokenId whole = vocab_->Find(BytesToByteLevel(word));
    if (whole >= 0) {
      out->push_back(whole);
      return;
    }
  }
  struct Symbol {
    TokenId id;
    int prev, next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (char c : word) {
    const TokenId id = byte_ids_[static_cast<uint8_t>(c)];
    if (id < 0 && unk_id_ < 0) continue;  // no way to represent this byte
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({id < 0 ? unk_id_ : id, index - 1, index + 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    int32_t rank;
    int left;
    TokenId left_id, right_id, result;
    bool operator>(const Candidate& o) const {
      return rank > o.rank || (rank == o.rank && left > o.left);
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto try_add = [&](int left) {
    if (left < 0 || symbols[left].next < 0) return;
    const int right = symbols[left].next;
    const Merge* m = FindMerge(symbols[left].id, symbols[right].id);
    if (m != nullptr) queue.push({m->rank, left, symbols[left].id, symbols[right].id, m->result});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) try_add(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;
    Symbol& right = symbols[left.next];
    left.id = c.result;
    right.id = -2;  // dead
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    try_add(left.prev);
    try_add(c.left);
  }
  for (int i = 0; i >= 0; i = symbols[i].next) out->push_back(symbols[i].id);
}

}  // namespace kvserve
