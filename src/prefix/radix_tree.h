// RadixTree: the prefix cache's index of FULL KV blocks. Each node is one block: the block_size
// tokens it holds (its edge label) and the BlockId with their K/V. A node's key is therefore the
// whole token path from its namespace root down to it, which is exactly what the K/V depend on.
// Children are looked up by a hash of their block's tokens (checked against the tokens).
//
// Owns: the nodes. Does not own the blocks: it marks them cached in the BlockPool on insert and
// hands them back with BlockPool::Evict when it evicts a node.
//
// NOTE (locks pin paths): Lock(node) adds one lock reference to the node and every ancestor, so
// a sequence that uses a prefix pins all of it with one call; Unlock undoes it. A node with
// lock_ref > 0 is protected; with lock_ref == 0 and pin_ref == 0 it is evictable. Because a
// lock or pin always covers a whole path, the subtree of an evictable node is evictable too,
// so evicting leaves one by one can free every evictable block: num_evictable() is exact.
// Pins (Pin/Unpin) work the same way and keep nodes until unpinned.
//
// NOTE (holds): a node may be held until a deadline (prompt caching's retention). A hold covers a
// path, like a lock, and sets each node's deadline to the larger of its own and the new one, so
// a parent is held at least as long as any child: holds are path-closed too. Held evictable
// leaves are still candidates, but after every unheld one (the candidate order puts held last),
// so they go only when nothing else can. Two kinds: a renewable hold (its TTL starts again when
// a sequence matches the node) and a fixed one (an explicit cache with a set expiry). The tree
// learns the time from SetNow (milliseconds, from the owner's clock); deadlines at or before it
// have expired and the node is ordinary again.
//
// NOTE (eviction): only evictable LEAVES are candidates; they sit in an ordered set keyed by the
// policy's key of their usage (plus a creation serial for ties). Evicting a leaf may turn its
// parent into a candidate. Eviction happens only when asked (when blocks are needed).
//
// Invariants (CheckInvariants): lock_ref(n) >= sum of lock_ref over n's children (same for
// pins); the counters equal a recount; the candidate set holds exactly the evictable leaves;
// every node's block is marked cached in the pool.
//
// Thread safety: none; the engine thread owns it (through KvCacheManager).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/block_pool.h"
#include "prefix/block_key.h"
#include "prefix/block_listener.h"
#include "prefix/cache_namespace.h"
#include "prefix/eviction_policy.h"
#include "util/strong_id.h"

namespace kvserve {

class RadixTree {
 public:
  struct Node;

  // REQUIRES: pool outlives the tree.
  RadixTree(int block_size, std::unique_ptr<EvictionPolicy> policy, BlockPool* pool);
  ~RadixTree();
  RadixTree(const RadixTree&) = delete;
  RadixTree& operator=(const RadixTree&) = delete;

  int block_size() const { return block_size_; }
  // Told of every insert and eviction (nullptr = nobody). REQUIRES: outlives the tree's use.
  void set_listener(BlockListener* listener) { listener_ = listener; }
  // Called with every node just before it is evicted (its owner drops what it keeps beside the
  // node's block: the window group's block). Null = nobody.
  void set_evict_hook(std::function<void(const Node*)> hook) { evict_hook_ = std::move(hook); }

  // The longest path of cached blocks that prefixes `tokens`, at most max_blocks long
  // (root side first). No side effects.
  std::vector<Node*> Match(CacheNamespace ns, std::span<const TokenId> tokens,
                           int max_blocks) const;
  // The child of `parent` (nullptr = the namespace root) holding `block_tokens`, or nullptr.
  // REQUIRES: block_tokens.size() == block_size.
  Node* FindChild(CacheNamespace ns, Node* parent, std::span<const TokenId> block_tokens) const;
  // The child of `parent` (nullptr = the namespace root) whose block starts with the longest run
  // of `tokens`, at most max_tokens long (< block_size), and that run's length; {nullptr, 0} when
  // no child shares even the first token. Ties go to the oldest child. No side effects.
  std::pair<Node*, int> LongestPartialChild(CacheNamespace ns, Node* parent,
                                            std::span<const TokenId> tokens, int max_tokens) const;
  // Adds a child holding `block` (marked cached in the pool). Returns nullptr and adds nothing
  // when a different block with the same token hash is already there (a hash collision: the
  // block simply stays uncached). REQUIRES: no child with these tokens; block in use, not cached.
  Node* AddChild(CacheNamespace ns, Node* parent, std::span<const TokenId> block_tokens,
                 BlockId block);

  // Records a use of every node on the path to `node`: access time, priority (the highest seen)
  // and `hits` more hits (1 for a sequence that matched the path, 0 for one that extends it).
  void Touch(Node* node, int32_t priority, int hits = 1);
  void Lock(Node* node);    // +1 lock on node and all ancestors
  void Unlock(Node* node);  // -1 lock on the same path; records the release time
  void Pin(Node* node);     // +1 pin on node and all ancestors
  void Unpin(Node* node);

