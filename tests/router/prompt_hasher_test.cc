// The router hashes prompts the way a replica names the blocks in its KV events. Expected values
// were computed independently in Python with a minimal canonical CBOR writer and hashlib:
//   none = sha256(cbor(seed)); h(i) = sha256(cbor([h(i-1), tokens_i, extra]))
//   the 64-bit form = int.from_bytes(h, "big") & (2**64 - 1)
#include "router/prompt_hasher.h"

#include <gtest/gtest.h>

namespace kvserve::router {
namespace {

TEST(PromptHasherTest, FullBlocksOnlyChainedFromTheSeed) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // 2 full blocks of 4, 1 over
  EXPECT_EQ(PromptHasher("").Hash(tokens, 4),
            (std::vector<uint64_t>{0x2b5674fe919251b6ull, 0x0488044000a83b3eull}));
  EXPECT_EQ(PromptHasher("42").Hash(tokens, 4),
            (std::vector<uint64_t>{0x5319d4d1d84429dfull, 0x9ba2dacb65221d14ull}));
}

TEST(PromptHasherTest, TheSaltJoinsTheFirstBlockOnly) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  EXPECT_EQ(PromptHasher("").Hash(tokens, 4, "salt"), std::vector<uint64_t>{0x3dcded5c2e59b591ull});
}

TEST(PromptHasherTest, LargeTokenIdsUseLongerCborHeads) {
  const std::vector<int32_t> tokens = {1000, 70000, 3, 4};
  EXPECT_EQ(PromptHasher("").Hash(tokens, 4), std::vector<uint64_t>{0xea98b9611a0fc0e6ull});
}

TEST(PromptHasherTest, APromptShorterThanABlockHasNoHash) {
  const std::vector<int32_t> tokens = {1, 2, 3};
  EXPECT_TRUE(PromptHasher("").Hash(tokens, 4).empty());
}

TEST(PromptHasherTest, ASharedPrefixSharesItsHashes) {
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> b = {1, 2, 3, 4, 5, 6, 7, 9};
  const PromptHasher h("");
  EXPECT_EQ(h.Hash(a, 4)[0], h.Hash(b, 4)[0]);
  EXPECT_NE(h.Hash(a, 4)[1], h.Hash(b, 4)[1]);
}

}  // namespace
}  // namespace kvserve::router
