#include "structured/token_masker.h"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <numeric>

#include "tokenizer/tokenizer.h"

namespace kvserve::structured {

namespace {

// A state's masks are kept until this many are cached, then the cache starts over (a bound on
// memory: vocab / 8 bytes each, 19 KiB at 152k tokens).
constexpr size_t kMaxCachedMasks = 4096;
// Interned states are kept until this many, then the tables start over before the next walk
// (a bound on memory: a 1 KiB row of transitions per state, 8 MiB).
constexpr size_t kMaxInternedStates = 8192;
// A cover (TokenVocab::CoverFor) grows along a majority successor taking at least this many
// bytes, and a walk takes one only where this many bytes stay inside it from the start: fewer
// save too little of the walk to pay for the cover. A cover holds at most kMaxCoverStates
// states (a counted string's chain of states is cut there; the rest are exits).
constexpr int kMinLoopBytes = 8;
constexpr size_t kMaxCoverStates = 200;

void SetTokenBit(TokenBits* bits, TokenId t) {
  (*bits)[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (static_cast<uint32_t>(t) & 63);
}

void ClearTokenBit(TokenBits* bits, TokenId t) {
  (*bits)[static_cast<size_t>(t) >> 6] &= ~(uint64_t{1} << (static_cast<uint32_t>(t) & 63));
}

}  // namespace

std::shared_ptr<const TokenVocab> TokenVocab::FromTokenizer(const Tokenizer& tok) {
  const int n = tok.vocab_size();
  std::vector<std::string> pieces(static_cast<size_t>(n));
  std::vector<TokenId> eog, special;
  for (TokenId id = 0; id < n; ++id) {
    if (tok.IsEog(id)) {
      eog.push_back(id);
      continue;
    }
    if (tok.IsSpecial(id)) {
      special.push_back(id);
      continue;
    }
    pieces[static_cast<size_t>(id)] = tok.TokenToPiece(id);
  }
  return FromPieces(std::move(pieces), std::move(eog), std::move(special));
}

std::shared_ptr<const TokenVocab> TokenVocab::FromPieces(std::vector<std::string> pieces,
                                                         std::vector<TokenId> eog,
                                                         std::vector<TokenId> special) {
  auto v = std::shared_ptr<TokenVocab>(new TokenVocab());
  v->pieces_ = std::move(pieces);
  v->eog_mask_.assign(v->pieces_.size(), 0);
  std::vector<uint8_t> excluded(v->pieces_.size(), 0);
  for (TokenId id : eog) {
    if (id < 0 || static_cast<size_t>(id) >= v->pieces_.size()) continue;
    v->eog_.push_back(id);
    v->eog_mask_[static_cast<size_t>(id)] = 1;
    excluded[static_cast<size_t>(id)] = 1;
  }
  for (TokenId id : special) {
    if (id >= 0 && static_cast<size_t>(id) < v->pieces_.size())
      excluded[static_cast<size_t>(id)] = 1;
  }
  v->BuildTrie(excluded);
  const size_t words = (v->pieces_.size() + 63) / 64;
  for (TokenBits* bits : {&v->quote_tokens_, &v->close_tokens_, &v->ender_tokens_}) {
    bits->assign(words, 0);
  }
  for (size_t i = 0; i < v->pieces_.size(); ++i) {
    if (excluded[i]) continue;
    const std::string& piece = v->pieces_[i];
    const uint64_t bit = uint64_t{1} << (i & 63);
    if (piece.find('"') != std::string::npos) v->quote_tokens_[i >> 6] |= bit;
    if (piece.find_first_of("]}") != std::string::npos) v->close_tokens_[i >> 6] |= bit;
    const size_t open = piece.find('[');
    if (open != std::string::npos && piece.find(',', open) != std::string::npos) {
      v->open_list_tokens_.push_back(static_cast<TokenId>(i));
    }
    if (piece.find_first_of("\"]}, \t\n\r") != std::string::npos) v->ender_tokens_[i >> 6] |= bit;
  }
  return v;
}

int32_t TokenVocab::Child(int32_t node, uint8_t byte) const {
  const int32_t end = nodes_[static_cast<size_t>(node)].end;
  for (int32_t child = node + 1; child < end; child = nodes_[static_cast<size_t>(child)].end) {
    if (nodes_[static_cast<size_t>(child)].byte == byte) return child;
  }
  return -1;
}

std::vector<TokenId> TokenVocab::LongestMatch(std::string_view bytes, int max_tokens) const {
  std::vector<TokenId> out;
  size_t pos = 0;
  while (pos < bytes.size() && static_cast<int>(out.size()) < max_tokens) {
    int32_t node = 0;
    TokenId best = -1;
    size_t best_len = 0;
    for (size_t d = 0; pos + d < bytes.size(); ++d) {
      node = Child(node, static_cast<uint8_t>(bytes[pos + d]));
      if (node < 0) break;
      const Node& n = nodes_[static_cast<size_t>(node)];
      if (n.tokens_end > n.tokens_begin) {
        best = token_ids_[static_cast<size_t>(n.tokens_begin)];
        best_len = d + 1;
      }
    }
    if (best < 0) break;
    out.push_back(best);
    pos += best_len;
  }
  return out;
}

std::span<const TokenId> TokenVocab::TokensSpelling(std::string_view bytes) const {
  int32_t node = 0;
  for (const char c : bytes) {
    node = Child(node, static_cast<uint8_t>(c));
    if (node < 0) return {};
  }
  if (node == 0) return {};
  return node_tokens(nodes_[static_cast<size_t>(node)]);
}

void TokenVocab::BuildTrie(const std::vector<uint8_t>& excluded) {
  std::vector<TokenId> order;
  for (size_t i = 0; i < pieces_.size(); ++i) {
    if (!excluded[i] && !pieces_[i].empty()) order.push_back(static_cast<TokenId>(i));
  }
  std::sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
    const std::string& pa = pieces_[static_cast<size_t>(a)];
    const std::string& pb = pieces_[static_cast<size_t>(b)];
    return pa != pb ? pa < pb : a < b;
  });
  // Sorted pieces give the trie in preorder: a new node per byte past the common prefix with
  // the previous piece. `open` holds the node index of each depth on the current path.
  nodes_.clear();
  token_ids_.clear();
  nodes_.push_back(Node{});  // root
  std::vector<int32_t> open{0};
  std::string prev;
  for (TokenId id : order) {
    const std::string& p = pieces_[static_cast<size_t>(id)];
    size_t common = 0;
    while (common < p.size() && common < prev.size() && p[common] == prev[common]) ++common;
    // Close the nodes deeper than the common prefix.
    while (open.size() > common + 1) {
      nodes_[static_cast<size_t>(open.back())].end = static_cast<int32_t>(nodes_.size());
      open.pop_back();
    }
    for (size_t d = common; d < p.size(); ++d) {
      Node n;
      n.byte = static_cast<uint8_t>(p[d]);
      n.depth = static_cast<uint16_t>(d + 1);
      n.tokens_begin = n.tokens_end = static_cast<int32_t>(token_ids_.size());
      nodes_.push_back(n);
      open.push_back(static_cast<int32_t>(nodes_.size()) - 1);
    }
    Node& leaf = nodes_[static_cast<size_t>(open.back())];
    // Tokens with the same bytes are adjacent in `order`, so a node's tokens are contiguous.
    token_ids_.push_back(id);
    leaf.tokens_end = static_cast<int32_t>(token_ids_.size());
    max_depth_ = std::max(max_depth_, static_cast<int>(p.size()));
    prev = p;
  }
  while (!open.empty()) {
    nodes_[static_cast<size_t>(open.back())].end = static_cast<int32_t>(nodes_.size());
    open.pop_back();
  }
}

