#include "prefix/radix_tree.h"

#include <algorithm>

#include "util/check.h"

namespace kvserve {

struct RadixTree::Node {
  Node* parent = nullptr;  // nullptr only for a namespace root (which holds no block)
  Node* root = nullptr;    // the namespace root (itself for a root)
  BlockId block;           // invalid for a root
  BlockKey chain_key;      // chained key; RootKey(ns) for a root
  std::vector<TokenId> tokens;
  std::unordered_map<uint64_t, std::unique_ptr<Node>> children;  // by token hash
  int lock_ref = 0;
  int pin_ref = 0;
  NodeUsage usage;
  uint64_t serial = 0;
  bool in_candidates = false;
  int64_t candidate_held = 0;  // held_until it was inserted into the candidate set with
  EvictionKey key{};           // key it was inserted into the candidate set with
  // Holds (0 = none): a renewable one's deadline and TTL, and a fixed one's deadline.
  int64_t renewable_until = 0, ttl = 0, fixed_until = 0;
};

RadixTree::RadixTree(int block_size, std::unique_ptr<EvictionPolicy> policy, BlockPool* pool)
    : block_size_(block_size), policy_(std::move(policy)), pool_(pool) {
  KV_CHECK_GT(block_size, 0);
}

RadixTree::~RadixTree() = default;

RadixTree::Node* RadixTree::FindRoot(CacheNamespace ns) const {
  auto it = roots_.find(ns.value);
  return it == roots_.end() ? nullptr : it->second.get();
}

RadixTree::Node* RadixTree::Root(CacheNamespace ns) {
  auto& root = roots_[ns.value];
  if (!root) {
    root = std::make_unique<Node>();
    root->root = root.get();
    root->chain_key = RootKey(ns);
  }
  return root.get();
}

uint64_t RadixTree::HashTokens(std::span<const TokenId> tokens) const {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (TokenId t : tokens) {
    h ^= static_cast<uint32_t>(t) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  }
  return h;
}

RadixTree::Node* RadixTree::FindChild(CacheNamespace ns, Node* parent,
                                      std::span<const TokenId> block_tokens) const {
  KV_CHECK_EQ(static_cast<int>(block_tokens.size()), block_size_);
  const Node* p = parent ? parent : FindRoot(ns);
  if (!p) return nullptr;
  auto it = p->children.find(HashTokens(block_tokens));
  if (it == p->children.end()) return nullptr;
  Node* c = it->second.get();
  return std::equal(c->tokens.begin(), c->tokens.end(), block_tokens.begin()) ? c : nullptr;
}

std::pair<RadixTree::Node*, int> RadixTree::LongestPartialChild(CacheNamespace ns, Node* parent,
                                                                std::span<const TokenId> tokens,
                                                                int max_tokens) const {
  const Node* p = parent ? parent : FindRoot(ns);
  const int limit = std::min<int>({max_tokens, static_cast<int>(tokens.size()), block_size_ - 1});
  std::pair<Node*, int> best{nullptr, 0};
  if (!p || limit <= 0) return best;
  for (const auto& [hash, child] : p->children) {
    int m = 0;
    while (m < limit && child->tokens[static_cast<size_t>(m)] == tokens[static_cast<size_t>(m)]) {
      ++m;
    }
    if (m > best.second || (m == best.second && m > 0 && child->serial < best.first->serial)) {
      best = {child.get(), m};
    }
  }
  return best;
}

std::vector<RadixTree::Node*> RadixTree::Match(CacheNamespace ns, std::span<const TokenId> tokens,
                                               int max_blocks) const {
  std::vector<Node*> path;
  Node* cur = nullptr;
  const int limit = std::min<int>(max_blocks, static_cast<int>(tokens.size()) / block_size_);
  for (int i = 0; i < limit; ++i) {
    Node* next =
        FindChild(ns, cur, tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_));
    if (!next) break;
    path.push_back(next);
    cur = next;
  }
  return path;
}

