// TokenMasker: which tokens a parse state allows, as a bitset over the vocabulary.
//
// NOTE: the vocabulary is a byte trie (TokenVocab), stored in preorder with each node's subtree
// end, so one pass over the array walks it depth first: a node's state is its parent's state
// advanced by the node's byte, and a node whose state is empty skips its whole subtree. A token
// is allowed where its node's state is non-empty. Special and control tokens are not in the
// trie (never allowed inside a structure); end-of-generation tokens are allowed exactly where
// the start rule may end.
//
// Masks are cached per state, by content. Stacks are hash-consed (matcher.h), so the state
// inside a JSON string, a number or a free-text field is the same ints from one character to
// the next and across requests: after the first token there, a mask is one cache lookup. The
// first visit of a state walks the trie (the miss cost, reported by the benchmarks). Two things
// keep that walk short (details in token_masker.cc): states are interned to small ids with a
// memoised transition table, so a trie node costs an array lookup rather than a matcher step;
// and a state from which most bytes lead into a loop (inside a string) takes the vocabulary's
// precomputed tokens that stay inside that loop wholesale and walks only below the bytes that
// leave it.
// The masks are exactly those of the plain walk (tests/structured/token_masker_test.cc).
//
// Contract: one TokenMasker per compiled constraint, shared by every sequence using it;
// thread-safe (a mutex serialises the arena and the caches). Token bytes come from
// Tokenizer::TokenToPiece, so byte-fallback <0xXX> tokens and byte-level BPE pieces are the raw
// bytes they stand for. TokenVocab is immutable but for its cache of covers (a mutex of its
// own): share one between threads and maskers.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "structured/grammar.h"
#include "structured/matcher.h"
#include "util/strong_id.h"

namespace kvserve {
class Tokenizer;
}

namespace kvserve::structured {

// A bitset over the vocabulary: bit t set = token t allowed.
using TokenBits = std::vector<uint64_t>;

class TokenVocab {
 public:
  static std::shared_ptr<const TokenVocab> FromTokenizer(const Tokenizer& tok);
  // For tests: explicit pieces; `eog` lists end-of-generation ids; `special` ids never allowed.
  static std::shared_ptr<const TokenVocab> FromPieces(std::vector<std::string> pieces,
                                                      std::vector<TokenId> eog,
                                                      std::vector<TokenId> special);

  int size() const { return static_cast<int>(pieces_.size()); }
  const std::string& piece(TokenId id) const { return pieces_[static_cast<size_t>(id)]; }
  bool is_eog(TokenId id) const { return eog_mask_[static_cast<size_t>(id)] != 0; }
  std::span<const TokenId> eog() const { return eog_; }

  struct Node {
    uint8_t byte = 0;
    uint16_t depth = 0;        // root: 0
    int32_t end = 0;           // index after the last node of the subtree
    // Tokens ending here: token_ids_[tokens_begin, tokens_end). Preorder makes a subtree's
    // tokens contiguous too: they start at its first node's tokens_begin (see subtree_tokens).
    int32_t tokens_begin = 0;
    int32_t tokens_end = 0;
  };
  std::span<const Node> nodes() const { return nodes_; }
  std::span<const TokenId> node_tokens(const Node& n) const {
    return std::span<const TokenId>(token_ids_)
        .subspan(static_cast<size_t>(n.tokens_begin),
                 static_cast<size_t>(n.tokens_end - n.tokens_begin));
  }
  // The tokens of the subtree of nodes()[node] (the node's own included).
  std::span<const TokenId> subtree_tokens(int32_t node) const {
    const Node& n = nodes_[static_cast<size_t>(node)];
    const size_t end = static_cast<size_t>(n.end) < nodes_.size()
                           ? static_cast<size_t>(nodes_[static_cast<size_t>(n.end)].tokens_begin)
                           : token_ids_.size();
    return std::span<const TokenId>(token_ids_)
        .subspan(static_cast<size_t>(n.tokens_begin), end - static_cast<size_t>(n.tokens_begin));
  }
  int max_depth() const { return max_depth_; }
  // Tokens whose bytes hold a '"'; a ']' or '}'; a '[' followed later by a ',' (a list);
  // a byte that can end a JSON value or follow one ('"', ']', '}', ',', whitespace). The tokens
  // that can complete a string item, an array or object item, open an array and complete an
  // item in it, and complete any item: UniqueItemsTracker's candidates.
  const TokenBits& quote_tokens() const { return quote_tokens_; }
  const TokenBits& close_tokens() const { return close_tokens_; }
  std::span<const TokenId> open_list_tokens() const { return open_list_tokens_; }  // a few
  const TokenBits& ender_tokens() const { return ender_tokens_; }
  // `bytes` cut into the longest tokens of the trie, left to right (at most max_tokens; it
  // stops where no token matches). Jump-forward's fallback where the tokenizer's own encoding
  // does not spell the bytes back (SentencePiece's leading space).
  std::vector<TokenId> LongestMatch(std::string_view bytes, int max_tokens) const;
  // Every token whose piece is exactly `bytes` (several where byte-fallback tokens spell what a
  // merged one does); empty when none.
  std::span<const TokenId> TokensSpelling(std::string_view bytes) const;

