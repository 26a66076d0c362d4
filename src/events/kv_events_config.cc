#include "events/kv_events_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>

namespace kvserve {
namespace {

Status IntField(const nlohmann::json& j, const char* key, int lo, int* out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Ok();
  if (!it->is_number_integer()) {
    return InvalidArgument(fmt::format("kv events config: '{}' must be an integer", key));
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > (int64_t{1} << 30)) {
    return InvalidArgument(
        fmt::format("kv events config: '{}' = {} must be in [{}, 2^30]", key, v, lo));
  }
  *out = static_cast<int>(v);
  return Status::Ok();
}

Status StringField(const nlohmann::json& j, const char* key, std::string* out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Ok();
  if (!it->is_string()) {
    return InvalidArgument(fmt::format("kv events config: '{}' must be a string", key));
  }
  *out = it->get<std::string>();
  return Status::Ok();
}

// A ZeroMQ endpoint the publisher can bind or connect: tcp://, ipc:// or inproc://.
Status CheckEndpoint(const char* key, const std::string& endpoint) {
  for (std::string_view scheme : {"tcp://", "ipc://", "inproc://"}) {
    if (endpoint.size() > scheme.size() && endpoint.compare(0, scheme.size(), scheme) == 0) {
      return Status::Ok();
    }
  }
  return InvalidArgument(
      fmt::format("kv events config: '{}' = \"{}\" must be a ZeroMQ endpoint such as tcp://*:5557",
                  key, endpoint));
}

}  // namespace

Result<KvEventsConfig> ParseKvEventsConfig(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument(
        "kv events config must be a JSON object, e.g. {\"enable_kv_cache_events\": true, "
        "\"publisher\": \"zmq\", \"endpoint\": \"tcp://*:5557\"}");
  }
  static constexpr std::string_view kKeys[] = {"enable_kv_cache_events", "publisher",    "endpoint",
                                               "replay_endpoint",        "buffer_steps", "hwm",
                                               "max_queue_size",         "topic"};
  for (const auto& item : j.items()) {
    if (std::find(std::begin(kKeys), std::end(kKeys), item.key()) == std::end(kKeys)) {
      return InvalidArgument(fmt::format(
          "kv events config: unknown key '{}' (known: enable_kv_cache_events, publisher, "
          "endpoint, replay_endpoint, buffer_steps, hwm, max_queue_size, topic)",
          item.key()));
    }
  }
  KvEventsConfig c;
  bool enable = false;
  if (auto it = j.find("enable_kv_cache_events"); it != j.end()) {
    if (!it->is_boolean()) {
      return InvalidArgument("kv events config: 'enable_kv_cache_events' must be true or false");
    }
    enable = it->get<bool>();
  }
  // vLLM: a missing publisher is "zmq" when events are enabled, else "null".
  std::string publisher = enable ? "zmq" : "null";
  KV_RETURN_IF_ERROR(StringField(j, "publisher", &publisher));
  if (publisher != "zmq" && publisher != "null") {
    return InvalidArgument(fmt::format(
        "kv events config: publisher '{}' is not supported (use \"zmq\", or \"null\" for none)",
        publisher));
  }
  c.enabled = enable && publisher == "zmq";
  KV_RETURN_IF_ERROR(StringField(j, "endpoint", &c.endpoint));
  KV_RETURN_IF_ERROR(CheckEndpoint("endpoint", c.endpoint));
  if (auto it = j.find("replay_endpoint"); it != j.end() && !it->is_null()) {
    std::string replay;
    KV_RETURN_IF_ERROR(StringField(j, "replay_endpoint", &replay));
    KV_RETURN_IF_ERROR(CheckEndpoint("replay_endpoint", replay));
    c.replay_endpoint = std::move(replay);
  }
  KV_RETURN_IF_ERROR(IntField(j, "buffer_steps", 0, &c.buffer_steps));
  KV_RETURN_IF_ERROR(IntField(j, "hwm", 0, &c.hwm));
  KV_RETURN_IF_ERROR(IntField(j, "max_queue_size", 1, &c.max_queue_size));
  KV_RETURN_IF_ERROR(StringField(j, "topic", &c.topic));
  return c;
}

Result<BlockHashForm> ParseBlockHashForm(std::string_view name) {
  if (name == "int") return BlockHashForm::kInt64;
  if (name == "bytes") return BlockHashForm::kBytes;
  return InvalidArgument(fmt::format("'{}' is not a block hash form (use int or bytes)", name));
}

}  // namespace kvserve
