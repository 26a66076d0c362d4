// The KV events of vLLM's stream and their MessagePack encoding (docs/kv_events.md).
//
// NOTE (wire form, vLLM's vllm/distributed/kv_events.py as of v0.12): msgspec structs declared
// array_like, tag=True, omit_defaults=True, so each value is a positional array, an event's first
// element is its class name, and trailing fields still at their default are left out:
//   EventBatch       [ts (float64 seconds since the Unix epoch), [event...], data_parallel_rank]
//   BlockStored      ["BlockStored", block_hashes, parent_block_hash | nil, token_ids,
//                     block_size, lora_id (nil), medium, lora_name (nil)(, extra_keys)]
//   BlockRemoved     ["BlockRemoved", block_hashes, medium]
//   AllBlocksCleared ["AllBlocksCleared"]
// extra_keys (one entry per block: nil, or [cache_salt] for a salted prompt's first block) is
// written only when some block has one, as msgspec omits it at its default (None).
// A hash is a uint64 or a 32-byte bin (BlockHashForm); token ids are non-negative integers in
// their shortest form. vLLM's later releases encode the events as maps instead (vLLM PR #42892);
// the positional form is the one every consumer of the stream reads.
//
// The encoder is hand-written for these few forms (arrays, integers, float64, str, bin, nil):
// it controls each form exactly as msgspec writes it, and Debian's msgpack-c cannot be
// installed next to this project's Boost.
//
// Thread safety: pure functions, reentrant.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "events/kv_events_config.h"
#include "util/vllm_block_hash.h"

namespace kvserve {

// vLLM's name for the tier the engine computes from (kvserve's RAM block pool).
inline constexpr const char* kMediumGpu = "GPU";

struct BlockStoredEvent {
  std::vector<VllmBlockHash> block_hashes;         // [num_blocks], a chain
  std::optional<VllmBlockHash> parent_block_hash;  // of the block before the first; none = root
  std::vector<int32_t> token_ids;                  // [num_blocks * block_size]
  int block_size = 0;
  std::string medium = kMediumGpu;
  // Non-empty: block_hashes[0] is the first block of a prompt with this cache salt.
  std::string first_block_salt;
};

struct BlockRemovedEvent {
  std::vector<VllmBlockHash> block_hashes;
  std::string medium = kMediumGpu;
};

struct AllBlocksClearedEvent {};

using KvEvent = std::variant<BlockStoredEvent, BlockRemovedEvent, AllBlocksClearedEvent>;

// Appends the MessagePack EventBatch [ts, events, data_parallel_rank] to *out.
void EncodeKvEventBatch(double ts, std::span<const KvEvent> events, int data_parallel_rank,
                        BlockHashForm form, std::string* out);

}  // namespace kvserve
