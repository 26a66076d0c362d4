#include "structured/matcher.h"

#include <algorithm>

namespace kvserve::structured {

namespace {

void SortUnique(State* s) {
  std::sort(s->begin(), s->end());
  s->erase(std::unique(s->begin(), s->end()), s->end());
}

uint64_t NodeHash(int32_t pos, int32_t parent, const MemberBits& taken, int32_t count) {
  uint64_t h =
      (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  h = (h ^ taken.w[0]) * 0x9E3779B97F4A7C15ull;
  h = (h ^ taken.w[1]) * 0x9E3779B97F4A7C15ull;
  h = (h ^ static_cast<uint32_t>(count) ^ (h >> 29)) * 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 32);
}

}  // namespace

StackArena::StackArena(const Grammar* grammar) : grammar_(grammar) {}

void StackArena::GrowIndex() {
  const size_t size = std::max<size_t>(64, index_.size() * 2);
  index_.assign(size, -1);
  const size_t mask = size - 1;
  for (size_t id = 0; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    const SetProgress p = n.progress >= 0 ? progress_[static_cast<size_t>(n.progress)]
                                          : SetProgress{MemberBits{}, -1, 0};
    size_t slot = NodeHash(n.pos, n.parent, p.taken, p.count + (p.early << 24)) & mask;
    while (index_[slot] >= 0) slot = (slot + 1) & mask;
    index_[slot] = static_cast<int32_t>(id);
  }
}

int32_t StackArena::FindOrAdd(int32_t pos, int32_t parent, const SetProgress* progress) {
  // A plain frame hashes as progress {0, -1}, which no set frame has (counts are >= 0).
  const SetProgress p = progress != nullptr ? *progress : SetProgress{MemberBits{}, -1, 0};
  if ((nodes_.size() + 1) * 2 > index_.size()) GrowIndex();
  const size_t mask = index_.size() - 1;
  size_t slot = NodeHash(pos, parent, p.taken, p.count + (p.early << 24)) & mask;
  for (;; slot = (slot + 1) & mask) {
    const int32_t id = index_[slot];
    if (id < 0) break;
    const Node& n = nodes_[static_cast<size_t>(id)];
    if (n.pos != pos || n.parent != parent || (n.progress >= 0) != (progress != nullptr)) continue;
    if (progress == nullptr) return id;
    const SetProgress& q = progress_[static_cast<size_t>(n.progress)];
    if (q.taken == p.taken && q.count == p.count && q.early == p.early) return id;
  }
  int32_t progress_index = -1;
  if (progress != nullptr) {
    progress_.push_back(*progress);
    progress_index = static_cast<int32_t>(progress_.size()) - 1;
  }
  const auto id = static_cast<int32_t>(nodes_.size());
  nodes_.push_back(Node{pos, parent, progress_index});
  step_.emplace_back();
  stepped_.push_back(0);
  index_[slot] = id;
  return id;
}

int32_t StackArena::NodeFor(int32_t pos, int32_t parent) { return FindOrAdd(pos, parent, nullptr); }

int32_t StackArena::SetNodeFor(int32_t pos, int32_t parent, SetProgress progress) {
  return FindOrAdd(pos, parent, &progress);
}

void StackArena::ExpandSet(int32_t pos, int32_t parent, SetProgress progress, State* out) {
  const Grammar& g = *grammar_;
  const MemberSet& set = g.member_set(g.symbol(pos).index);
  const MemberSetSpec& spec = set.spec;
  const bool required_written = (progress.taken & spec.required) == spec.required;
  if (required_written && progress.count >= spec.min_count) {
    Expand(pos + 1, parent, out);
  }
  if (spec.max_count >= 0 && progress.count >= spec.max_count) return;
  const int64_t cap = spec.max_count >= 0 ? spec.max_count : std::max<int64_t>(spec.min_count, 1);
  const auto count = static_cast<int32_t>(std::min<int64_t>(progress.count + 1, cap));
  const bool first = progress.count == 0;
  const auto offer = [&](int rule, const MemberBits& taken, int32_t early) {
    if (!spec.CanFinish(taken, count)) return;  // a dead end: never let a prefix into it
    if ((taken & spec.required) == spec.required) early = 0;
    const int32_t ret = SetNodeFor(pos, parent, SetProgress{taken, count, early});
    for (int32_t alt : g.alternatives(rule)) Expand(alt, ret, out);
  };
  for (size_t i = 0; i < spec.members.size(); ++i) {
    if (progress.taken.Has(i)) continue;
    offer(first ? spec.members[i] : set.after_separator[i], progress.taken | MemberBits::Bit(i),
          progress.early);
  }
  if (spec.extra >= 0 && required_written) {
    offer(first ? spec.extra : set.extra_after_separator, progress.taken, 0);
  } else if (spec.early_extra >= 0 && progress.taken.Empty() &&
             progress.early < spec.early_extras) {
    // No member taken and required ones missing: whatever was written were early extras.
    offer(first ? spec.early_extra : set.early_extra_after_separator, progress.taken,
          progress.early + 1);
  }
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
      case Symbol::Kind::kSet:
        ExpandSet(pos, parent, SetProgress{}, out);
        return;
      case Symbol::Kind::kEnd: {
        if (parent < 0) {
          out->push_back(kAcceptStack);
          return;
        }
        const Node up = nodes_[static_cast<size_t>(parent)];
        if (up.progress >= 0) {  // back in a set: its progress now counts the member just ended
          ExpandSet(up.pos, up.parent, progress_[static_cast<size_t>(up.progress)], out);
          return;
        }
        pos = up.pos;
        parent = up.parent;
        break;
      }
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

void StackArena::AdvanceStacks(std::span<const int32_t> stacks, State* out) {
  out->clear();
  for (int32_t stack : stacks) {
    const State& next = Step(stack);
    out->insert(out->end(), next.begin(), next.end());
  }
  if (stacks.size() > 1) SortUnique(out);
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