RadixTree::Node* RadixTree::AddChild(CacheNamespace ns, Node* parent,
                                     std::span<const TokenId> block_tokens, BlockId block) {
  KV_CHECK_EQ(static_cast<int>(block_tokens.size()), block_size_);
  Node* p = parent ? parent : Root(ns);
  const uint64_t h = HashTokens(block_tokens);
  if (p->children.count(h)) return nullptr;  // same tokens (caller's bug) or a collision
  auto node = std::make_unique<Node>();
  node->parent = p;
  node->root = p->root;
  node->block = block;
  node->chain_key = ChainKey(p->chain_key, block_tokens);
  node->tokens.assign(block_tokens.begin(), block_tokens.end());
  node->serial = next_serial_++;
  node->usage.last_access = ++clock_;
  Node* n = node.get();
  p->children.emplace(h, std::move(node));
  pool_->MarkCached(block);
  ++num_nodes_;
  ++num_evictable_;
  if (p->parent) Refresh(p);
  Refresh(n);
  if (listener_) {
    listener_->OnBlockInserted(
        TreeBlock{n->chain_key, p->chain_key, p->root->chain_key, n->tokens, block});
  }
  return n;
}

void RadixTree::Touch(Node* node, int32_t priority, int hits) {
  const int64_t now = ++clock_;
  for (Node* n = node; n && n->parent; n = n->parent) {
    n->usage.last_access = now;
    n->usage.hit_count += hits;
    n->usage.priority = std::max(n->usage.priority, priority);
    // A hit renews a live renewable hold. Ancestors' TTLs are at least their children's, so
    // the path stays closed.
    if (hits > 0 && n->renewable_until > now_) {
      SetHold(n, std::max(n->renewable_until, now_ + n->ttl), n->ttl, n->fixed_until);
    }
    Refresh(n);
  }
}

bool RadixTree::held(const Node* node, int64_t now_ms) { return held_until(node) > now_ms; }

int64_t RadixTree::held_until(const Node* node) {
  return std::max(node->renewable_until, node->fixed_until);
}

void RadixTree::SetHold(Node* n, int64_t renewable_until, int64_t ttl, int64_t fixed_until) {
  const bool was_held = held_until(n) > now_;
  if (was_held) deadlines_.erase(Deadline{held_until(n), n->serial, n});
  n->renewable_until = renewable_until > now_ ? renewable_until : 0;
  n->ttl = n->renewable_until > 0 ? ttl : 0;
  n->fixed_until = fixed_until > now_ ? fixed_until : 0;
  const bool is_held = held_until(n) > now_;
  if (is_held) deadlines_.insert(Deadline{held_until(n), n->serial, n});
  num_held_ += is_held - was_held;
  Refresh(n);
}

void RadixTree::SetNow(int64_t now_ms) {
  if (now_ms <= now_) return;
  now_ = now_ms;
  while (!deadlines_.empty() && deadlines_.begin()->until <= now_) {
    Node* n = deadlines_.begin()->node;
    deadlines_.erase(deadlines_.begin());
    --num_held_;
    n->renewable_until = n->ttl = n->fixed_until = 0;
    Refresh(n);
  }
}

void RadixTree::HoldRenewable(Node* node, int64_t ttl_ms) {
  if (ttl_ms <= 0) return;
  for (Node* n = node; n && n->parent; n = n->parent) {
    SetHold(n, std::max(n->renewable_until, now_ + ttl_ms), std::max(n->ttl, ttl_ms),
            n->fixed_until);
  }
}

void RadixTree::HoldFixed(Node* node, int64_t until_ms) {
  for (Node* n = node; n && n->parent; n = n->parent) {
    SetHold(n, n->renewable_until, n->ttl, std::max(n->fixed_until, until_ms));
  }
}

void RadixTree::ClearAllFixed() {
  std::vector<Node*> nodes;
  for (const Deadline& d : deadlines_) {
    if (d.node->fixed_until > 0) nodes.push_back(d.node);
  }
  for (Node* n : nodes) SetHold(n, n->renewable_until, n->ttl, 0);
}

int RadixTree::CountUnheld(const Node* node) const {
  int count = 0;
  for (const Node* n = node; n && n->parent; n = n->parent) count += !held(n, now_);
  return count;
}

