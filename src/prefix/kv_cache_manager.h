// KvCacheManager: the KV side as the scheduler sees it. It owns the BlockPool (block ids and
// ref counts), the RadixTree of cached full blocks, and every live sequence's block table.
// Nothing here touches K/V bytes: where the engine must copy bytes (copy-on-write after Fork)
// the manager returns a BlockCopy for the engine to perform in KvStorage.
//
// A sequence's life: BeginSequence (match + lock the longest cached prefix) -> Allocate before
// each step (evicting cached blocks as needed; false = the caller must preempt someone) ->
// Commit after each step (full computed blocks join the tree) -> EndSequence (locks released,
// private blocks freed, committed blocks stay cached until memory is needed).
//
// Invariants (CheckInvariants):
//   - every block is free, cached-evictable or in use: free + cached + in_use == total;
//   - a block's ref count equals the number of block tables that hold it;
//   - a sequence's first num_committed blocks are exactly the tree path it locks, so a tree
//     node is locked iff its block is in use (lock_ref > 0 <=> ref_count > 0);
//   - only full blocks are shared; a sequence's last partial block is private to it.
//
// NOTE (token-granular hits): when the prompt goes on into a cached block but leaves it (or
// ends) inside it, BeginSequence copies the block into a new private block through the block
// copier the engine sets, and the matched m slots count as cached: K/V of a slot depend only on
// the tokens up to it, so those slots hold exactly what recomputing would write. The slots after
// m are overwritten by the sequence's own tokens before anything reads them.
// With prefix caching disabled the facade is the same, but nothing is matched or inserted.
//
// NOTE (the window group): layers that attend to their last tokens only (sliding windows) may
// keep their K/V in a second, smaller pool. Every sequence then has a second table, index for
// index beside its block table, whose entries before its window are released (kNoWindowBlock):
// a query at slot p reads the group's slots >= p - window_reach + 1 only, and a block that no
// later query reads goes back. A block of the group that was committed with its full block
// stays beside that tree node while nothing needs it (cached-evictable, least recently released
// first, the blocks of pinned and held prefixes last) and goes when the pool runs short or the
// node is evicted. A prefix hit at depth d needs the group's blocks of the window before d (and
// of a partial block's source): BeginSequence takes the deepest depth where they are all still
// cached, so the hits are the prefixes whose last window was not evicted yet (docs/kv_cache.md).
//
// Thread safety: none; the engine thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kvserve/status.h"
#include "prefix/cache_namespace.h"
#include "prefix/eviction_policy.h"
#include "prefix/radix_tree.h"
#include "util/strong_id.h"

namespace kvserve {

struct KvCacheConfig {
  int num_blocks = 0;
  int block_size = 16;
  bool enable_prefix_caching = true;
  EvictionPolicyKind eviction_policy = EvictionPolicyKind::kLru;
  double max_pinned_fraction = 0.25;   // share of all blocks that Pin may hold
  bool partial_block_hits = true;      // token-granular hits (needs a block copier)
  double max_retained_fraction = 0.5;  // share of all blocks that holds may keep (retention)
  // Milliseconds since the Unix epoch, for hold deadlines; null = the system clock. Tests set
  // their own so that no test waits for a TTL to run out.
  std::function<int64_t()> clock;
  // The window group (NOTE above): its pool's blocks (0 = no group) and how far back a query
  // reads it, in slots (the widest window plus what a kernel's aligned chunk reads before it).
  int num_window_blocks = 0;
  int window_reach = 0;
};

// A window-group table entry whose block was released (before the sequence's window).
inline constexpr BlockId kNoWindowBlock{-1};

struct KvCacheStats {
  int num_blocks = 0;
  int num_free = 0;
  int num_cached = 0;  // cached-evictable (ref 0, in the tree; pinned ones included)
  int num_in_use = 0;
  int num_pinned = 0;
  int num_held = 0;                  // blocks held by retention now (HoldPrefix, HoldExplicit)
  int max_held = 0;                  // the retained share, in blocks
  int num_explicit_holds = 0;        // explicit caches still held
  int64_t tier_retained_blocks = 0;  // blocks handed to lower tiers with a deadline
  int num_tree_blocks = 0;           // all blocks in the tree, in use or not
  int64_t query_tokens = 0;          // prompt tokens looked up by BeginSequence
  int64_t hit_tokens = 0;            // of which found cached
  int64_t partial_hit_tokens = 0;    // of which in copied partial blocks
  int64_t evicted_blocks = 0;
  // The window group (zero without one): its pool's blocks by state.
  int num_window_blocks = 0;
  int window_free = 0;
  int window_cached = 0;  // ref 0, kept beside a tree node
  int window_in_use = 0;
  int64_t window_evicted = 0;
};

// The engine copies every layer's K/V of `src` into `dst` before the next forward pass.
struct BlockCopy {
  BlockId src;
  BlockId dst;
};

// What EvictBlocks (or CompactBlocks) changed, for the engine to carry out on the bytes before
// the next forward pass: first the copies, then the keys of `moved` (the blocks that followed the
// dropped ones, in table order, copies included) re-rotated down by the evicted tokens' count
// (CompactBlocks: the whole table, compacted per layer and head by the engine).
struct BlockEviction {
  std::vector<BlockCopy> copies;
  std::vector<BlockId> moved;
  int evicted_tokens = 0;
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheConfig& config);
  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  const KvCacheConfig& config() const { return config_; }
  int block_size() const { return config_.block_size; }
  int num_blocks() const { return config_.num_blocks; }
  bool prefix_caching() const { return tree_ != nullptr; }
  // Blocks one sequence could get if every evictable block were evicted and nothing else ran.
  int max_blocks_for_one_sequence() const;

