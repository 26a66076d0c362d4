// Block records: what a lower tier stores for one block. A record verifies only as the exact
// block it was made from; any other byte, length, key, token or layout is DataLoss.
#include "prefix/block_record.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace kvserve {
namespace {
// The test executables are unity builds: this file's helpers stay apart from its neighbours'.
namespace block_record_test {

// 2 layers, 2 KV heads, head_dim 8, block_size 4, f16: 512 payload bytes.
KvLayout SmallLayout() { return KvLayout{2, 2, 8, 4, KvDtype::kF16, KvDtype::kF16}; }

// The record of the second block of a chain, encoded from block 1 of a small KvStorage.
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

template <typename T>
StatusCode CodeOf(const Result<T>& r) {
  return r.status().code();
}

TEST(BlockRecord, RoundTripsThePayloadInReadBlockOrder) {
  Fixture f;
  EXPECT_EQ(f.record.size(), kRecordHeaderBytes + 4 * 4 + 512 + kRecordChecksumBytes);
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
}

TEST(BlockRecord, HeaderParsesWithoutTheRestOfTheRecord) {
  Fixture f;
  const std::span<const uint8_t> header(f.record.data(), kRecordHeaderBytes);
  auto h = ParseBlockRecordHeader(header);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->key, f.key);
  EXPECT_EQ(h->parent_key, f.parent);
  EXPECT_EQ(h->root_key, f.root);
  EXPECT_EQ(h->layout.num_layers, 2);
  EXPECT_EQ(h->layout.num_kv_heads, 2);
  EXPECT_EQ(h->layout.head_dim, 8);
  EXPECT_EQ(h->layout.block_size, 4);
  EXPECT_EQ(h->layout.k_dtype, KvDtype::kF16);
  EXPECT_EQ(h->layout.v_dtype, KvDtype::kF16);
  EXPECT_EQ(h->payload_bytes, 512u);
  EXPECT_EQ(CodeOf(ParseBlockRecordHeader(header.first(kRecordHeaderBytes - 1))),
            StatusCode::kDataLoss);
}

// Every byte is covered: the header (magic, version, sizes, keys, layout), the tokens, the
// payload and the checksum itself.
TEST(BlockRecord, AFlippedByteAnywhereIsDataLoss) {
  Fixture f;
  ASSERT_EQ(f.record.size(), 688u);
  for (size_t i = 0; i < f.record.size(); ++i) {
    for (uint8_t bit : {uint8_t{0x01}, uint8_t{0x80}}) {
      f.record[i] ^= bit;
      EXPECT_EQ(CodeOf(f.Verify()), StatusCode::kDataLoss) << "byte " << i << " bit " << +bit;
      f.record[i] ^= bit;
    }
  }
  EXPECT_TRUE(f.Verify().ok());
}

TEST(BlockRecord, ATruncatedOrExtendedRecordIsDataLoss) {
  Fixture f;
  const std::vector<uint8_t> whole = f.record;
  for (size_t n :
       {size_t{0}, size_t{10}, kRecordHeaderBytes - 1, kRecordHeaderBytes, kRecordHeaderBytes + 16,
        whole.size() / 2, whole.size() - 16, whole.size() - 1}) {
    f.record.assign(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(CodeOf(f.Verify()), StatusCode::kDataLoss) << n << " bytes";
  }
  f.record = whole;
  f.record.push_back(0);
  EXPECT_EQ(CodeOf(f.Verify()), StatusCode::kDataLoss);
}

TEST(BlockRecord, AnotherExpectedKeyIsDataLoss) {
  Fixture f;
  const BlockKey other = ChainKey(f.parent, std::vector<TokenId>{5, 6, 7, 9});
  EXPECT_EQ(CodeOf(VerifyBlockRecord(f.record, other, f.tokens, SmallLayout())),
            StatusCode::kDataLoss);
  EXPECT_EQ(CodeOf(VerifyBlockRecord(f.record, f.parent, f.tokens, SmallLayout())),
            StatusCode::kDataLoss);
}

TEST(BlockRecord, OtherExpectedTokensAreDataLoss) {
  Fixture f;
  for (const std::vector<TokenId>& tokens :
       {std::vector<TokenId>{5, 6, 7, 9}, std::vector<TokenId>{8, 7, 6, 5},
        std::vector<TokenId>{5, 6, 7}, std::vector<TokenId>{5, 6, 7, 8, 9}}) {
    EXPECT_EQ(CodeOf(VerifyBlockRecord(f.record, f.key, tokens, SmallLayout())),
              StatusCode::kDataLoss)
        << tokens.size() << " tokens";
  }
}

TEST(BlockRecord, AnotherLayoutIsDataLoss) {
  Fixture f;
  std::vector<KvLayout> others(6, SmallLayout());
  others[0].k_dtype = KvDtype::kInt8;
  others[1].v_dtype = KvDtype::kInt8;
  others[2].num_layers = 3;
  others[3].num_kv_heads = 1;
  others[4].head_dim = 16;
  others[5].block_size = 8;
  for (size_t i = 0; i < others.size(); ++i) {
    EXPECT_EQ(CodeOf(VerifyBlockRecord(f.record, f.key, f.tokens, others[i])),
              StatusCode::kDataLoss)
        << "layout " << i;
  }
}

TEST(BlockRecord, AKeyThatIsNotTheChainOfItsParentAndTokensIsDataLoss) {
  Fixture f;
  // A well-formed, correctly checksummed record whose parent does not lead to its key (a
  // mislabelled block): its key and tokens are the expected ones, only the chain is wrong.
  const BlockKey wrong_parent = ChainKey(f.root, std::vector<TokenId>{9, 9, 9, 9});
  EncodeBlockRecord(TreeBlock{f.key, wrong_parent, f.root, f.tokens, BlockId(1)}, f.kv, &f.record);
  auto r = f.Verify();
  EXPECT_EQ(CodeOf(r), StatusCode::kDataLoss);
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
  EXPECT_NE(MakeCacheNamespace({"ab", "c"}), MakeCacheNamespace({"a", "bc"}));
}

// Known answers from an independent SHA-256 (Python's hashlib over the parent's 32 bytes and the
// tokens as little-endian int32): the chain must not change across builds or machines.
TEST(BlockKey, ChainKeyIsSha256OfParentAndLittleEndianTokens) {
  const BlockKey zero{};
  EXPECT_EQ(ChainKey(zero, std::vector<TokenId>{1, 2, 3, 4}).Hex(),
            "d8faa8ec8c0500567ca87b56e4bb666d69cb512e638103891defea24e88cbc92");
  EXPECT_EQ(ChainKey(zero, std::vector<TokenId>{-1, 0, 70000, 5}).Hex(),
            "140c67f1adc8e0df145ae6b53abe2598aeaf4ee267b9aadb13ed87ee01b3563a");
  std::vector<TokenId> seventy(70);  // more than the 64 tokens hashed at a time
  std::iota(seventy.begin(), seventy.end(), 0);
  EXPECT_EQ(ChainKey(zero, seventy).Hex(),
            "2dea1dcdddfa7649e43049402469b7ba96d9efda1cdb2f25e887f59ea66da131");
  EXPECT_EQ(Sha256Of("abc", 3).Hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace block_record_test
}  // namespace
}  // namespace kvserve