  // A cover: a small closed set of parse states, numbered from 0 (the state a walk starts
  // from), given by its table `next` [num_states, 256]: the number of the state each byte
  // leads to, kCoverExit where the path leaves the set, kCoverDead where it is refused. The
  // cover is what that table says of the trie: the tokens whose path stays inside the set
  // (allowed: every state of the set is non-empty) and the nodes where a path first leaves it,
  // with the set state of their parent. Every trie node is on a path inside the set, below
  // exactly one exit, or below a refused byte.
  static constexpr int16_t kCoverExit = -1;
  static constexpr int16_t kCoverDead = -2;
  struct LoopCover {
    std::vector<int16_t> next;       // [num_states, 256] the table it was made from
    TokenBits tokens;                // [words]: bit t set = token t's path stays in the set
    std::vector<int32_t> exits;      // [num_exits] node indices, in preorder
    std::vector<int16_t> exit_from;  // [num_exits] set state of the exit's parent
  };
  // Cached per table (thread-safe); computed on first use by one pass over the part of the
  // trie inside the set. The cache starts over past kMaxCoverBytes (a cover lives on while a
  // masker holds it). REQUIRES: next.size() is a multiple of 256, entries < next.size() / 256.
  static constexpr size_t kMaxCoverBytes = size_t{64} << 20;
  std::shared_ptr<const LoopCover> CoverFor(std::span<const int16_t> next) const;

 private:
  struct CoverKeyHash {
    size_t operator()(const std::vector<int16_t>& next) const;
  };
  void BuildTrie(const std::vector<uint8_t>& excluded);
  // The child of trie node `node` reached by `byte`, or -1.
  int32_t Child(int32_t node, uint8_t byte) const;

  std::vector<std::string> pieces_;
  std::vector<TokenId> eog_;
  std::vector<uint8_t> eog_mask_;
  std::vector<Node> nodes_;
  std::vector<TokenId> token_ids_;
  TokenBits quote_tokens_;
  TokenBits close_tokens_;
  std::vector<TokenId> open_list_tokens_;
  TokenBits ender_tokens_;
  int max_depth_ = 0;
  mutable std::mutex covers_mu_;
  mutable std::unordered_map<std::vector<int16_t>, std::shared_ptr<const LoopCover>, CoverKeyHash>
      covers_;                      // guarded by covers_mu_
  mutable size_t cover_bytes_ = 0;  // guarded by covers_mu_
};

struct MaskStats {
  int64_t lookups = 0;
  int64_t misses = 0;
  int64_t trie_nodes_visited = 0;
};

// A lazy constraint's trigger (tool_choice "auto"): the output is free text until `text`
// appears in it (only as its very start with `at_start`); from the trigger's first byte on it
// follows the grammar, which therefore begins with the trigger.
struct Trigger {
  std::string text;  // empty: not lazy, the grammar holds from the first token
  bool at_start = false;
};

class TokenMasker {
 public:
  TokenMasker(Grammar grammar, std::shared_ptr<const TokenVocab> vocab, Trigger trigger = {});
  TokenMasker(const TokenMasker&) = delete;
  TokenMasker& operator=(const TokenMasker&) = delete;

  const Grammar& grammar() const { return grammar_; }
  const Trigger& trigger() const { return trigger_; }
  const TokenVocab& vocab() const { return *vocab_; }