  // Starts a sequence over `tokens` (its prompt, or prompt + generated when resuming after a
  // preemption): finds the longest cached full-block prefix, capped so that at least the last
  // token is computed (its logits are needed), takes it into the block table and locks it. With
  // `partial_block` (and a block copier set), the tokens that go on into a cached block are
  // reused too: that block is copied into a new private block now (when one can be had).
  // Counts tokens.size() query tokens and the returned number of hit tokens once the sequence
  // gets its first successful Allocate (an admission that fails and is retried counts once).
  // Returns the number of cached tokens. REQUIRES: seq not live.
  // With count_tokens false nothing is counted (a sequence that only holds a prefix while
  // lower tiers load what follows it).
  // A hit is at most max_hit_tokens long (a sequence that evicts inside itself holds no more
  // slots than its budget).
  int BeginSequence(SeqId seq, CacheNamespace ns, std::span<const TokenId> tokens, int32_t priority,
                    bool count_tokens = true, bool partial_block = true,
                    int max_hit_tokens = std::numeric_limits<int>::max());
  // Copies every layer's K/V of block src into block dst, at once (the engine owns the bytes).
  // Without one, hits are whole blocks only. With a window group, this copies the other
  // layers, and the window copier the group's (both needed for token-granular hits).
  void set_block_copier(std::function<void(BlockId src, BlockId dst)> copier);
  void set_window_block_copier(std::function<void(BlockId src, BlockId dst)> copier);
  bool has_window_group() const { return config_.num_window_blocks > 0; }
  // The chained key (block_key.h) of the sequence's last committed block, or its namespace's
  // root key when it has none: where the keys of its next blocks chain from.
  BlockKey PrefixKey(SeqId seq) const;
  // Blocks Allocate could hand out now without preempting anyone (free + evictable).
  int num_allocatable_blocks() const;
  // Told of every block that joins or leaves the tree (lower tiers). No-op without caching.
  void set_block_listener(BlockListener* listener);
  // Also told of every block that joins or leaves the tree, after the listener (the KV event
  // publisher). Holds that RAM does not keep count as kept by the lower tiers only when there is
  // a listener: an observer stores nothing. No-op without caching.
  void add_block_observer(BlockListener* observer);
  // Cached tokens BeginSequence would find now, without side effects.
  int PeekCachedTokens(CacheNamespace ns, std::span<const TokenId> tokens) const;
  // NOTE (tokens and slots): every count of tokens below is of the sequence's tokens, from its
  // first. Until the sequence evicts inside itself (EvictBlocks) token i is slot i; after that
  // the slot is the token's index minus evicted_tokens().
  //
  // Makes the block table cover `num_tokens` tokens' slots, evicting cached blocks when the free
  // list is short. All or nothing: false (and no change) when even eviction cannot make room.
  bool Allocate(SeqId seq, int num_tokens);
  std::span<const BlockId> block_table(SeqId seq) const;
  // The window group's table: as long as block_table, kNoWindowBlock before the window. Empty
  // without a window group.
  std::span<const BlockId> window_table(SeqId seq) const;
  // Releases the blocks past those `num_tokens` slots need (they held only rejected speculative
  // drafts). REQUIRES: they are not committed.
  void Shrink(SeqId seq, int num_tokens);
  // Inserts the full blocks among tokens[0, num_computed) that are not in the tree yet. A block
  // whose tokens are already cached (computed twice concurrently) is swapped for the cached one
  // (identical bytes) and the duplicate freed. No-op without prefix caching.
  // With a window group, num_computed is also where the sequence's next query is: the group's
  // blocks before that query's window are released (REQUIRES: it never goes back).
  void Commit(SeqId seq, std::span<const TokenId> tokens, int num_computed);
  // Evicts tokens inside a sequence (a sliding window, attention sinks): drops blocks
  // [first, first + count) of its table, so the slots after them move down by count blocks.
  // The blocks after the dropped ones will be edited (their keys re-rotated), so any of them
  // that is shared (in the prefix tree, or held by another sample's table) is first replaced by
  // a private copy. The sequence keeps the tree path of its blocks before `first` (still valid:
  // nothing before them changed) and commits nothing more (DESIGN.md: an edited sequence stops
  // committing after its first edited position). Returns the copies and moved blocks for the
  // engine; nullopt, and no change, when the copies' blocks cannot be had.
  // REQUIRES: 0 <= first, count >= 1, first + count <= the table's blocks.
  std::optional<BlockEviction> EvictBlocks(SeqId seq, int first, int count);
  // Token-level eviction (h2o, snapkv): the engine drops count blocks' worth of tokens chosen
  // per layer and head, anywhere in the sequence, and compacts the rest to the front. Every
  // block may be edited, so every shared one is first replaced by a private copy and the
  // sequence gives up its tree path (the tree's blocks stay valid) and commits nothing more.
  // The table keeps its blocks: the last count blocks' slots are free for the next tokens.
  // Returns the copies and, as `moved`, the whole table (after the copies); nullopt, and no
  // change, when the copies' blocks cannot be had. REQUIRES: 1 <= count <= the table's blocks.
  std::optional<BlockEviction> CompactBlocks(SeqId seq, int count);
  // Tokens the sequence evicted inside itself (0 until EvictBlocks).
  int evicted_tokens(SeqId seq) const { return Get(seq).evicted; }
  // Releases the sequence's locks and blocks. Committed blocks stay cached.
  void EndSequence(SeqId seq);
  // Starts `child` as a copy of `parent` whose first num_computed slots hold K/V: full blocks
  // are shared (ref counted); a partial last block is copied into a new block, returned for the
  // engine to copy (the window group's copy is made at once, through the window copier).
  // ResourceExhausted (and no child) when no block can be had for the copy.
  Result<std::optional<BlockCopy>> Fork(SeqId parent, SeqId child, int num_computed);