size_t TokenVocab::CoverKeyHash::operator()(const std::vector<int16_t>& next) const {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ next.size();
  for (int16_t v : next) h = (h ^ static_cast<uint16_t>(v)) * 0x100000001B3ull;
  return static_cast<size_t>(h ^ (h >> 29));
}

std::shared_ptr<const TokenVocab::LoopCover> TokenVocab::CoverFor(
    std::span<const int16_t> next) const {
  std::vector<int16_t> key(next.begin(), next.end());
  {
    std::lock_guard<std::mutex> lock(covers_mu_);
    if (auto it = covers_.find(key); it != covers_.end()) return it->second;
  }
  // One preorder pass over the part of the trie inside the set: `at` holds the set state of
  // each depth on the current path; an exit or a refused byte is not entered.
  auto cover = std::make_shared<LoopCover>();
  cover->next = key;
  cover->tokens.assign((pieces_.size() + 63) / 64, 0);
  std::vector<int16_t> at(static_cast<size_t>(max_depth_) + 1, 0);
  for (size_t i = 1; i < nodes_.size();) {
    const Node& n = nodes_[i];
    const int16_t from = at[n.depth - 1u];
    const int16_t to = next[static_cast<size_t>(from) * 256 + n.byte];
    if (to < 0) {
      if (to == kCoverExit) {
        cover->exits.push_back(static_cast<int32_t>(i));
        cover->exit_from.push_back(from);
      }
      i = static_cast<size_t>(n.end);
      continue;
    }
    at[n.depth] = to;
    for (TokenId t : node_tokens(n)) SetTokenBit(&cover->tokens, t);
    ++i;
  }
  const size_t bytes = 2 * key.size() * sizeof(int16_t) + cover->tokens.size() * sizeof(uint64_t) +
                       cover->exits.size() * (sizeof(int32_t) + sizeof(int16_t));
  std::lock_guard<std::mutex> lock(covers_mu_);
  if (cover_bytes_ + bytes > kMaxCoverBytes) {  // start over (maskers keep the covers they hold)
    covers_.clear();
    cover_bytes_ = 0;
  }
  auto [it, inserted] = covers_.try_emplace(std::move(key), std::move(cover));
  if (inserted) cover_bytes_ += bytes;
  return it->second;
}