void RadixTree::AddLockRef(Node* n, int delta) {
  const bool was_locked = n->lock_ref > 0;
  const bool was_evictable = n->lock_ref == 0 && n->pin_ref == 0;
  n->lock_ref += delta;
  KV_CHECK(n->lock_ref >= 0, "lock_ref of block {} below zero", n->block.value());
  num_locked_ += (n->lock_ref > 0) - was_locked;
  num_evictable_ += (n->lock_ref == 0 && n->pin_ref == 0) - was_evictable;
  Refresh(n);
}

void RadixTree::AddPinRef(Node* n, int delta) {
  const bool was_pinned = n->pin_ref > 0;
  const bool was_evictable = n->lock_ref == 0 && n->pin_ref == 0;
  n->pin_ref += delta;
  KV_CHECK(n->pin_ref >= 0, "pin_ref of block {} below zero", n->block.value());
  num_pinned_ += (n->pin_ref > 0) - was_pinned;
  num_evictable_ += (n->lock_ref == 0 && n->pin_ref == 0) - was_evictable;
  Refresh(n);
}

void RadixTree::Lock(Node* node) {
  for (Node* n = node; n && n->parent; n = n->parent) AddLockRef(n, +1);
}

void RadixTree::Unlock(Node* node) {
  const int64_t now = ++clock_;
  for (Node* n = node; n && n->parent; n = n->parent) {
    n->usage.last_access = now;  // the release is the last use
    AddLockRef(n, -1);
  }
}

void RadixTree::Pin(Node* node) {
  for (Node* n = node; n && n->parent; n = n->parent) AddPinRef(n, +1);
}

void RadixTree::Unpin(Node* node) {
  for (Node* n = node; n && n->parent; n = n->parent) AddPinRef(n, -1);
}

bool RadixTree::IsCandidate(const Node* n) const {
  return n->lock_ref == 0 && n->pin_ref == 0 && n->children.empty();
}

void RadixTree::Refresh(Node* n) {
  const bool want = IsCandidate(n);
  const EvictionKey key = policy_->Key(n->usage);
  const int64_t is_held = held(n, now_) ? held_until(n) : 0;
  if (n->in_candidates && (!want || key != n->key || is_held != n->candidate_held)) {
    candidates_.erase(Candidate{n->candidate_held, n->key, n->serial, n});
    n->in_candidates = false;
  }
  if (want && !n->in_candidates) {
    n->key = key;
    n->candidate_held = is_held;
    candidates_.insert(Candidate{is_held, key, n->serial, n});
    n->in_candidates = true;
  }
}

void RadixTree::RemoveLeaf(Node* n) {
  KV_CHECK(IsCandidate(n), "evicting a node that is not an evictable leaf");
  candidates_.erase(Candidate{n->candidate_held, n->key, n->serial, n});
  if (listener_ && held(n, now_)) {
    listener_->OnBlockRetained(
        TreeBlock{n->chain_key, n->parent->chain_key, n->root->chain_key, n->tokens, n->block},
        held_until(n));
  }
  if (held(n, now_)) {
    deadlines_.erase(Deadline{held_until(n), n->serial, n});
    --num_held_;
  }
  if (listener_) {
    listener_->OnBlockEvicted(
        TreeBlock{n->chain_key, n->parent->chain_key, n->root->chain_key, n->tokens, n->block});
  }
  if (evict_hook_) evict_hook_(n);
  pool_->Evict(n->block);
  --num_nodes_;
  --num_evictable_;
  ++num_evicted_;
  Node* parent = n->parent;
  parent->children.erase(HashTokens(n->tokens));  // destroys n
  if (parent->parent) Refresh(parent);
}

int RadixTree::Evict(int num_blocks) {
  int evicted = 0;
  while (evicted < num_blocks && !candidates_.empty()) {
    RemoveLeaf(candidates_.begin()->node);
    ++evicted;
  }
  return evicted;
}