  // Pins the cached full-block prefix of `tokens` until Unpin; returns the pinned tokens.
  // NotFound when no block of it is cached; ResourceExhausted when pinning would exceed
  // max_pinned_fraction of the cache.
  Result<int> Pin(CacheNamespace ns, std::span<const TokenId> tokens);
  // Unpins what Pin(ns, tokens) pinned. NotFound if that prefix is not pinned.
  Status Unpin(CacheNamespace ns, std::span<const TokenId> tokens);

  // Retention (prompt caching). A held block stays cached until its deadline: it is evicted
  // only after every unheld evictable block, and holds keep at most max_retained_fraction of
  // the cache. Deadlines come from config().clock; an expired hold leaves an ordinary cached
  // block.
  struct HoldResult {
    int held_tokens = 0;  // tokens of the cached full-block prefix now held in RAM
    int tier_tokens = 0;  // tokens past the retained share, handed to the lower tiers instead
  };
  // Holds the cached full-block prefix of `tokens` for ttl_ms; each hit on a held block starts
  // its TTL again. Blocks that would take holds past the retained share are not held in RAM:
  // the block listener (the lower tiers) gets them with their deadline (OnBlockRetained). With
  // ram false every block goes to the listener only (a long retention that the disk keeps).
  HoldResult HoldPrefix(CacheNamespace ns, std::span<const TokenId> tokens, int64_t ttl_ms,
                        bool ram = true);
  // An explicit cache `id`: holds the cached full-block prefix of `tokens` until until_ms, never
  // renewed by hits. Calling it again for the same id replaces its prefix and deadline (and
  // holds again what was recomputed since). Returns the held tokens; ResourceExhausted, and no
  // change, when the blocks it adds would take holds past the retained share.
  Result<int> HoldExplicit(uint64_t id, CacheNamespace ns, std::span<const TokenId> tokens,
                           int64_t until_ms);
  // Ends explicit cache `id`'s hold (no-op when unknown or expired).
  void ReleaseExplicit(uint64_t id);
  bool has_block_listener() const { return listener_ != nullptr; }
  int64_t NowMs() const;

  KvCacheStats stats() const;
  const BlockPool& pool() const { return pool_; }
  const RadixTree* tree() const { return tree_.get(); }
  bool is_live(SeqId seq) const { return seqs_.count(seq) != 0; }
  int num_live_sequences() const { return static_cast<int>(seqs_.size()); }
  void CheckInvariants() const;

