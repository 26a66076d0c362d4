// vLLM's block hash against vectors computed independently with Python (Debian's python3-cbor2):
//   import cbor2, hashlib
//   def h(o): return hashlib.sha256(cbor2.dumps(o, canonical=True)).digest()
//   none = h("")                      # NONE_HASH for PYTHONHASHSEED=""
//   b0 = h((none, tuple(range(1, 17)), None)); b1 = h((b0, tuple(range(17, 33)), None))
//   s0 = h((none, tuple(range(1, 17)), ("tenant-a",)))   # cache_salt in the first block only
// which is what vLLM's hash_block_tokens does with sha256_cbor.
#include "util/vllm_block_hash.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace kvserve {
namespace {

std::string Hex(const std::vector<uint8_t>& bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : bytes) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

std::vector<int32_t> Range(int32_t from, int32_t to) {  // [from, to)
  std::vector<int32_t> v(static_cast<size_t>(to - from));
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST(VllmBlockHash, NoneHashIsSha256OfTheSeedAsCborText) {
  EXPECT_EQ(VllmHashHex(VllmNoneHash("")),
            "8d33f520a3c4cef80d2453aef81b612bfe1cb44c8b2025630ad38662763f13d3");
  EXPECT_EQ(VllmHashHex(VllmNoneHash("0")),
            "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e");
  EXPECT_EQ(VllmHashHex(VllmNoneHash("42")),
            "9fa6eb003f14425eb9c8e6baacfbcaab26257357b829c7bfa74ffcc4f31c1780");
}

TEST(VllmBlockHash, CborMatchesCbor2Canonical) {
  const VllmBlockHash none = VllmNoneHash("");
  const std::vector<int32_t> small{1, 2, 3};
  EXPECT_EQ(Hex(VllmBlockCbor(none, small, "")),
            "8358208d33f520a3c4cef80d2453aef81b612bfe1cb44c8b2025630ad38662763f13d383010203f6");
  const std::vector<int32_t> one{1};
  EXPECT_EQ(Hex(VllmBlockCbor(none, one, "\xc3\xa9")),  // "é": the salt is UTF-8 text
            "8358208d33f520a3c4cef80d2453aef81b612bfe1cb44c8b2025630ad38662763f13d381018162c3a9");
}

TEST(VllmBlockHash, IntegerHeadsTakeTheShortestForm) {
  // Every head width, both signs: h((h("0"), big, None)).
  const std::vector<int32_t> big{0,          23, 24,  255, 256,  65535, 65536,          151643,
                                 2147483647, -1, -24, -25, -256, -257,  -2147483647 - 1};
  const VllmBlockHash none0 = VllmNoneHash("0");
  EXPECT_EQ(Hex(VllmBlockCbor(none0, big, "")),
            "8358204e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e8f00171818"
            "18ff19010019ffff1a000100001a0002505b1a7fffffff2037381838ff3901003a7ffffffff6");
  EXPECT_EQ(VllmHashHex(VllmHashBlock(none0, big)),
            "9c782d607e555761e1ea11c4c1eb963ea8214bbb901683da4562bb7658dff108");
}

TEST(VllmBlockHash, ChainsFullBlocksFromTheNoneHash) {
  const std::vector<int32_t> tokens = Range(1, 33 + 5);  // two full blocks and 5 tokens more
  const std::vector<VllmBlockHash> h = VllmBlockHashes(tokens, 16, VllmNoneHash(""));
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(VllmHashHex(h[0]), "38c16831a952cb649f1a41e30e9783c83903578c54cfa4822dda5dad95831187");
  EXPECT_EQ(VllmHashHex(h[1]), "df113eb536bf815843ed8f75f2e09b23f06396d52cbb8799f4db8f431d3f02be");
  // The same chain one block at a time.
  const std::span<const int32_t> all(tokens);
  EXPECT_EQ(VllmHashBlock(h[0], all.subspan(16, 16)), h[1]);
}

TEST(VllmBlockHash, SaltGoesIntoTheFirstBlockOnly) {
  const std::vector<int32_t> tokens = Range(1, 33);
  const std::vector<VllmBlockHash> h = VllmBlockHashes(tokens, 16, VllmNoneHash(""), "tenant-a");
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(VllmHashHex(h[0]), "9d4605bdd029c0f553322b14948c1d31f710e8d47206679271a598ad614323b0");
  EXPECT_EQ(VllmHashHex(h[1]), "ce586b25478cdbb838b535bb3d18fad9430936479ab9dcf67966f1edfc673c93");
}

TEST(VllmBlockHash, IntegerFormIsTheLastEightBytesBigEndian) {
  const std::vector<int32_t> tokens = Range(1, 17);
  const VllmBlockHash h = VllmBlockHashes(tokens, 16, VllmNoneHash(""))[0];
  // int.from_bytes(b0, "big") & (2**64 - 1)
  EXPECT_EQ(VllmHashToU64(h), 3304056276748800391ull);
}

TEST(VllmBlockHash, NoFullBlockNoHash) {
  const std::vector<int32_t> tokens = Range(1, 16);
  EXPECT_TRUE(VllmBlockHashes(tokens, 16, VllmNoneHash("")).empty());
}

}  // namespace
}  // namespace kvserve
