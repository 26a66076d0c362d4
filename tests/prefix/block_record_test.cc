// Block records: what a lower tier stores for one block. A record verifies only as the exact
// block it was made from; any other byte, length, key, token or layout is DataLoss.
#include "prefix/block_record.h"

#include <gtest/gtest.h>

#include <numeric>

namespace kvserve {
namespace {

KvLayout SmallLayout() { return KvLayout{2, 2, 8, 4, KvDtype::kF16, KvDtype::kF16}; }

struct Fixture {
  KvStorage kv{SmallLayout(), 3};
  std::vector<TokenId> tokens{5, 6, 7, 8};
  BlockKey root = RootKey(MakeCacheNamespace({"model", "salt"}));
  BlockKey parent = ChainKey(root, std::vector<TokenId>{1, 2, 3, 4});
  BlockKey key = ChainKey(parent, tokens);
  std::vector<uint8_t> record;

  Fixture() {
    std::vector<uint8_t> bytes(SmallLayout().bytes_per_block());
    std::iota(bytes.begin(), bytes.end(), uint8_t{3});
    kv.WriteBlock(BlockId(1), bytes.data());
    EncodeBlockRecord(TreeBlock{key, parent, root, tokens, BlockId(1)}, kv, &record);
  }
  Result<std::span<const uint8_t>> Verify() const {
    return VerifyBlockRecord(record, key, tokens, SmallLayout());
  }
};

TEST(BlockRecord, RoundTripsThePayloadInReadBlockOrder) {
  Fixture f;
  EXPECT_EQ(f.record.size(), BlockRecordBytes(SmallLayout()));
  auto payload = f.Verify();
  ASSERT_TRUE(payload.ok()) << payload.status().ToString();
  std::vector<uint8_t> expect(SmallLayout().bytes_per_block());
  f.kv.ReadBlock(BlockId(1), expect.data());
  EXPECT_TRUE(std::equal(payload->begin(), payload->end(), expect.begin(), expect.end()));
  // Written into another block, the bytes are the same block again.
  f.kv.WriteBlock(BlockId(2), payload->data());
  std::vector<uint8_t> copy(expect.size());
  f.kv.ReadBlock(BlockId(2), copy.data());
  EXPECT_EQ(copy, expect);
  auto header = ParseBlockRecordHeader(f.record);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->key, f.key);
  EXPECT_EQ(header->parent_key, f.parent);
  EXPECT_EQ(header->root_key, f.root);
  EXPECT_EQ(header->layout.num_layers, 2);
}

TEST(BlockRecord, EveryFlippedByteIsDataLoss) {
  Fixture f;
  for (size_t i = 0; i < f.record.size(); ++i) {
    f.record[i] ^= 0x10;
    EXPECT_EQ(f.Verify().status().code(), StatusCode::kDataLoss) << "byte " << i;
    f.record[i] ^= 0x10;
  }
  EXPECT_TRUE(f.Verify().ok());
}

TEST(BlockRecord, TruncatedOrExtendedRecordsAreDataLoss) {
  Fixture f;
  const std::vector<uint8_t> whole = f.record;
  for (size_t n : {size_t{0}, size_t{10}, kRecordHeaderBytes, whole.size() / 2, whole.size() - 1}) {
    f.record.assign(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(f.Verify().status().code(), StatusCode::kDataLoss) << n << " bytes";
  }
  f.record = whole;
  f.record.push_back(0);
  EXPECT_EQ(f.Verify().status().code(), StatusCode::kDataLoss);
}

TEST(BlockRecord, AnotherKeyTokensOrLayoutIsDataLoss) {
  Fixture f;
  const BlockKey other = ChainKey(f.parent, std::vector<TokenId>{5, 6, 7, 9});
  EXPECT_EQ(VerifyBlockRecord(f.record, other, f.tokens, SmallLayout()).status().code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(VerifyBlockRecord(f.record, f.key, std::vector<TokenId>{5, 6, 7, 9}, SmallLayout())
                .status()
                .code(),
            StatusCode::kDataLoss);
  KvLayout int8 = SmallLayout();
  int8.k_dtype = KvDtype::kInt8;
  EXPECT_EQ(VerifyBlockRecord(f.record, f.key, f.tokens, int8).status().code(),
            StatusCode::kDataLoss);
}

TEST(BlockRecord, AKeyThatIsNotTheChainOfItsParentIsDataLoss) {
  Fixture f;
  // A record made with a parent that does not lead to its key (a mislabelled block).
  const BlockKey wrong_parent = ChainKey(f.root, std::vector<TokenId>{9, 9, 9, 9});
  EncodeBlockRecord(TreeBlock{f.key, wrong_parent, f.root, f.tokens, BlockId(1)}, f.kv, &f.record);
  auto r = f.Verify();
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("chain"), std::string::npos) << r.status().message();
}

TEST(BlockKey, ChainsDependOnNamespaceParentAndEveryToken) {
  const CacheNamespace a = MakeCacheNamespace({"weights-a", ""});
  const CacheNamespace b = MakeCacheNamespace({"weights-b", ""});
  const std::vector<TokenId> t{1, 2, 3, 4};
  EXPECT_NE(ChainKey(RootKey(a), t), ChainKey(RootKey(b), t));
  EXPECT_EQ(ChainKey(RootKey(a), t), ChainKey(RootKey(a), t));
  EXPECT_NE(ChainKey(RootKey(a), t), ChainKey(RootKey(a), std::vector<TokenId>{1, 2, 3, 5}));
  EXPECT_NE(ChainKey(ChainKey(RootKey(a), t), t), ChainKey(RootKey(a), t));
  // Known answer: the chain is SHA-256 and must not change across builds or machines.
  EXPECT_EQ(RootKey(CacheNamespace{}).Hex(), RootKey(CacheNamespace{}).Hex());
  EXPECT_EQ(Sha256Of("abc", 3).Hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace kvserve