 private:
  struct Seq {
    CacheNamespace ns;
    int32_t priority = 0;
    BlockTable table;
    RadixTree::Node* node = nullptr;       // deepest committed node, locked by this sequence
    int num_committed = 0;                 // blocks of `table` that are the path to `node`
    int query_tokens = 0, hit_tokens = 0;  // counted at the first successful Allocate
    int partial_hit_tokens = 0;
    bool counted = false;
    int evicted = 0;      // tokens evicted inside the sequence: slot = token index - evicted
    bool edited = false;  // EvictBlocks ran: nothing more is committed
    // The window group's table (NOTE above), index for index beside `table`; entries before
    // window_first are kNoWindowBlock.
    std::vector<BlockId> wtable;
    int window_first = 0;
  };
  Seq& Get(SeqId seq);
  const Seq& Get(SeqId seq) const;
  // The cached block that tokens[start...] goes on into after `parent` (a token-granular
  // hit), with the matched length; {nullptr, 0} when none or when partial hits are off.
  std::pair<RadixTree::Node*, int> MatchPartial(CacheNamespace ns, RadixTree::Node* parent,
                                                std::span<const TokenId> tokens, int start) const;
  // Makes `n` free blocks available, evicting if needed. False (nothing evicted) if impossible.
  bool MakeRoom(int n);
  // The window group. Depth (in full blocks of `path`) of the deepest hit whose window blocks
  // are all cached; with *partial (a token-granular hit's source past the path) tried first at
  // the path's end, and cleared when it cannot be used.
  int WindowHitDepth(const std::vector<RadixTree::Node*>& path, RadixTree::Node** partial,
                     int partial_tokens) const;
  int WindowFirstBlock(int next_slot) const;  // the group's first block a query at it reads
  BlockId CachedWindowBlock(const RadixTree::Node* node) const;  // kNoWindowBlock if none
  void WindowAddRef(BlockId w);
  void WindowRelease(BlockId w);
  void WindowEvict(BlockId w);
  bool WindowMakeRoom(int n);
  // Keeps w beside node (a committed block's window part). REQUIRES: none kept there yet.
  void WindowKeep(const RadixTree::Node* node, BlockId w);
  void OnNodeEvicted(const RadixTree::Node* node);
  // Releases the group's blocks that no query at or after next_slot reads.
  void SlideWindow(Seq& s, int next_slot);
  void CommitTree(Seq& s, std::span<const TokenId> tokens, int num_computed);
  void CommitWindowBlock(Seq& s, int i, const RadixTree::Node* node);
  void CheckWindowInvariants() const;
  // EvictBlocks and CompactBlocks: replaces the shared blocks from index `from` on by private
  // copies (recorded in e) and keeps the tree path of the first keep_committed blocks only.
  // False, and no change, when the copies' blocks cannot be had.
  bool PrivatizeBlocks(Seq& s, int from, int keep_committed, BlockEviction* e);
  static uint64_t PinKey(CacheNamespace ns, std::span<const TokenId> tokens);
  // Moves the tree's clock to now and drops expired explicit holds.
  void Tick();
  // Clears every fixed hold in the tree and applies explicit_holds_ again.
  void RebuildFixedHolds();
  // Tells the listener of path[from...] with their deadline.
  void RetainInTiers(const std::vector<RadixTree::Node*>& path, size_t from, int64_t until_ms);

  struct ExplicitHold {
    CacheNamespace ns;
    std::vector<TokenId> tokens;
    int64_t until = 0;
  };

  KvCacheConfig config_;
  BlockPool pool_;
  std::unique_ptr<RadixTree> tree_;  // null when prefix caching is off
  std::unordered_map<SeqId, Seq> seqs_;
  std::unordered_multimap<uint64_t, RadixTree::Node*> pins_;  // by hash of (ns, tokens)
  int max_pinned_blocks_;
  int max_held_blocks_;
  std::unordered_map<uint64_t, ExplicitHold> explicit_holds_;
  // Points the tree at the listener and the observers (through fanout_ when there are several).
  void InstallListeners();

  BlockListener* listener_ = nullptr;
  std::vector<BlockListener*> observers_;
  BlockListenerFanout fanout_;
  int64_t tier_retained_blocks_ = 0;
  int64_t query_tokens_ = 0, hit_tokens_ = 0, partial_hit_tokens_ = 0;
  std::function<void(BlockId, BlockId)> copier_;
  std::function<void(BlockId, BlockId)> window_copier_;
  // The window group: its pool; for each of its blocks the tree node it is kept beside (null
  // when private or free); for each main block id, the window block kept beside its node; the
  // cached-evictable ones by release order (serial, block).
  BlockPool wpool_;
  std::vector<const RadixTree::Node*> wnode_;
  std::vector<BlockId> wkept_;
  std::set<std::pair<uint64_t, int32_t>> wevictable_;
  std::vector<uint64_t> wserial_;
  uint64_t next_wserial_ = 0;
  int64_t window_evicted_ = 0;
};

}  // namespace kvserve
