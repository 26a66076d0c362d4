#include "structured/matcher.h"

#include <algorithm>

namespace kvserve::structured {

namespace {

void SortUnique(State* s) {
  std::sort(s->begin(), s->end());
  s->erase(std::unique(s->begin(), s->end()), s->end());
}

}  // namespace

StackArena::StackArena(const Grammar* grammar) : grammar_(grammar) {}

int32_t StackArena::NodeFor(int32_t pos, int32_t parent) {
  const uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  auto [it, inserted] = index_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) {
    nodes_.push_back(Node{pos, parent});
    step_.emplace_back();
    stepped_.push_back(0);
  }
  return it->second;
}

void StackArena::Expand(int32_t pos, int32_t parent, State* out) {
  const Grammar& g = *grammar_;
  for (;;) {
    const Symbol& s = g.symbol(pos);
    switch (s.kind) {
      case Symbol::Kind::kBytes:
        out->push_back(NodeFor(pos, parent));
        return;
      case Symbol::Kind::kRule: {
        // The frame to return to; a return onto kEnd would only pop again (tail call).
        int32_t ret = parent;
        if (g.symbol(pos + 1).kind != Symbol::Kind::kEnd) ret = NodeFor(pos + 1, parent);
        for (int32_t alt : g.alternatives(s.index)) Expand(alt, ret, out);
        return;
      }
      case Symbol::Kind::kEnd:
        if (parent < 0) {
          out->push_back(kAcceptStack);
          return;
        }
        pos = nodes_[static_cast<size_t>(parent)].pos;
        parent = nodes_[static_cast<size_t>(parent)].parent;
        break;
    }
  }
}

State StackArena::Initial() {
  State s;
  for (int32_t alt : grammar_->alternatives(grammar_->start_rule())) Expand(alt, -1, &s);
  SortUnique(&s);
  return s;
}

const State& StackArena::Step(int32_t stack) {
  const size_t i = static_cast<size_t>(stack);
  if (!stepped_[i]) {
    State next;
    Expand(nodes_[i].pos + 1, nodes_[i].parent, &next);
    SortUnique(&next);
    // Expand may have grown the vectors; index again.
    step_[i] = std::move(next);
    stepped_[i] = 1;
  }
  return step_[i];
}

void StackArena::Advance(const State& state, uint8_t byte, State* out) {
  out->clear();
  const Grammar& g = *grammar_;
  size_t sources = 0;
  for (int32_t stack : state) {
    if (stack == kAcceptStack) continue;
    if (!g.byte_set(g.symbol(nodes_[static_cast<size_t>(stack)].pos).index).Has(byte)) continue;
    const State& next = Step(stack);
    out->insert(out->end(), next.begin(), next.end());
    ++sources;
  }
  if (sources > 1) SortUnique(out);
}

bool StackArena::AdvanceBytes(State* state, std::string_view bytes) {
  State next;
  for (char c : bytes) {
    Advance(*state, static_cast<uint8_t>(c), &next);
    state->swap(next);
    if (state->empty()) return false;
  }
  return true;
}

ByteSet StackArena::NextBytes(const State& state) const {
  ByteSet s;
  for (int32_t stack : state) {
    if (stack == kAcceptStack) continue;
    s.AddSet(grammar_->byte_set(grammar_->symbol(nodes_[static_cast<size_t>(stack)].pos).index));
  }
  return s;
}

bool FullMatch(const Grammar& grammar, std::string_view text) {
  StackArena arena(&grammar);
  State s = arena.Initial();
  return arena.AdvanceBytes(&s, text) && StackArena::CanEnd(s);
}

bool PrefixMatch(const Grammar& grammar, std::string_view text) {
  StackArena arena(&grammar);
  State s = arena.Initial();
  return arena.AdvanceBytes(&s, text);
}

}  // namespace kvserve::structured