size_t TokenMasker::StateHash::operator()(const State& s) const {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  for (int32_t v : s) h = (h ^ static_cast<uint32_t>(v)) * 0x100000001B3ull;
  return static_cast<size_t>(h ^ (h >> 29));
}

TokenMasker::TokenMasker(Grammar grammar, std::shared_ptr<const TokenVocab> vocab, Trigger trigger)
    : grammar_(std::move(grammar)),
      vocab_(std::move(vocab)),
      trigger_(std::move(trigger)),
      arena_(&grammar_) {
  ids_.resize(static_cast<size_t>(vocab_->max_depth()) + 1);
  ResetStatesLocked();
}

State TokenMasker::Initial() {
  std::lock_guard<std::mutex> lock(mu_);
  return arena_.Initial();
}

bool TokenMasker::Accept(State* state, TokenId token) {
  if (token < 0 || token >= vocab_->size()) {
    state->clear();
    return false;
  }
  if (vocab_->is_eog(token)) {
    if (StackArena::CanEnd(*state)) return true;
    state->clear();
    return false;
  }
  const std::string& piece = vocab_->piece(token);
  if (piece.empty()) {  // special: never part of a structure
    state->clear();
    return false;
  }
  return AcceptBytes(state, piece);
}

bool TokenMasker::AcceptBytes(State* state, std::string_view bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return arena_.AdvanceBytes(state, bytes);
}

void TokenMasker::ResetStatesLocked() {
  state_ids_.clear();
  states_.clear();
  next_.clear();
  loops_.clear();
  tops_.clear();
  member_of_.clear();
  InternLocked(State{});  // kDeadState
}

