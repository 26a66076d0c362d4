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
// NOTE (lower tiers, tier_observer.h): as a TierObserver the publisher also announces what the
// disk and Redis tiers hold, with their own medium (kMediumDisk, kMediumRedis). The map from
// kvserve keys to vLLM hashes then covers every block some medium holds, with a bit per medium
// announced; an entry goes when no medium holds it and no tier write of it is in flight. The
// engine thread records each queued tier write (OnTierWriteQueued) in the open batch like an
// insert, so the publisher thread learns its tokens and parent in the engine's order. The
// tiers' own reports (stored, removed, write done) come from I/O threads into a second queue
// under the same mutex (a push, nothing more) and are turned into events in their arrival order,
// which for one key is the order the tier changed (see tier_observer.h): so a BlockStored of a
// medium never follows that medium's BlockRemoved of the same block. A report whose write the
// publisher thread has not seen queued yet (still in the open batch) waits, with every report
// after it, for the engine's next batch. Tier events are batches of their own.
//
// Thread safety: OnBlockInserted, OnBlockEvicted, OnTierWriteQueued, SetNamespaceSalt,
// SetUnsaltedRoot and EndStep on the engine thread (one thread at a time); OnTierStored,
// OnTierRemoved, OnTierWriteDone and OnTierSnapshot from any thread; the accessors and Flush
// from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "events/kv_event_encoder.h"
#include "events/kv_events_config.h"
#include "kvserve/status.h"
#include "prefix/block_listener.h"
#include "prefix/tier_observer.h"

namespace kvserve {

struct KvEventStats {
  uint64_t batches = 0;          // batches sent
  uint64_t stored_blocks = 0;    // block hashes in BlockStored events sent
  uint64_t removed_blocks = 0;   // block hashes in BlockRemoved events sent
  uint64_t replay_requests = 0;  // replay requests answered
  uint64_t merged_batches = 0;   // steps whose records joined a queued batch (a full queue)
  uint64_t unknown_blocks = 0;   // evictions or parents with no hash (never, unless a bug)
  uint64_t tier_stored_blocks = 0;   // of stored_blocks, on the disk or Redis medium
  uint64_t tier_removed_blocks = 0;  // of removed_blocks, on the disk or Redis medium
  // Lower-tier records not announced for now: a restarted disk tier's records of salted
  // namespaces (the salt is not in the record) or whose parent chain is gone, until RAM computes
  // or loads the block (its name is known then) or the tier drops them.
  uint64_t unnamed_tier_blocks = 0;
};

// The media of kvserve's tiers (docs/kv_events.md, "Media").
inline constexpr const char* kMediumDisk = "DISK";
inline constexpr const char* kMediumRedis = "REDIS";

class KvEventPublisher final : public BlockListener, public TierObserver {
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
  // Engine thread, before the tiers are attached: the root key of the namespace without a salt,
  // the one a restarted disk tier's first blocks can be named from.
  void SetUnsaltedRoot(const BlockKey& root_key) { unsalted_root_ = root_key; }
  // Engine thread: closes the open batch (if it holds anything) and hands it to the publisher
  // thread. Cheap when nothing happened.
  void EndStep();
  // Blocks until every batch handed over so far has been sent, and every tier report that can
  // be (tests, shutdown).
  void Flush();

  // TierObserver.
  void OnTierWriteQueued(const TreeBlock& b) override;
  void OnTierWriteDone(const BlockKey& key) override;
  void OnTierStored(std::string_view tier, const BlockKey& key) override;
  void OnTierRemoved(std::string_view tier, const BlockKey& key) override;
  void OnTierSnapshot(std::string_view tier, std::vector<TierRecordInfo> records) override;

  // The endpoints as bound (a wildcard port resolved, e.g. tcp://127.0.0.1:43121), or as given
  // for a connected PUB socket; "" for no replay socket.
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  KvEventStats stats() const;

