// The KV event stream's messages as the router reads them: vLLM's KVEventBatch, msgpack-encoded
// (docs/kv_events.md; vLLM's vllm/distributed/kv_events.py owns the format). A batch is
//     [ts, [event, ...], data_parallel_rank]
// and each event a tagged struct, the tag being the class name:
//     ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, ...]
//     ["BlockRemoved", block_hashes, medium, ...]
//     ["AllBlocksCleared"]
// vLLM has sent these array-like (older releases) and as maps keyed by field name with the tag
// under "type" (newer ones); both decode. Fields past the ones named here are ignored, missing
// trailing ones are null, so either side may add fields.
//
// A block hash is an integer or a byte string (vLLM's ExternalBlockHash). Both are kept as the
// same 64 bits: an integer as it is (two's complement for a negative one), bytes as their last 8
// read big-endian, which is how vLLM folds the 32-byte digest into its integer form.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kvserve/status.h"

namespace kvserve::router {

struct BlockStoredEvent {
  std::vector<uint64_t> block_hashes;
  std::optional<uint64_t> parent_block_hash;
  int block_size = 0;
  std::optional<int64_t> lora_id;
  std::string medium;  // "" when the event names none
};

struct BlockRemovedEvent {
  std::vector<uint64_t> block_hashes;
  std::string medium;
};

struct AllBlocksClearedEvent {};

using KvEvent = std::variant<BlockStoredEvent, BlockRemovedEvent, AllBlocksClearedEvent>;

struct KvEventBatch {
  double ts = 0;
  std::vector<KvEvent> events;
  std::optional<int64_t> data_parallel_rank;
  int num_unknown_events = 0;  // events of a kind this router does not know, skipped
};

// Decodes one message payload. A malformed payload is InvalidArgument (DataLoss for bytes that
// are not msgpack at all).
Result<KvEventBatch> DecodeKvEventBatch(std::string_view msgpack);

}  // namespace kvserve::router
