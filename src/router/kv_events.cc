#include "router/kv_events.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace kvserve::router {

using nlohmann::json;

namespace {

std::optional<uint64_t> HashBits(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) return static_cast<uint64_t>(v.get<int64_t>());
  if (v.is_binary()) {
    const auto& bytes = v.get_binary();
    uint64_t bits = 0;
    const size_t from = bytes.size() > 8 ? bytes.size() - 8 : 0;
    for (size_t i = from; i < bytes.size(); ++i) bits = (bits << 8) | bytes[i];
    return bits;
  }
  return std::nullopt;
}

// One field of an event: by position in the array form (after the tag), by name in the map form.
// Null when absent.
const json& Field(const json& event, size_t index, const char* name) {
  static const json kNull;
  if (event.is_array()) return index + 1 < event.size() ? event[index + 1] : kNull;
  auto it = event.find(name);
  return it == event.end() ? kNull : *it;
}

Status Hashes(const json& v, const char* what, std::vector<uint64_t>* out) {
  if (!v.is_array()) return InvalidArgument(fmt::format("{}.block_hashes is not an array", what));
  out->reserve(v.size());
  for (const json& h : v) {
    const std::optional<uint64_t> bits = HashBits(h);
    if (!bits)
      return InvalidArgument(fmt::format("{} has a block hash of type {}", what, h.type_name()));
    out->push_back(*bits);
  }
  return Status::Ok();
}

Status Medium(const json& v, const char* what, std::string* out) {
  if (v.is_null()) return Status::Ok();
  if (!v.is_string()) return InvalidArgument(fmt::format("{}.medium is not a string", what));
  *out = v.get<std::string>();
  return Status::Ok();
}

Status DecodeEvent(const json& e, KvEventBatch* batch) {
  std::string tag;
  if (e.is_array() && !e.empty() && e[0].is_string()) {
    tag = e[0].get<std::string>();
  } else if (e.is_object() && e.contains("type") && e["type"].is_string()) {
    tag = e["type"].get<std::string>();
  } else {
    return InvalidArgument("an event is neither [tag, fields...] nor {\"type\": tag, ...}");
  }
  if (tag == "BlockStored") {
    BlockStoredEvent s;
    KV_RETURN_IF_ERROR(Hashes(Field(e, 0, "block_hashes"), "BlockStored", &s.block_hashes));
    const json& parent = Field(e, 1, "parent_block_hash");
    if (!parent.is_null()) {
      s.parent_block_hash = HashBits(parent);
      if (!s.parent_block_hash)
        return InvalidArgument("BlockStored.parent_block_hash is not a hash");
    }
    const json& size = Field(e, 3, "block_size");
    if (!size.is_number_integer() || size.get<int64_t>() < 1 || size.get<int64_t>() > (1 << 20)) {
      return InvalidArgument("BlockStored.block_size is not a positive integer");
    }
    s.block_size = static_cast<int>(size.get<int64_t>());
    const json& lora = Field(e, 4, "lora_id");
    if (lora.is_number_integer()) s.lora_id = lora.get<int64_t>();
    KV_RETURN_IF_ERROR(Medium(Field(e, 5, "medium"), "BlockStored", &s.medium));
    batch->events.emplace_back(std::move(s));
  } else if (tag == "BlockRemoved") {
    BlockRemovedEvent r;
    KV_RETURN_IF_ERROR(Hashes(Field(e, 0, "block_hashes"), "BlockRemoved", &r.block_hashes));
    KV_RETURN_IF_ERROR(Medium(Field(e, 1, "medium"), "BlockRemoved", &r.medium));
    batch->events.emplace_back(std::move(r));
  } else if (tag == "AllBlocksCleared") {
    batch->events.emplace_back(AllBlocksClearedEvent{});
  } else {
    ++batch->num_unknown_events;
  }
  return Status::Ok();
}

}  // namespace

Result<KvEventBatch> DecodeKvEventBatch(std::string_view msgpack) {
  json root;
  try {
    root = json::from_msgpack(msgpack.begin(), msgpack.end());
  } catch (const json::exception& e) {
    return DataLoss(fmt::format("a KV event batch is not msgpack: {}", e.what()));
  }
  const json* ts = nullptr;
  const json* events = nullptr;
  const json* rank = nullptr;
  if (root.is_array() && root.size() >= 2) {
    ts = &root[0];
    events = &root[1];
    if (root.size() >= 3) rank = &root[2];
  } else if (root.is_object() && root.contains("events")) {
    events = &root["events"];
    if (root.contains("ts")) ts = &root["ts"];
    if (root.contains("data_parallel_rank")) rank = &root["data_parallel_rank"];
  } else {
    return InvalidArgument("a KV event batch is neither [ts, events, rank] nor a map with events");
  }
  KvEventBatch batch;
  if (ts != nullptr && ts->is_number()) batch.ts = ts->get<double>();
  if (rank != nullptr && rank->is_number_integer()) batch.data_parallel_rank = rank->get<int64_t>();
  if (!events->is_array()) return InvalidArgument("a KV event batch's events are not an array");
  batch.events.reserve(events->size());
  for (const json& e : *events) KV_RETURN_IF_ERROR(DecodeEvent(e, &batch));
  return batch;
}

}  // namespace kvserve::router
