// KvEventPublisher: the RAM radix tree's block inserts and evictions published as vLLM's KV event
// stream (docs/kv_events.md), so that routers built for vLLM (llm-d's precise prefix scorer,
// Dynamo's KV router) index kvserve's cache unchanged.
//
// A BlockListener of the KvCacheManager (an observer beside the lower tiers). The engine thread
// only records what happened: the block's kvserve keys and tokens, appended to the open batch,
// which EndStep hands to the publisher thread once per engine step (vLLM publishes one batch per
// scheduler step). The publisher thread turns records into events, encodes each batch, sends it
// on a ZeroMQ PUB socket as the multipart message [topic, seq (8 bytes, big-endian), payload]
// and keeps the last buffer_steps batches for the replay socket (a ROUTER: a request
// [identity, "", start seq (8 bytes, big-endian)] is answered by [identity, "", seq, payload]
// for every kept batch from start on, then [identity, "", -1 (8 bytes), ""]). No socket I/O and
// no hashing ever run on the engine thread.
//
// NOTE (kvserve keys to vLLM hashes): a kvserve block key (block_key.h) names the namespace
// (model, KV dtypes, salt...) and the whole token prefix; vLLM's hash names the salt and the
// prefix only. The publisher thread keeps a map from the key of each block in the tree to its
// vLLM hash: a block's hash chains from its parent's entry (or NONE_HASH, with the namespace's
// cache salt as extra key, for a first block), and the entry is dropped when the block is
// evicted. Because the tree evicts leaves only, a parent is in the map whenever its child joins.
// One engine serves one model, so two namespaces with the same salt never both exist.
//
// NOTE (bursts): the publisher thread wakes for the first batch handed over, then lets later
// steps' batches gather for up to 20 ms before it sends them all (each still its own message with
// its own sequence number): a wake-up of that thread and of ZeroMQ's I/O thread costs more than
// a batch's hashing and encoding, and a busy engine ends a batch every few milliseconds.
//
// NOTE (ordering and batches): sequence numbers count the batches sent, from 0, with no gaps.
// The first batch is AllBlocksCleared (the RAM cache starts empty). Consecutive inserts that
// form a chain are one BlockStored (as vLLM reports a request's newly cached blocks), and
// consecutive evictions one BlockRemoved. Batches wait in a queue of at most max_queue_size;
// past it a step's records join the last queued batch rather than block the engine thread or be
// lost.
//
// Thread safety: OnBlockInserted, OnBlockEvicted, SetNamespaceSalt and EndStep on the engine
// thread (one thread at a time); the accessors and Flush from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "events/kv_event_encoder.h"
#include "events/kv_events_config.h"
#include "kvserve/status.h"
#include "prefix/block_listener.h"

namespace kvserve {

struct KvEventStats {
  uint64_t batches = 0;          // batches sent
  uint64_t stored_blocks = 0;    // block hashes in BlockStored events sent
  uint64_t removed_blocks = 0;   // block hashes in BlockRemoved events sent
  uint64_t replay_requests = 0;  // replay requests answered
  uint64_t merged_batches = 0;   // steps whose records joined a queued batch (a full queue)
  uint64_t unknown_blocks = 0;   // evictions or parents with no hash (never, unless a bug)
};

class KvEventPublisher final : public BlockListener {
 public:
  // Binds (a wildcard, ipc:// or inproc:// endpoint) or connects the PUB socket, binds the
  // replay socket, and starts the publisher thread. Errors (a port in use, a malformed
  // endpoint) name the endpoint. REQUIRES: config.enabled; block_size >= 1.
  static Result<std::unique_ptr<KvEventPublisher>> Create(const KvEventsConfig& config,
                                                          int block_size);
  ~KvEventPublisher() override;  // sends what was handed over, then closes the sockets
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // BlockListener (engine thread): record the block for the open batch.
  void OnBlockInserted(const TreeBlock& b) override;
  void OnBlockEvicted(const TreeBlock& b) override;
  // Engine thread: the namespace with this root key has cache salt `salt` (vLLM's cache_salt,
  // the first block's extra key). Call before its blocks join the tree; unsalted namespaces need
  // no call. The most recently named 65536 salted namespaces are remembered.
  void SetNamespaceSalt(const BlockKey& root_key, const std::string& salt);
  // Engine thread: closes the open batch (if it holds anything) and hands it to the publisher
  // thread. Cheap when nothing happened.
  void EndStep();
  // Blocks until every batch handed over so far has been sent (tests, shutdown).
  void Flush();

  // The endpoints as bound (a wildcard port resolved, e.g. tcp://127.0.0.1:43121), or as given
  // for a connected PUB socket; "" for no replay socket.
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  KvEventStats stats() const;

 private:
  struct Record {
    enum class Kind : uint8_t { kStored, kRemoved };
    Kind kind;
    bool first;  // the namespace's first block (its parent is the root)
    uint32_t token_offset;
    BlockKey key;
    BlockKey parent_key;
    std::string salt;  // first blocks of salted namespaces
  };
  struct Batch {
    double ts = 0;
    bool cleared = false;  // starts with AllBlocksCleared
    std::vector<Record> records;
    std::vector<int32_t> tokens;  // [records of kind kStored * block_size]
    void Clear() {
      ts = 0;
      cleared = false;
      records.clear();
      tokens.clear();
    }
  };
  struct Sockets;
  struct SaltEntry {
    std::string salt;
    uint64_t last_use = 0;
  };

  KvEventPublisher(const KvEventsConfig& config, int block_size, std::unique_ptr<Sockets> sockets);
  void Handover(Batch&& batch);
  void Loop();
  // Publisher thread: the batch's events, the hash map kept in step.
  void BuildEvents(const Batch& batch, std::vector<KvEvent>* events);
  void Send(const Batch& batch);
  void ServiceReplay();

  const KvEventsConfig config_;
  const int block_size_;
  const VllmBlockHash none_hash_;
  std::string endpoint_, replay_endpoint_;

  // Engine thread.
  Batch open_;
  std::unordered_map<BlockKey, SaltEntry> salts_;
  uint64_t salt_serial_ = 0;

  mutable std::mutex mu_;  // guards the queue and the fields below up to the publisher thread's
  std::condition_variable work_cv_, idle_cv_;
  std::deque<Batch> queue_;
  std::vector<Batch> spare_;  // cleared batches for reuse (no allocation in steady state)
  bool busy_ = false;         // the thread holds batches taken from the queue
  bool waiting_ = false;      // the thread waits for a first batch (EndStep wakes it)
  int flushing_ = 0;          // Flush calls waiting (the thread sends without gathering)
  bool stop_ = false;
  uint64_t merged_batches_ = 0;

  // Publisher thread.
  std::unique_ptr<Sockets> sockets_;
  std::unordered_map<BlockKey, VllmBlockHash> hashes_;
  std::deque<std::pair<uint64_t, std::string>> replay_;  // [<= buffer_steps] (seq, payload)
  uint64_t next_seq_ = 0;
  std::vector<KvEvent> events_;
  std::string payload_;

  std::atomic<uint64_t> batches_{0}, stored_blocks_{0}, removed_blocks_{0}, replay_requests_{0},
      unknown_blocks_{0};
  std::thread thread_;
};

}  // namespace kvserve
