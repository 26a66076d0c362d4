#include "kv/kv_storage.h"

#include <gtest/gtest.h>

#include "kv/block_table.h"

namespace kvserve {
namespace {

TEST(KvLayout, BytesPerTokenFollowsTheFormula) {
  KvLayout l{.num_layers = 22, .num_kv_heads = 4, .head_dim = 64, .block_size = 16,
             .k_dtype = KvDtype::kF16, .v_dtype = KvDtype::kF16};
  // 2 (K and V) x layers x kv_heads x head_dim x 2 bytes
  EXPECT_EQ(l.bytes_per_token(), 2u * 22 * 4 * 64 * 2);
  EXPECT_EQ(l.bytes_per_block(), l.bytes_per_token() * 16);
  l.v_dtype = KvDtype::kF32;
  EXPECT_EQ(l.bytes_per_token(), 22u * 4 * 64 * (2 + 4));
}

TEST(KvStorage, TilesAreDisjointAndContiguous) {
  KvLayout l{.num_layers = 2, .num_kv_heads = 3, .head_dim = 8, .block_size = 4,
             .k_dtype = KvDtype::kF32, .v_dtype = KvDtype::kF16};
  KvStorage kv(l, 5);
  EXPECT_EQ(kv.total_bytes(), 2u * 5 * 3 * 4 * 8 * (4 + 2));
  // (block 1, head 0) follows (block 0, head 2) directly.
  EXPECT_EQ(kv.KTile(0, BlockId(1), 0) - kv.KTile(0, BlockId(0), 2), 4 * 8 * 4);
  EXPECT_EQ(kv.VTile(1, BlockId(1), 0) - kv.VTile(1, BlockId(0), 2), 4 * 8 * 2);
  EXPECT_NE(kv.KTile(0, BlockId(0), 0), kv.KTile(1, BlockId(0), 0));
}

TEST(BlockTable, CountsBlocksNeeded) {
  BlockTable t(16);
  EXPECT_EQ(t.BlocksNeededFor(1), 1);
  EXPECT_EQ(t.BlocksNeededFor(16), 1);
  EXPECT_EQ(t.BlocksNeededFor(17), 2);
  t.Append(BlockId(7));
  EXPECT_EQ(t.BlocksNeededFor(16), 0);
  EXPECT_EQ(t.BlocksNeededFor(33), 2);
  EXPECT_EQ(t.TakeAll().size(), 1u);
  EXPECT_EQ(t.num_blocks(), 0);
}

}  // namespace
}  // namespace kvserve