int32_t TokenMasker::InternLocked(const State& state) {
  auto [it, inserted] = state_ids_.try_emplace(state, static_cast<int32_t>(states_.size()));
  if (inserted) {
    states_.push_back(&it->first);
    next_.resize(next_.size() + 256, kUnknownState);
    loops_.emplace_back();
    tops_.emplace_back();
  }
  return it->second;
}

int32_t TokenMasker::StepLocked(int32_t id, uint8_t byte) {
  const size_t slot = static_cast<size_t>(id) * 256 + byte;
  const State& state = *states_[static_cast<size_t>(id)];
  TopGroups& tops = tops_[static_cast<size_t>(id)];
  if (!tops.known) {
    by_set_.clear();  // (byte set, stack)
    for (int32_t stack : state) {
      if (stack == kAcceptStack) continue;
      by_set_.emplace_back(grammar_.symbol(arena_.top_position(stack)).index, stack);
    }
    std::sort(by_set_.begin(), by_set_.end());
    size_t groups = 0;
    for (size_t k = 0; k < by_set_.size(); ++k) {
      groups += k == 0 || by_set_[k].first != by_set_[k - 1].first;
    }
    std::vector<int32_t>& d = tops.data;
    d.assign(1 + 2 * groups + by_set_.size(), 0);
    d[0] = static_cast<int32_t>(groups);
    size_t g = 0;
    for (size_t k = 0; k < by_set_.size(); ++k) {
      if (k > 0 && by_set_[k].first != by_set_[k - 1].first) ++g;
      d[1 + 2 * g] = by_set_[k].first;
      d[2 + 2 * g] = static_cast<int32_t>(k + 1);
      d[1 + 2 * groups + k] = by_set_[k].second;
      tops.any.AddSet(grammar_.byte_set(by_set_[k].first));
    }
    tops.known = true;
  }
  int32_t to = kDeadState;
  if (tops.any.Has(byte)) {
    accepting_.clear();
    const int32_t* d = tops.data.data();
    const int32_t* stacks = d + 1 + 2 * d[0];
    int32_t begin = 0;
    for (int32_t g = 0; g < d[0]; ++g) {
      const int32_t end = d[2 + 2 * g];
      if (grammar_.byte_set(d[1 + 2 * g]).Has(byte)) {
        accepting_.insert(accepting_.end(), stacks + begin, stacks + end);
      }
      begin = end;
    }
    // A state's stacks are sorted, and so within a group: Step sees them as Advance would.
    arena_.AdvanceStacks(accepting_, &scratch_);
    if (!scratch_.empty()) to = InternLocked(scratch_);  // may move next_ and tops_
  }
  next_[slot] = to;
  return to;
}

std::pair<int32_t, int> TokenMasker::MajorityLocked(int32_t id) {
  std::array<int32_t, 256> succ;
  for (int b = 0; b < 256; ++b)
    succ[static_cast<size_t>(b)] = NextLocked(id, static_cast<uint8_t>(b));
  std::sort(succ.begin(), succ.end());
  std::pair<int32_t, int> best{kDeadState, 0};
  for (size_t i = 0; i < succ.size();) {
    size_t j = i;
    while (j < succ.size() && succ[j] == succ[i]) ++j;
    if (succ[i] != kDeadState && static_cast<int>(j - i) > best.second) {
      best = {succ[i], static_cast<int>(j - i)};
    }
    i = j;
  }
  return best;
}