BlockId RadixTree::block(const Node* node) { return node->block; }
const BlockKey& RadixTree::key(const Node* node) { return node->chain_key; }
BlockKey RadixTree::ChainStart(CacheNamespace ns, const Node* parent) {
  return parent ? parent->chain_key : RootKey(ns);
}
int RadixTree::lock_ref(const Node* node) { return node->lock_ref; }
std::span<const TokenId> RadixTree::tokens(const Node* node) { return node->tokens; }
RadixTree::Node* RadixTree::parent(const Node* node) { return node->parent; }
int RadixTree::pin_ref(const Node* node) { return node->pin_ref; }
const NodeUsage& RadixTree::usage(const Node* node) { return node->usage; }

void RadixTree::Retain(const Node* n, int64_t until_ms) const {
  if (!listener_) return;
  listener_->OnBlockRetained(
      TreeBlock{n->chain_key, n->parent->chain_key, n->root->chain_key, n->tokens, n->block},
      until_ms);
}

std::vector<BlockId> RadixTree::PathBlocks(const Node* node) {
  std::vector<BlockId> blocks;
  for (const Node* n = node; n && n->parent; n = n->parent) blocks.push_back(n->block);
  std::reverse(blocks.begin(), blocks.end());
  return blocks;
}

std::vector<BlockId> RadixTree::EvictionOrder() const {
  std::vector<BlockId> order;
  for (const Candidate& c : candidates_) order.push_back(c.node->block);
  return order;
}

void RadixTree::ForEachNode(const std::function<void(const Node*)>& fn) const {
  std::vector<const Node*> stack;
  for (const auto& [ns, root] : roots_) {
    for (const auto& [h, child] : root->children) stack.push_back(child.get());
  }
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    fn(n);
    for (const auto& [h, child] : n->children) stack.push_back(child.get());
  }
}

void RadixTree::CheckInvariants() const {
  int nodes = 0, locked = 0, evictable = 0, pinned = 0, candidates = 0, held_nodes = 0;
  ForEachNode([&](const Node* n) {
    ++nodes;
    held_nodes += held(n, now_);
    KV_CHECK(held_until(n) == 0 || held_until(n) > now_, "block {} keeps an expired hold",
             n->block.value());
    KV_CHECK_EQ(deadlines_.count(Deadline{held_until(n), n->serial, const_cast<Node*>(n)}),
                held(n, now_) ? 1u : 0u);
    if (n->in_candidates) KV_CHECK_EQ(n->candidate_held, held(n, now_) ? held_until(n) : 0);
    locked += n->lock_ref > 0;
    pinned += n->pin_ref > 0;
    evictable += n->lock_ref == 0 && n->pin_ref == 0;
    KV_CHECK(pool_->is_cached(n->block), "tree block {} not marked cached", n->block.value());
    int child_locks = 0, child_pins = 0;
    for (const auto& [h, c] : n->children) {
      KV_CHECK(c->parent == n, "broken parent link at block {}", c->block.value());
      KV_CHECK(c->block.valid(), "node without a block");
      KV_CHECK_EQ(h, HashTokens(c->tokens));
      child_locks += c->lock_ref;
      child_pins += c->pin_ref;
      KV_CHECK(c->renewable_until <= n->renewable_until && c->fixed_until <= n->fixed_until &&
                   c->ttl <= n->ttl,
               "block {} is held longer than its parent", c->block.value());
    }
    KV_CHECK(n->lock_ref >= child_locks, "block {} lock_ref {} < children's {}", n->block.value(),
             n->lock_ref, child_locks);
    KV_CHECK(n->pin_ref >= child_pins, "block {} pin_ref {} < children's {}", n->block.value(),
             n->pin_ref, child_pins);
    KV_CHECK_EQ(n->in_candidates, IsCandidate(n));
    candidates += n->in_candidates;
  });
  KV_CHECK_EQ(nodes, num_nodes_);
  KV_CHECK_EQ(locked, num_locked_);
  KV_CHECK_EQ(evictable, num_evictable_);
  KV_CHECK_EQ(pinned, num_pinned_);
  KV_CHECK_EQ(held_nodes, num_held_);
  KV_CHECK_EQ(held_nodes, static_cast<int>(deadlines_.size()));
  KV_CHECK_EQ(candidates, static_cast<int>(candidates_.size()));
}

}  // namespace kvserve
