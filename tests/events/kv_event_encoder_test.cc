// The KV event batch's MessagePack, decoded back with nlohmann::json (an independent decoder) and
// checked against the positional shapes of vLLM's msgspec structs.
#include "events/kv_event_encoder.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvserve {
namespace {

using nlohmann::json;

VllmBlockHash HashOf(uint8_t fill) {
  VllmBlockHash h;
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint8_t>(fill + i);
  return h;
}

json Decode(const std::string& bytes) {
  return json::from_msgpack(std::vector<uint8_t>(bytes.begin(), bytes.end()));
}

std::vector<KvEvent> SampleEvents() {
  BlockStoredEvent stored;
  stored.block_hashes = {HashOf(1), HashOf(2)};
  stored.token_ids = {1, 2, 300, 70000, 5, 6, 7, 8};
  stored.block_size = 4;
  BlockStoredEvent child;
  child.block_hashes = {HashOf(3)};
  child.parent_block_hash = HashOf(2);
  child.token_ids = {9, 10, 11, 12};
  child.block_size = 4;
  BlockRemovedEvent removed;
  removed.block_hashes = {HashOf(3), HashOf(2)};
  return {AllBlocksClearedEvent{}, stored, child, removed};
}

TEST(KvEventEncoder, BatchIsTsEventsAndRank) {
  std::string bytes;
  EncodeKvEventBatch(1712345678.25, SampleEvents(), 0, BlockHashForm::kInt64, &bytes);
  // float64 right after the array head: msgspec writes a Python float as 0xcb.
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(static_cast<uint8_t>(bytes[0]), 0x93);
  EXPECT_EQ(static_cast<uint8_t>(bytes[1]), 0xcb);
  const json batch = Decode(bytes);
  ASSERT_TRUE(batch.is_array());
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_DOUBLE_EQ(batch[0].get<double>(), 1712345678.25);
  EXPECT_EQ(batch[2], 0);
  ASSERT_EQ(batch[1].size(), 4u);
  EXPECT_EQ(batch[1][0], json::array({"AllBlocksCleared"}));
}

TEST(KvEventEncoder, BlockStoredIsPositionalWithIntegerHashes) {
  std::string bytes;
  EncodeKvEventBatch(1.0, SampleEvents(), 0, BlockHashForm::kInt64, &bytes);
  const json events = Decode(bytes)[1];
  const json& stored = events[1];
  ASSERT_EQ(stored.size(), 8u);  // tag + 7 fields: extra_keys omitted at its default
  EXPECT_EQ(stored[0], "BlockStored");
  EXPECT_EQ(stored[1], json::array({VllmHashToU64(HashOf(1)), VllmHashToU64(HashOf(2))}));
  EXPECT_TRUE(stored[2].is_null());  // the first block's parent
  EXPECT_EQ(stored[3], json::array({1, 2, 300, 70000, 5, 6, 7, 8}));
  EXPECT_EQ(stored[4], 4);
  EXPECT_TRUE(stored[5].is_null());  // lora_id
  EXPECT_EQ(stored[6], "GPU");
  EXPECT_TRUE(stored[7].is_null());  // lora_name
  EXPECT_EQ(events[2][2], VllmHashToU64(HashOf(2)));
  EXPECT_TRUE(events[2][2].is_number_unsigned());
  const json& removed = events[3];
  EXPECT_EQ(removed, json::array({"BlockRemoved",
                                  json::array({VllmHashToU64(HashOf(3)), VllmHashToU64(HashOf(2))}),
                                  "GPU"}));
}

TEST(KvEventEncoder, BytesFormWritesBin32) {
  std::string bytes;
  EncodeKvEventBatch(1.0, SampleEvents(), 0, BlockHashForm::kBytes, &bytes);
  const json events = Decode(bytes)[1];
  const json& h = events[1][1][0];
  ASSERT_TRUE(h.is_binary());
  const std::vector<uint8_t>& bin = h.get_binary();
  const VllmBlockHash want = HashOf(1);
  EXPECT_EQ(bin, std::vector<uint8_t>(want.begin(), want.end()));
  EXPECT_TRUE(events[2][2].is_binary());
}

TEST(KvEventEncoder, SaltedFirstBlockCarriesExtraKeys) {
  BlockStoredEvent stored;
  stored.block_hashes = {HashOf(1), HashOf(2)};
  stored.token_ids = {1, 2, 3, 4};
  stored.block_size = 2;
  stored.first_block_salt = "tenant-a";
  std::string bytes;
  EncodeKvEventBatch(1.0, std::vector<KvEvent>{stored}, 0, BlockHashForm::kInt64, &bytes);
  const json e = Decode(bytes)[1][0];
  ASSERT_EQ(e.size(), 9u);
  EXPECT_EQ(e[8], json::parse(R"([["tenant-a"], null])"));
}

TEST(KvEventEncoder, LongArraysAndStringsUseWiderHeads) {
  BlockStoredEvent stored;
  for (int i = 0; i < 20; ++i) stored.block_hashes.push_back(HashOf(static_cast<uint8_t>(i)));
  stored.token_ids.assign(70000, 151643);  // array32 of uint32
  stored.block_size = 3500;
  stored.medium = std::string(40, 'm');  // str8
  std::string bytes;
  EncodeKvEventBatch(1.0, std::vector<KvEvent>{stored}, 3, BlockHashForm::kInt64, &bytes);
  const json batch = Decode(bytes);
  const json& e = batch[1][0];
  EXPECT_EQ(e[1].size(), 20u);
  EXPECT_EQ(e[3].size(), 70000u);
  EXPECT_EQ(e[3][69999], 151643);
  EXPECT_EQ(e[4], 3500);
  EXPECT_EQ(e[6], std::string(40, 'm'));
  EXPECT_EQ(batch[2], 3);
}

}  // namespace
}  // namespace kvserve