 private:
  struct Record {
    // kPinned: a tier write of the block was queued (OnTierWriteQueued).
    enum class Kind : uint8_t { kStored, kRemoved, kPinned };
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
    std::vector<int32_t> tokens;  // [records of kind kStored or kPinned * block_size]
    void Clear() {
      ts = 0;
      cleared = false;
      records.clear();
      tokens.clear();
    }
  };
  // A lower tier's report (tier_observer.h).
  struct TierReport {
    enum class Kind : uint8_t { kStored, kRemoved, kWriteDone, kSnapshot };
    Kind kind;
    int medium = 0;  // kRam... index
    BlockKey key;
    uint64_t pins_needed = 0;  // kStored, kWriteDone: pins the engine had recorded by then
    std::vector<TierRecordInfo> records;  // kSnapshot
    BlockKey unsalted_root;               // kSnapshot
  };
  // What the publisher thread knows of a block some medium holds (or a tier write pins).
  struct Entry {
    VllmBlockHash hash;
    VllmBlockHash parent;  // the parent's hash; none_hash_ for a first block
    bool first = false;
    std::string salt;             // first blocks of salted namespaces
    std::vector<int32_t> tokens;  // kept while a tier write is in flight (pins > 0)
    uint8_t media = 0;            // bit m: announced as held on medium m
    uint32_t pins = 0;            // tier writes queued and not done
  };
  enum Medium : int { kRam = 0, kDisk = 1, kRedis = 2, kNumMedia = 3 };
  struct Sockets;
  struct SaltEntry {
    std::string salt;
    uint64_t last_use = 0;
  };

  KvEventPublisher(const KvEventsConfig& config, int block_size, std::unique_ptr<Sockets> sockets);
  void Append(Record::Kind kind, const TreeBlock& b);
  void Handover(Batch&& batch);
  void PushTierReport(TierReport&& report);
  void Loop();
  // Publisher thread: the batch's events, the hash map kept in step.
  void BuildEvents(const Batch& batch, std::vector<KvEvent>* events);
  // Publisher thread: the events of the tier reports that can be named now (all of them when
  // `final`), taken from the front of tier_work_. False when the front waits for a batch.
  bool BuildTierEvents(bool final, std::vector<KvEvent>* events);
  void BuildSnapshotEvents(const TierReport& report, std::vector<KvEvent>* events);
  // The entry of a block joining a medium or pinned: found, or made from its parent's entry
  // (null when the parent is unknown).
  Entry* FindOrMakeEntry(const BlockKey& key, const BlockKey& parent_key, bool first,
                         const std::string& salt, std::span<const int32_t> tokens);
  void EmitStored(const Entry& e, int medium, std::span<const int32_t> tokens,
                  std::vector<KvEvent>* events);
  void EmitRemoved(const Entry& e, int medium, std::vector<KvEvent>* events);
  void EraseIfUnused(std::unordered_map<BlockKey, Entry>::iterator it);
  // Announces the lower-tier records of `key` (holding `tokens`) that were waiting for its name.
  void NameWaitingRecords(const BlockKey& key, Entry& e, std::span<const int32_t> tokens,
                          std::vector<KvEvent>* events);
  void Send(double ts, const std::vector<KvEvent>& events);
  void SendBatch(const Batch& batch);
  void ServiceReplay();

  const KvEventsConfig config_;
  const int block_size_;
  const VllmBlockHash none_hash_;
  std::string endpoint_, replay_endpoint_;

  // Engine thread.
  Batch open_;
  BlockKey unsalted_root_;
  std::atomic<uint64_t> pins_recorded_{0};  // kPinned records made (read by I/O threads)
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
  std::deque<TierReport> tier_queue_;  // reports not yet taken by the publisher thread
  size_t tier_pending_ = 0;            // reports taken and not yet turned into events
  bool tier_blocked_ = false;          // the front report waits for an engine batch

  // Publisher thread.
  std::unique_ptr<Sockets> sockets_;
  std::unordered_map<BlockKey, Entry> entries_;
  // Per medium, the records of a snapshot that could not be named yet: announced when their
  // block gets an entry (RAM computes or loads it), forgotten when the tier drops them.
  std::unordered_set<BlockKey> unnamed_[kNumMedia];
  std::deque<TierReport> tier_work_;
  uint64_t pins_processed_ = 0;                          // kPinned records the thread has seen
  std::deque<std::pair<uint64_t, std::string>> replay_;  // [<= buffer_steps] (seq, payload)
  uint64_t next_seq_ = 0;
  std::vector<KvEvent> events_;
  std::string payload_;

  std::atomic<uint64_t> batches_{0}, stored_blocks_{0}, removed_blocks_{0}, replay_requests_{0},
      unknown_blocks_{0}, tier_stored_blocks_{0}, tier_removed_blocks_{0}, unnamed_tier_blocks_{0};
  std::thread thread_;
};

}  // namespace kvserve