// NOTE: a walk's cover is the set of states grown from its start by two kinds of step: the
// majority successor of a member when it takes at least kMinLoopBytes bytes (a string's
// characters lead from its start into the loop of its body, and the body back to itself), and
// any successor over a byte >= 0x80 (the states inside a UTF-8 character, which lead back into
// the loop). Its table, numbered in the order members were found, depends only on how these
// states step, so grammars with the same strings share one cover per vocabulary.
const TokenMasker::LoopInfo& TokenMasker::LoopLocked(int32_t id) {
  if (!loops_[static_cast<size_t>(id)].known) {
    LoopInfo info;
    info.known = true;
    std::vector<uint8_t> chained;  // [members] found as a start or a majority successor
    auto add = [&](int32_t state, bool chain) {
      if (member_of_.size() <= static_cast<size_t>(state)) member_of_.resize(states_.size(), -1);
      member_of_[static_cast<size_t>(state)] = static_cast<int16_t>(info.members.size());
      info.members.push_back(state);
      chained.push_back(chain ? 1 : 0);
    };
    auto member = [&](int32_t state) -> int16_t {
      return static_cast<size_t>(state) < member_of_.size() ? member_of_[static_cast<size_t>(state)]
                                                            : int16_t{-1};
    };
    add(id, true);
    std::vector<int16_t> table;  // [members, 256]
    for (size_t k = 0; k < info.members.size(); ++k) {
      const int32_t from = info.members[k];
      const auto [major, count] =
          chained[k] ? MajorityLocked(from) : std::pair<int32_t, int>{kDeadState, 0};
      table.resize(table.size() + 256, TokenVocab::kCoverExit);
      for (int b = 0; b < 256; ++b) {
        const int32_t to = NextLocked(from, static_cast<uint8_t>(b));
        int16_t& slot = table[k * 256 + static_cast<size_t>(b)];
        if (to == kDeadState) {
          slot = TokenVocab::kCoverDead;
        } else if (member(to) >= 0) {
          slot = member(to);
        } else if (info.members.size() < kMaxCoverStates) {
          const bool chain = to == major && count >= kMinLoopBytes;
          if (chain || b >= 0x80) {
            slot = static_cast<int16_t>(info.members.size());
            add(to, chain);
          }
        }
      }
    }
    for (int32_t m : info.members) member_of_[static_cast<size_t>(m)] = -1;
    // Worth it only where many bytes stay inside from the start.
    int inside = 0;
    for (int b = 0; b < 256; ++b) inside += table[static_cast<size_t>(b)] >= 0;
    if (inside >= kMinLoopBytes) info.cover = vocab_->CoverFor(table);
    loops_[static_cast<size_t>(id)] = std::move(info);
  }
  return loops_[static_cast<size_t>(id)];
}

int64_t TokenMasker::WalkLocked(int32_t begin, int32_t end, TokenBits* out) {
  const std::span<const TokenVocab::Node> nodes = vocab_->nodes();
  int32_t* const ids = ids_.data();  // ids_ keeps its size during a walk; next_ may grow
  const int32_t* next = next_.data();
  int64_t visited = 0;
  for (int32_t i = begin; i < end;) {
    const TokenVocab::Node& n = nodes[static_cast<size_t>(i)];
    const int32_t parent = ids[n.depth - 1u];
    int32_t id = next[static_cast<size_t>(parent) * 256 + n.byte];
    if (id == kUnknownState) {
      id = NextLocked(parent, n.byte);
      next = next_.data();
    }
    ++visited;
    if (id == kDeadState) {
      i = n.end;
      continue;
    }
    ids[n.depth] = id;
    for (TokenId t : vocab_->node_tokens(n)) SetTokenBit(out, t);
    ++i;
  }
  return visited;
}