  // Moves the tree's clock to now_ms (never backwards): expired holds end.
  void SetNow(int64_t now_ms);
  int64_t now() const { return now_; }
  // Holds node and its ancestors until now + ttl_ms, renewed on every match (renewable), or
  // until until_ms, never renewed (fixed). A node keeps the later of its deadlines.
  void HoldRenewable(Node* node, int64_t ttl_ms);
  void HoldFixed(Node* node, int64_t until_ms);
  // Drops every fixed hold (the owner then applies again the fixed holds that remain).
  void ClearAllFixed();
  // Nodes on the path root -> node that are not held now.
  int CountUnheld(const Node* node) const;
  // Tells the listener that node's block should be kept by the lower tiers until until_ms.
  void Retain(const Node* node, int64_t until_ms) const;
  static bool held(const Node* node, int64_t now_ms);
  static int64_t held_until(const Node* node);  // 0 when never held

  // Evicts up to `num_blocks` evictable leaves in policy order; returns how many it evicted.
  int Evict(int num_blocks);

  int num_nodes() const { return num_nodes_; }
  int num_protected() const { return num_locked_; }     // nodes with lock_ref > 0
  int num_evictable() const { return num_evictable_; }  // lock_ref == 0 and pin_ref == 0
  int num_pinned() const { return num_pinned_; }        // nodes with pin_ref > 0
  int num_held() const { return num_held_; }            // nodes held now
  int64_t num_evicted() const { return num_evicted_; }

  static BlockId block(const Node* node);
  // The chained key of the block (block_key.h); for nullptr, see ChainStart.
  static const BlockKey& key(const Node* node);
  // The key a chain of `ns` starts from: the key of the node `parent`, or RootKey(ns) for null.
  static BlockKey ChainStart(CacheNamespace ns, const Node* parent);
  static int lock_ref(const Node* node);
  // The block's block_size tokens (empty for a namespace root).
  static std::span<const TokenId> tokens(const Node* node);
  // The node's parent: the namespace root (which holds no block) for a first block.
  static Node* parent(const Node* node);
  static int pin_ref(const Node* node);
  static const NodeUsage& usage(const Node* node);
  // Blocks on the path root -> node (empty for nullptr).
  static std::vector<BlockId> PathBlocks(const Node* node);
  // Blocks of the current eviction candidates, next victim first. For tests.
  std::vector<BlockId> EvictionOrder() const;
  void ForEachNode(const std::function<void(const Node*)>& fn) const;
  void CheckInvariants() const;

 private:
  struct Candidate {
    // 0 when not held; else the hold's deadline: held leaves go after every unheld one, the
    // hold that ends first first.
    int64_t held_until;
    EvictionKey key;
    uint64_t serial;
    Node* node;
    bool operator<(const Candidate& o) const {
      if (held_until != o.held_until) return held_until < o.held_until;
      return key != o.key ? key < o.key : serial < o.serial;
    }
  };
  struct Deadline {  // a held node, by the time its hold ends
    int64_t until;
    uint64_t serial;
    Node* node;
    bool operator<(const Deadline& o) const {
      return until != o.until ? until < o.until : serial < o.serial;
    }
  };
  Node* FindRoot(CacheNamespace ns) const;  // nullptr if the namespace has no blocks yet
  Node* Root(CacheNamespace ns);
  uint64_t HashTokens(std::span<const TokenId> tokens) const;
  bool IsCandidate(const Node* n) const;
  void Refresh(Node* n);  // puts n in or out of the candidate set
  void AddLockRef(Node* n, int delta);
  void AddPinRef(Node* n, int delta);
  void RemoveLeaf(Node* n);
  // Sets n's hold fields and keeps deadlines_, num_held_ and the candidate set in step.
  void SetHold(Node* n, int64_t renewable_until, int64_t ttl, int64_t fixed_until);

  int block_size_;
  std::unique_ptr<EvictionPolicy> policy_;
  BlockPool* pool_;
  BlockListener* listener_ = nullptr;
  std::function<void(const Node*)> evict_hook_;
  std::unordered_map<uint64_t, std::unique_ptr<Node>> roots_;  // by namespace
  std::set<Candidate> candidates_;
  std::set<Deadline> deadlines_;  // every held node
  int64_t now_ = 0;
  int num_held_ = 0;
  int64_t clock_ = 0;
  uint64_t next_serial_ = 0;
  int num_nodes_ = 0, num_locked_ = 0, num_evictable_ = 0, num_pinned_ = 0;
  int64_t num_evicted_ = 0;
};

}  // namespace kvserve
