#include "router/kv_events.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvserve::router {
namespace {

using nlohmann::json;

std::string Pack(const json& j) {
  const std::vector<uint8_t> bytes = json::to_msgpack(j);
  return std::string(bytes.begin(), bytes.end());
}

TEST(KvEventsTest, DecodesTheArrayLikeBatchVllmSends) {
  const json batch = json::array(
      {1700000000.5,
       json::array({json::array({"BlockStored", json::array({11u, 12u}), nullptr,
                                 json::array({1, 2, 3, 4, 5, 6, 7, 8}), 4, nullptr, "GPU"}),
                    json::array({"BlockRemoved", json::array({11u}), "GPU"}),
                    json::array({"AllBlocksCleared"})}),
       0});
  Result<KvEventBatch> b = DecodeKvEventBatch(Pack(batch));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_DOUBLE_EQ(b->ts, 1700000000.5);
  EXPECT_EQ(b->data_parallel_rank, 0);
  ASSERT_EQ(b->events.size(), 3u);
  const auto& stored = std::get<BlockStoredEvent>(b->events[0]);
  EXPECT_EQ(stored.block_hashes, (std::vector<uint64_t>{11, 12}));
  EXPECT_FALSE(stored.parent_block_hash.has_value());
  EXPECT_EQ(stored.block_size, 4);
  EXPECT_EQ(stored.medium, "GPU");
  const auto& removed = std::get<BlockRemovedEvent>(b->events[1]);
  EXPECT_EQ(removed.block_hashes, (std::vector<uint64_t>{11}));
  EXPECT_EQ(removed.medium, "GPU");
  EXPECT_TRUE(std::holds_alternative<AllBlocksClearedEvent>(b->events[2]));
}

TEST(KvEventsTest, OlderBatchesWithoutMediumOrRankDecode) {
  const json batch =
      json::array({1.0, json::array({json::array({"BlockStored", json::array({5u}), 4u,
                                                  json::array({1, 2}), 2, nullptr}),
                                     json::array({"BlockRemoved", json::array({5u})})})});
  Result<KvEventBatch> b = DecodeKvEventBatch(Pack(batch));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_FALSE(b->data_parallel_rank.has_value());
  EXPECT_EQ(std::get<BlockStoredEvent>(b->events[0]).parent_block_hash, 4u);
  EXPECT_EQ(std::get<BlockStoredEvent>(b->events[0]).medium, "");
  EXPECT_EQ(std::get<BlockRemovedEvent>(b->events[1]).medium, "");
}

TEST(KvEventsTest, DecodesTheMapFormWithTheTagUnderType) {
  const json batch = {{"ts", 2.0},
                      {"events", json::array({{{"type", "BlockStored"},
                                               {"block_hashes", json::array({7u})},
                                               {"parent_block_hash", nullptr},
                                               {"token_ids", json::array({1, 2})},
                                               {"block_size", 2},
                                               {"medium", "CPU"}},
                                              {{"type", "AllBlocksCleared"}}})},
                      {"data_parallel_rank", 1}};
  Result<KvEventBatch> b = DecodeKvEventBatch(Pack(batch));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_EQ(b->events.size(), 2u);
  EXPECT_EQ(std::get<BlockStoredEvent>(b->events[0]).block_hashes, std::vector<uint64_t>{7});
  EXPECT_EQ(std::get<BlockStoredEvent>(b->events[0]).medium, "CPU");
  EXPECT_EQ(b->data_parallel_rank, 1);
}

TEST(KvEventsTest, ByteHashesFoldToTheirLastEightBytesAndNegativeIntegersToTwosComplement) {
  std::vector<uint8_t> digest(32, 0);
  for (size_t i = 0; i < 32; ++i) digest[i] = static_cast<uint8_t>(i);
  const json batch =
      json::array({0.0, json::array({json::array(
                            {"BlockRemoved", json::array({json::binary(digest), -1}), nullptr})})});
  Result<KvEventBatch> b = DecodeKvEventBatch(Pack(batch));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(std::get<BlockRemovedEvent>(b->events[0]).block_hashes,
            (std::vector<uint64_t>{0x18191a1b1c1d1e1full, ~uint64_t{0}}));
}

TEST(KvEventsTest, UnknownEventsAreSkippedAndCounted) {
  const json batch = json::array(
      {0.0, json::array({json::array({"BlockPinned", 1}), json::array({"AllBlocksCleared"})})});
  Result<KvEventBatch> b = DecodeKvEventBatch(Pack(batch));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->num_unknown_events, 1);
  EXPECT_EQ(b->events.size(), 1u);
}

TEST(KvEventsTest, MalformedBatchesAreErrors) {
  EXPECT_EQ(DecodeKvEventBatch("\xc1").status().code(), StatusCode::kDataLoss);
  EXPECT_FALSE(DecodeKvEventBatch(Pack(json::array({1.0}))).ok());
  EXPECT_FALSE(DecodeKvEventBatch(Pack(json::array({1.0, 5}))).ok());
  EXPECT_FALSE(
      DecodeKvEventBatch(Pack(json::array({1.0, json::array({json::array({"BlockStored", "x"})})})))
          .ok());
  EXPECT_FALSE(
      DecodeKvEventBatch(
          Pack(json::array({1.0, json::array({json::array({"BlockStored", json::array({1u}),
                                                           nullptr, json::array(), 0})})})))
          .ok());  // block_size 0
}

}  // namespace
}  // namespace kvserve::router