// NOTE: the walk is the plain preorder walk of the trie with shortcuts that cannot change its
// result. (1) A node's state is its parent's interned id advanced through the memoised row, so
// only the first time a (state, byte) pair is met does the matcher run. (2) A cover
// (LoopLocked) names the state of every node on a path inside its set of states, all
// non-empty: their tokens are the cover's token set, taken in one OR. Every other node lies
// below a refused byte (not allowed, as in the plain walk) or below one exit of the cover,
// whose parent's state the cover names: walking each exit's subtree from there visits the rest
// of the trie as the plain walk would. (3) A start that is no loop itself but leads into one on
// most bytes (a string's opening quote behind it, a key that must not spell a listed name)
// borrows the loop's cover: below a first byte on which the start and the loop step to the
// same state the two walks agree. Below any other first byte on which both go on, they are
// compared again one byte further down (a key that left every listed name's spelling is back
// in the string loop); where they still disagree, the cover's tokens are cleared from the
// subtree and it is walked from our own state.
void TokenMasker::ComputeLocked(const State& state, TokenBits* out) {
  const size_t words = (static_cast<size_t>(vocab_->size()) + 63) / 64;
  out->assign(words, 0);
  if (StackArena::CanEnd(state) || state.empty()) {
    for (TokenId t : vocab_->eog()) SetTokenBit(out, t);
  }
  if (state.empty()) return;
  if (states_.size() >= kMaxInternedStates) ResetStatesLocked();
  const int32_t root = InternLocked(state);
  const auto [major, count] = MajorityLocked(root);
  const bool into_loop =
      major != root && count >= kMinLoopBytes && MajorityLocked(major).first == major;
  if (CoverWalkLocked(root, into_loop ? major : root, out)) return;
  ids_[0] = root;
  stats_.trie_nodes_visited += WalkLocked(1, static_cast<int32_t>(vocab_->nodes().size()), out);
}

bool TokenMasker::CoverWalkLocked(int32_t root, int32_t from, TokenBits* out) {
  const LoopInfo& loop = LoopLocked(from);
  if (loop.cover == nullptr) return false;
  // loops_ may grow during the walk: hold the cover and the members by value.
  const std::shared_ptr<const TokenVocab::LoopCover> cover = loop.cover;
  const std::vector<int32_t> members = loop.members;
  for (size_t w = 0; w < out->size(); ++w) (*out)[w] |= cover->tokens[w];
  const std::span<const TokenVocab::Node> nodes = vocab_->nodes();
  const std::vector<int16_t>& table = cover->next;
  int64_t visited = 0;
  size_t e = 0;  // the next exit, in preorder like the nodes
  // Walks the cover's exits before node `end` from the states the cover names, or skips them.
  auto exits_before = [&](int32_t end, bool walk) {
    for (; e < cover->exits.size() && cover->exits[e] < end; ++e) {
      if (!walk) continue;
      const TokenVocab::Node& n = nodes[static_cast<size_t>(cover->exits[e])];
      ids_[n.depth - 1u] = members[static_cast<size_t>(cover->exit_from[e])];
      visited += WalkLocked(cover->exits[e], n.end, out);
    }
  };
  // Where the cover's view of a subtree is not ours: clear what it set there and walk it.
  auto redo = [&](int32_t node, bool cover_set, int32_t parent_state) {
    const TokenVocab::Node& n = nodes[static_cast<size_t>(node)];
    if (cover_set) {
      for (TokenId t : vocab_->subtree_tokens(node)) ClearTokenBit(out, t);
    }
    ids_[n.depth - 1u] = parent_state;
    visited += WalkLocked(node, n.end, out);
  };
  for (int32_t child = 1; child < static_cast<int32_t>(nodes.size());
       child = nodes[static_cast<size_t>(child)].end) {
    const TokenVocab::Node& c = nodes[static_cast<size_t>(child)];
    const int32_t s1 = NextLocked(root, c.byte);
    const int16_t m1 = table[c.byte];
    if (from == root || (m1 >= 0 && members[static_cast<size_t>(m1)] == s1)) {
      exits_before(c.end, true);
      continue;
    }
    if (m1 < 0 || s1 == kDeadState) {
      exits_before(c.end, false);
      redo(child, m1 >= 0, root);
      continue;
    }
    // Both go on from c (whose tokens the cover set, rightly) but to different states; one byte
    // further down they often meet again (a key that left every listed name's spelling).
    ++visited;
    ids_[c.depth] = s1;
    for (int32_t g = child + 1; g < c.end; g = nodes[static_cast<size_t>(g)].end) {
      const uint8_t byte = nodes[static_cast<size_t>(g)].byte;
      const int32_t s2 = NextLocked(s1, byte);
      const int16_t m2 = table[static_cast<size_t>(m1) * 256 + byte];
      const bool agree = m2 >= 0 && members[static_cast<size_t>(m2)] == s2;
      exits_before(nodes[static_cast<size_t>(g)].end, agree);
      if (!agree) redo(g, m2 >= 0, s1);
    }
  }
  stats_.trie_nodes_visited += visited;
  return true;
}

