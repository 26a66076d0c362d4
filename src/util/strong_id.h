// StrongId<Tag>: an integer id that does not convert to or from other ids implicitly.
#pragma once

#include <cstdint>
#include <functional>

namespace kvserve {

template <typename Tag, typename Rep = int32_t>
class StrongId {
 public:
  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep v) : v_(v) {}
  constexpr Rep value() const { return v_; }
  constexpr bool valid() const { return v_ >= 0; }
  friend constexpr bool operator==(StrongId a, StrongId b) { return a.v_ == b.v_; }
  friend constexpr auto operator<=>(StrongId a, StrongId b) { return a.v_ <=> b.v_; }

 private:
  Rep v_ = -1;
};

struct BlockIdTag {};
struct SeqIdTag {};
using BlockId = StrongId<BlockIdTag>;
using SeqId = StrongId<SeqIdTag, int64_t>;

// Token ids stay plain integers: they index vocabularies and logits rows everywhere.
using TokenId = int32_t;

}  // namespace kvserve

template <typename Tag, typename Rep>
struct std::hash<kvserve::StrongId<Tag, Rep>> {
  size_t operator()(kvserve::StrongId<Tag, Rep> id) const { return std::hash<Rep>()(id.value()); }
};