  State Initial();
  // Advances *state over the token's bytes (an end-of-generation token leaves it unchanged).
  // False, with *state empty, if the grammar refuses the token.
  bool Accept(State* state, TokenId token);
  // Advances *state over raw bytes (a lazy constraint's text from its trigger on).
  bool AcceptBytes(State* state, std::string_view bytes);
  // The bytes `state` allows next.
  ByteSet NextBytes(const State& state);
  // The tokens `state` allows that are also in `filter`, appended to *out.
  void AllowedIn(const State& state, const TokenBits& filter, std::vector<TokenId>* out);
  // Whether consuming '[' from `state` opens an array the grammar marks unique (on some stack).
  bool OpensUniqueArray(const State& state);
  // Sets logits of the tokens `state` does not allow to -inf. An empty state (nothing can
  // follow) allows only end-of-generation tokens.
  void Apply(const State& state, std::span<float> logits);
  // The allowed tokens of `state` (copied out; for tests and tools).
  TokenBits Allowed(const State& state);
  // The bytes that must come next whatever the model picks (jump-forward's input): the longest
  // byte string every continuation of `state` starts with (empty when there is a choice or the
  // structure may end).
  std::string ForcedBytes(const State& state, size_t max_bytes = 256);
  MaskStats stats() const;
  int64_t cached_masks() const;

 private:
  // Interned states: ids index states_, the rows of next_ (the successor per byte,
  // kUnknownState until first taken) and loops_; kDeadState is the empty state.
  static constexpr int32_t kDeadState = 0;
  static constexpr int32_t kUnknownState = -1;
  struct StateHash {
    size_t operator()(const State& s) const;
  };
  // A walk's start: the states of its cover (members[0] is the start) and the cover.
  struct LoopInfo {
    bool known = false;
    std::vector<int32_t> members;                        // [cover states] state ids
    std::shared_ptr<const TokenVocab::LoopCover> cover;  // null: walk the whole trie
  };

  const TokenBits& MaskLocked(const State& state);
  void ComputeLocked(const State& state, TokenBits* out);
  void ResetStatesLocked();
  int32_t InternLocked(const State& state);
  int32_t NextLocked(int32_t id, uint8_t byte) {
    const int32_t to = next_[static_cast<size_t>(id) * 256 + byte];
    return to != kUnknownState ? to : StepLocked(id, byte);
  }
  // NextLocked's first step of `id` over `byte`: out of line, so that the lookup inlines.
  [[gnu::noinline]] int32_t StepLocked(int32_t id, uint8_t byte);
  const LoopInfo& LoopLocked(int32_t id);
  // The most frequent non-empty successor of `id` over the 256 bytes, and on how many bytes.
  std::pair<int32_t, int> MajorityLocked(int32_t id);
  // The walk from `root` with the cover of `from` (root, or the loop root leads into); false,
  // having done nothing, where `from` has no cover.
  bool CoverWalkLocked(int32_t root, int32_t from, TokenBits* out);
  // Walks trie nodes [begin, end) in preorder, setting the allowed tokens in *out. REQUIRES:
  // ids_[depth(begin) - 1] holds the state of begin's parent; [begin, end) whole subtrees.
  int64_t WalkLocked(int32_t begin, int32_t end, TokenBits* out);

  Grammar grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  Trigger trigger_;
  mutable std::mutex mu_;
  StackArena arena_;                                       // guarded by mu_
  std::unordered_map<State, TokenBits, StateHash> cache_;  // guarded by mu_
  MaskStats stats_;                                        // guarded by mu_

  // Guarded by mu_: the interned states and their transitions (see above).
  std::unordered_map<State, int32_t, StateHash> state_ids_;
  std::vector<const State*> states_;  // [num_states] keys of state_ids_
  std::vector<int32_t> next_;         // [num_states, 256] successor state id per byte
  std::vector<LoopInfo> loops_;       // [num_states] filled for states a walk started from
  // A state's stacks grouped by the byte set their top matches, for StepLocked: a byte costs a
  // test per distinct set, not per stack (states inside anyOf-heavy schemas hold hundreds of
  // stacks over a handful of sets). Filled on a state's first step.
  struct TopGroups {
    bool known = false;
    ByteSet any;  // the union: every other byte leads nowhere
    // One allocation: [groups], then per group (byte set id, end of its stacks), then the
    // stacks, grouped.
    std::vector<int32_t> data;
  };
  std::vector<TopGroups> tops_;                      // [num_states]
  std::vector<int32_t> accepting_;                   // StepLocked scratch
  std::vector<std::pair<int32_t, int32_t>> by_set_;  // StepLocked scratch
  std::vector<int16_t> member_of_;    // [num_states] LoopLocked scratch: cover number or -1
  std::vector<int32_t> ids_;          // [max_depth + 1] walk scratch: state id per depth
  State scratch_;
};

}  // namespace kvserve::structured