const TokenBits& TokenMasker::MaskLocked(const State& state) {
  ++stats_.lookups;
  if (auto it = cache_.find(state); it != cache_.end()) return it->second;
  ++stats_.misses;
  if (cache_.size() >= kMaxCachedMasks) cache_.clear();
  TokenBits bits;
  ComputeLocked(state, &bits);
  return cache_.emplace(state, std::move(bits)).first->second;
}

void TokenMasker::Apply(const State& state, std::span<float> logits) {
  std::lock_guard<std::mutex> lock(mu_);
  const TokenBits& bits = MaskLocked(state);
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  const size_t n = std::min(logits.size(), bits.size() * 64);
  // Word by word over the refused tokens: a word refusing all 64 is one fill, a mixed one
  // costs its refused bits, an allowing one nothing.
  for (size_t w = 0; w * 64 < n; ++w) {
    const size_t base = w * 64;
    uint64_t refused = ~bits[w];
    if (n - base < 64) refused &= (uint64_t{1} << (n - base)) - 1;
    if (refused == ~uint64_t{0}) {
      std::fill_n(logits.begin() + static_cast<std::ptrdiff_t>(base), 64, kMasked);
      continue;
    }
    for (; refused != 0; refused &= refused - 1) {
      logits[base + static_cast<size_t>(std::countr_zero(refused))] = kMasked;
    }
  }
  for (size_t i = n; i < logits.size(); ++i) logits[i] = kMasked;
}

void TokenMasker::AllowedIn(const State& state, const TokenBits& filter,
                            std::vector<TokenId>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  const TokenBits& mask = MaskLocked(state);
  for (size_t w = 0; w < mask.size() && w < filter.size(); ++w) {
    for (uint64_t bits = mask[w] & filter[w]; bits != 0; bits &= bits - 1) {
      out->push_back(static_cast<TokenId>(w * 64 + static_cast<size_t>(std::countr_zero(bits))));
    }
  }
}

ByteSet TokenMasker::NextBytes(const State& state) {
  std::lock_guard<std::mutex> lock(mu_);
  return arena_.NextBytes(state);
}

bool TokenMasker::OpensUniqueArray(const State& state) {
  if (!grammar_.has_unique_arrays()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return std::any_of(state.begin(), state.end(), [this](int32_t stack) {
    return stack >= 0 && grammar_.opens_unique_array(arena_.top_position(stack));
  });
}

TokenBits TokenMasker::Allowed(const State& state) {
  std::lock_guard<std::mutex> lock(mu_);
  return MaskLocked(state);
}

std::string TokenMasker::ForcedBytes(const State& state, size_t max_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  State s = state, next;
  while (out.size() < max_bytes && !s.empty() && !StackArena::CanEnd(s)) {
    const ByteSet bytes = arena_.NextBytes(s);
    if (bytes.Count() != 1) break;
    uint8_t b = 0;
    while (!bytes.Has(b)) ++b;
    arena_.Advance(s, b, &next);
    s.swap(next);
    out.push_back(static_cast<char>(b));
  }
  return out;
}

MaskStats TokenMasker::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

int64_t TokenMasker::cached_masks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(cache_.size());
}

}  // namespace kvserve::structured
