// KvEventsConfig: the KV event stream's settings (docs/kv_events.md). `--kv-events-config` takes
// the JSON object vLLM's KVEventsConfig takes, with the same keys and defaults:
//   enable_kv_cache_events (false), publisher ("zmq" when enabled, else "null"; "null" = off),
//   endpoint ("tcp://*:5557"), replay_endpoint (none), buffer_steps (10000), hwm (100000),
//   max_queue_size (100000), topic ("").
// The hash seed (`--kv-events-hash-seed`, vLLM's PYTHONHASHSEED) and the form of the hashes on
// the wire (`--kv-events-block-hashes`, vLLM's VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES) are flags of
// their own, as vLLM takes them from its environment.
//
// Plain value; thread-safe to copy.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kvserve/status.h"

namespace kvserve {

// How a block hash is written in an event: the 64-bit integer (vLLM's default) or the 32 bytes.
enum class BlockHashForm { kInt64, kBytes };

struct KvEventsConfig {
  bool enabled = false;  // enable_kv_cache_events and a publisher other than "null"
  std::string endpoint = "tcp://*:5557";
  std::optional<std::string> replay_endpoint;
  int buffer_steps = 10000;     // batches kept for the replay socket
  int hwm = 100000;             // the PUB socket's send high-water mark (messages)
  int max_queue_size = 100000;  // batches waiting for the publisher thread; more are dropped
  std::string topic;
  // The PYTHONHASHSEED-style seed of the first block's parent hash (vllm_block_hash.h). The
  // default "" is what llm-d's KV-cache indexer assumes when its hashSeed is not set; every
  // replica and every router of a fleet must use the same seed.
  std::string hash_seed;
  BlockHashForm hash_form = BlockHashForm::kInt64;
};

// Parses --kv-events-config's JSON (the fields above that vLLM's KVEventsConfig has; unknown
// keys, wrong types, out-of-range numbers and unknown publishers are errors that name the key).
// The seed and the hash form keep their defaults.
Result<KvEventsConfig> ParseKvEventsConfig(std::string_view json);

// "int" or "bytes".
Result<BlockHashForm> ParseBlockHashForm(std::string_view name);

}  // namespace kvserve
