#include "events/kv_events_config.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace {

TEST(KvEventsConfig, VllmDefaults) {
  auto c = ParseKvEventsConfig(R"({"enable_kv_cache_events": true})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->enabled);  // publisher defaults to "zmq" when enabled
  EXPECT_EQ(c->endpoint, "tcp://*:5557");
  EXPECT_FALSE(c->replay_endpoint.has_value());
  EXPECT_EQ(c->buffer_steps, 10000);
  EXPECT_EQ(c->hwm, 100000);
  EXPECT_EQ(c->max_queue_size, 100000);
  EXPECT_EQ(c->topic, "");
  EXPECT_EQ(c->hash_seed, "");
  EXPECT_EQ(c->hash_form, BlockHashForm::kInt64);
}

TEST(KvEventsConfig, EveryKey) {
  auto c = ParseKvEventsConfig(
      R"({"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:6000",
          "replay_endpoint": "tcp://*:6001", "buffer_steps": 7, "hwm": 8, "max_queue_size": 9,
          "topic": "kv@pod@model"})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->endpoint, "tcp://127.0.0.1:6000");
  EXPECT_EQ(c->replay_endpoint.value(), "tcp://*:6001");
  EXPECT_EQ(c->buffer_steps, 7);
  EXPECT_EQ(c->hwm, 8);
  EXPECT_EQ(c->max_queue_size, 9);
  EXPECT_EQ(c->topic, "kv@pod@model");
}

TEST(KvEventsConfig, OffUnlessEnabledWithAPublisher) {
  EXPECT_FALSE(ParseKvEventsConfig("{}")->enabled);
  EXPECT_FALSE(ParseKvEventsConfig(R"({"publisher": "zmq"})")->enabled);
  EXPECT_FALSE(
      ParseKvEventsConfig(R"({"enable_kv_cache_events": true, "publisher": "null"})")->enabled);
}

TEST(KvEventsConfig, ErrorsNameTheKey) {
  const auto message = [](std::string_view json) {
    auto c = ParseKvEventsConfig(json);
    return c.ok() ? std::string("ok") : c.status().message();
  };
  EXPECT_NE(message("not json").find("JSON object"), std::string::npos);
  EXPECT_NE(message(R"({"publisher": "kafka"})").find("publisher 'kafka'"), std::string::npos);
  EXPECT_NE(message(R"({"endpoint": "5557"})").find("'endpoint'"), std::string::npos);
  EXPECT_NE(message(R"({"buffer_steps": "many"})").find("'buffer_steps'"), std::string::npos);
  EXPECT_NE(message(R"({"max_queue_size": 0})").find("'max_queue_size'"), std::string::npos);
  EXPECT_NE(message(R"({"enable_kv_cache_events": 1})").find("true or false"), std::string::npos);
  EXPECT_NE(message(R"({"bind": true})").find("unknown key 'bind'"), std::string::npos);
}

TEST(KvEventsConfig, HashForms) {
  EXPECT_EQ(*ParseBlockHashForm("int"), BlockHashForm::kInt64);
  EXPECT_EQ(*ParseBlockHashForm("bytes"), BlockHashForm::kBytes);
  EXPECT_FALSE(ParseBlockHashForm("hex").ok());
}

}  // namespace
}  // namespace kvserve
