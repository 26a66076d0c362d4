#include <gtest/gtest.h>

#include "quant/types.h"

namespace kvserve {
namespace {

TEST(TypeTraits, BlockSizesMatchGgml) {
  struct Expected {
    GgmlType type;
    int64_t elems;
    int64_t bytes;
    bool supported;
  };
  const Expected table[] = {
      {GgmlType::kF32, 1, 4, true},       {GgmlType::kF16, 1, 2, true},
      {GgmlType::kBF16, 1, 2, true},      {GgmlType::kQ4_0, 32, 18, true},
      {GgmlType::kQ4_1, 32, 20, true},    {GgmlType::kQ5_0, 32, 22, true},
      {GgmlType::kQ5_1, 32, 24, true},    {GgmlType::kQ8_0, 32, 34, true},
      {GgmlType::kQ8_1, 32, 36, false},   {GgmlType::kQ2_K, 256, 84, false},
      {GgmlType::kQ3_K, 256, 110, false}, {GgmlType::kQ4_K, 256, 144, true},
      {GgmlType::kQ5_K, 256, 176, true},  {GgmlType::kQ6_K, 256, 210, true},
      {GgmlType::kQ8_K, 256, 292, true},  {GgmlType::kI8, 1, 1, false},
      {GgmlType::kI16, 1, 2, false},      {GgmlType::kI32, 1, 4, false},
      {GgmlType::kI64, 1, 8, false},      {GgmlType::kF64, 1, 8, false},
      {GgmlType::kMXFP4, 32, 17, true},
  };
  for (const Expected& e : table) {
    const TypeTraits t = Traits(e.type);
    EXPECT_EQ(t.type, e.type);
    EXPECT_EQ(t.block_elems, e.elems) << t.name;
    EXPECT_EQ(t.block_bytes, e.bytes) << t.name;
    EXPECT_EQ(t.supported, e.supported) << t.name;
  }
}

TEST(TypeTraits, UnknownIdsAreNullopt) {
  for (uint32_t id : {4u, 5u, 16u, 23u, 29u, 31u, 1000u, 0xffffffffu}) {
    EXPECT_FALSE(GetTypeTraits(id).has_value()) << id;
  }
  ASSERT_TRUE(GetTypeTraits(12).has_value());
  EXPECT_EQ(GetTypeTraits(12)->name, "Q4_K");
}

TEST(TypeTraits, RowBytesRequiresWholeBlocks) {
  EXPECT_EQ(RowBytes(GgmlType::kF32, 7), 28u);
  EXPECT_EQ(RowBytes(GgmlType::kQ4_0, 64), 36u);
  EXPECT_EQ(RowBytes(GgmlType::kQ6_K, 512), 420u);
  EXPECT_EQ(RowBytes(GgmlType::kQ4_0, 0), 0u);
  EXPECT_FALSE(RowBytes(GgmlType::kQ4_0, 33).has_value());
  EXPECT_FALSE(RowBytes(GgmlType::kQ4_K, 128).has_value());
  EXPECT_FALSE(RowBytes(GgmlType::kF16, -2).has_value());
}

TEST(TypeTraits, ParsesNamesCaseInsensitively) {
  EXPECT_EQ(ParseGgmlType("F32"), GgmlType::kF32);
  EXPECT_EQ(ParseGgmlType("f16"), GgmlType::kF16);
  EXPECT_EQ(ParseGgmlType("bf16"), GgmlType::kBF16);
  EXPECT_EQ(ParseGgmlType("Q8_0"), GgmlType::kQ8_0);
  EXPECT_EQ(ParseGgmlType("q4_k"), GgmlType::kQ4_K);
  EXPECT_EQ(ParseGgmlType("q4_K"), GgmlType::kQ4_K);
  EXPECT_EQ(ParseGgmlType("Q2_K"), GgmlType::kQ2_K);
  EXPECT_FALSE(ParseGgmlType("Q4").has_value());
  EXPECT_FALSE(ParseGgmlType("").has_value());
  EXPECT_FALSE(ParseGgmlType("Q4_K_M").has_value());
  // Every name round-trips through its traits.
  for (uint32_t id = 0; id < 40; ++id) {
    if (auto t = GetTypeTraits(id)) {
      EXPECT_EQ(ParseGgmlType(t->name), t->type) << t->name;
    }
  }
}

TEST(TypeTraits, CanQuantizeExactlyTheDocumentedTypes) {
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ4_0,
                     GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0,
                     GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kMXFP4}) {
    EXPECT_TRUE(CanQuantize(t)) << Traits(t).name;
  }
  for (GgmlType t : {GgmlType::kQ8_K, GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ8_1,
                     GgmlType::kI8, GgmlType::kF64}) {
    EXPECT_FALSE(CanQuantize(t)) << Traits(t).name;
    float x[256] = {};
    uint8_t out[512];
    EXPECT_FALSE(QuantizeRow(t, x, out, 256)) << Traits(t).name;
  }
}

}  // namespace
}  // namespace kvserve
