// Matcher: walks a Grammar byte by byte as a nondeterministic pushdown automaton.
//
// NOTE: the parse state is a set of stacks. A stack is a chain of frames; a frame is a symbol
// position (an index into Grammar::symbols()): the top frame's position is a kBytes symbol, the
// next byte to match; each frame below holds where its rule continues once the rule above
// returns. Stacks are hash-consed in a StackArena (one node per distinct (position, parent)), so
// a stack is one int, equal stacks are equal ints, and a state is a sorted vector of them.
// Expansion skips return frames that sit on a kEnd symbol (tail calls), so a right-recursive
// repetition such as `x*` keeps a constant stack depth however long the match runs. Build()
// refused left recursion, so expansion always ends.
//
// NOTE: a member set (grammar.h) is walked with a frame that carries its progress: the members
// taken (a bit mask) and how many members were written (extras included), so a node is
// (position, parent, progress), hash-consed on all three. Expanding a set frame offers each
// member not yet taken (after the separator once one was written), whose return frame is the
// same set with the member's bit added and the count one higher; the extra member (count one
// higher, no bit; while a required member is missing, the early extra instead, only ahead of the
// other members and within the set's budget, which the progress counts too); and leaving the set
// once every required member is taken and the count reached the minimum. The count never passes the
// maximum and, without one, saturates at max(minimum, 1), the most any test reads, so an unbounded
// set reaches finitely many frames. Members never match the empty string (Build() checks), so
// expansion still ends.
//
// Contract: a StackArena belongs to one compiled constraint and grows as new stacks appear
// (bounded by the distinct stacks the inputs reach); it is not thread-safe: callers serialise
// (TokenMasker holds a mutex). States are plain values.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "structured/grammar.h"

namespace kvserve::structured {

// A parse state: sorted, distinct stack ids. kAcceptStack marks "the start rule may end here".
using State = std::vector<int32_t>;
inline constexpr int32_t kAcceptStack = -2;

class StackArena {
 public:
  explicit StackArena(const Grammar* grammar);

  const Grammar& grammar() const { return *grammar_; }
  // The state before any byte.
  State Initial();
  // The state after `byte`; empty when no stack accepts it.
  void Advance(const State& state, uint8_t byte, State* out);
  // Advance for stacks known to accept the byte (each stack's top matches it): the union of
  // their successors, as Advance gives it.
  void AdvanceStacks(std::span<const int32_t> stacks, State* out);
  // Advance over every byte; false (and *state empty) as soon as a byte is refused.
  bool AdvanceBytes(State* state, std::string_view bytes);
  static bool CanEnd(const State& state) { return !state.empty() && state.front() == kAcceptStack; }
  // The bytes allowed next (union over the stacks' top symbols).
  ByteSet NextBytes(const State& state) const;
  int64_t num_nodes() const { return static_cast<int64_t>(nodes_.size()); }
  // The position of a stack's top frame: the byte symbol it matches next (REQUIRES: not
  // kAcceptStack).
  int32_t top_position(int32_t stack) const { return nodes_[static_cast<size_t>(stack)].pos; }

 private:
  struct Node {
    int32_t pos;
    int32_t parent;    // -1: the bottom
    int32_t progress;  // a set frame: index into progress_; -1: a plain frame
  };
  // A set frame's progress: the members taken and the count written (see the NOTE above).
  struct SetProgress {
    MemberBits taken;
    int32_t count = 0;
    int32_t early = 0;  // extras written while a required member is missing (0 once none is)
  };
  int32_t NodeFor(int32_t pos, int32_t parent);
  int32_t SetNodeFor(int32_t pos, int32_t parent, SetProgress progress);
  // The node (pos, parent, progress) where it exists, else a new one.
  int32_t FindOrAdd(int32_t pos, int32_t parent, const SetProgress* progress);
  void GrowIndex();
  // Pushes onto *out every stack reached from `pos` over parent without matching a byte.
  void Expand(int32_t pos, int32_t parent, State* out);
  // Expand for a set frame: the kSet symbol at `pos` with `progress` made.
  void ExpandSet(int32_t pos, int32_t parent, SetProgress progress, State* out);
  // The stacks after the top frame of `stack` matched one byte (memoised per stack).
  const State& Step(int32_t stack);

  const Grammar* grammar_;
  std::vector<Node> nodes_;
  // Open addressing over node ids (-1: an empty slot), hashed by (pos, parent, progress);
  // a power of two in size, at most half full. Node lookups are the matcher's hottest path.
  std::vector<int32_t> index_;
  std::vector<SetProgress> progress_;            // [set frame nodes]
  std::vector<State> step_;                      // [node] successors, valid where stepped_
  std::vector<uint8_t> stepped_;
};

// Whether the grammar matches all of `text`, and whether `text` is a prefix of something it
// matches (with a fresh arena each call: for tests and one-off checks).
bool FullMatch(const Grammar& grammar, std::string_view text);
bool PrefixMatch(const Grammar& grammar, std::string_view text);

}  // namespace kvserve::structured
