#include "prefix/kv_cache_manager.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "util/check.h"

namespace kvserve {

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : config_(config),
      pool_(config.num_blocks),
      max_pinned_blocks_(static_cast<int>(config.max_pinned_fraction * config.num_blocks)),
      max_held_blocks_(static_cast<int>(config.max_retained_fraction * config.num_blocks)),
      wpool_(config.num_window_blocks),
      wnode_(static_cast<size_t>(config.num_window_blocks), nullptr),
      wserial_(static_cast<size_t>(config.num_window_blocks), 0) {
  KV_CHECK_GT(config.block_size, 0);
  KV_CHECK(config.num_window_blocks == 0 || config.window_reach > 0,
           "a window group needs its reach");
  if (config.enable_prefix_caching) {
    tree_ = std::make_unique<RadixTree>(config.block_size,
                                        MakeEvictionPolicy(config.eviction_policy), &pool_);
    if (has_window_group()) {
      wkept_.assign(static_cast<size_t>(config.num_blocks), kNoWindowBlock);
      tree_->set_evict_hook([this](const RadixTree::Node* n) { OnNodeEvicted(n); });
    }
  }
}

KvCacheManager::Seq& KvCacheManager::Get(SeqId seq) {
  auto it = seqs_.find(seq);
  KV_CHECK(it != seqs_.end(), "sequence {} is not live", seq.value());
  return it->second;
}

const KvCacheManager::Seq& KvCacheManager::Get(SeqId seq) const {
  auto it = seqs_.find(seq);
  KV_CHECK(it != seqs_.end(), "sequence {} is not live", seq.value());
  return it->second;
}

int KvCacheManager::max_blocks_for_one_sequence() const {
  return config_.num_blocks - (tree_ ? tree_->num_pinned() : 0);
}

int KvCacheManager::PeekCachedTokens(CacheNamespace ns, std::span<const TokenId> tokens) const {
  if (!tree_ || tokens.empty()) return 0;
  const int max_blocks = (static_cast<int>(tokens.size()) - 1) / config_.block_size;
  const std::vector<RadixTree::Node*> path = tree_->Match(ns, tokens, max_blocks);
  const int full = static_cast<int>(path.size()) * config_.block_size;
  auto [source, m] = MatchPartial(ns, path.empty() ? nullptr : path.back(), tokens, full);
  if (!has_window_group()) return full + m;
  const int depth = WindowHitDepth(path, &source, m);
  return depth * config_.block_size + (source ? m : 0);
}

void KvCacheManager::set_block_copier(std::function<void(BlockId src, BlockId dst)> copier) {
  copier_ = std::move(copier);
}

void KvCacheManager::set_window_block_copier(std::function<void(BlockId src, BlockId dst)> copier) {
  window_copier_ = std::move(copier);
}

// --- The window group -------------------------------------------------------------------------

int KvCacheManager::WindowFirstBlock(int next_slot) const {
  return std::max(0, next_slot - config_.window_reach + 1) / config_.block_size;
}

BlockId KvCacheManager::CachedWindowBlock(const RadixTree::Node* node) const {
  return wkept_[static_cast<size_t>(RadixTree::block(node).value())];
}

int KvCacheManager::WindowHitDepth(const std::vector<RadixTree::Node*>& path,
                                   RadixTree::Node** partial, int partial_tokens) const {
  const int bs = config_.block_size;
  const int n = static_cast<int>(path.size());
  // missing_below[d]: how many of the first d blocks have no cached window block.
  std::vector<int> missing_below(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) {
    missing_below[static_cast<size_t>(i) + 1] =
        missing_below[static_cast<size_t>(i)] +
        !CachedWindowBlock(path[static_cast<size_t>(i)]).valid();
  }
  auto window_cached = [&](int d, int next_slot) {
    const int first = std::min(d, WindowFirstBlock(next_slot));
    return missing_below[static_cast<size_t>(d)] == missing_below[static_cast<size_t>(first)];
  };
  if (*partial != nullptr) {
    // The window at the path's end is needed as well: without room for the copy, the hit ends
    // there.
    if (CachedWindowBlock(*partial).valid() && window_cached(n, n * bs) &&
        window_cached(n, n * bs + partial_tokens)) {
      return n;
    }
    *partial = nullptr;
  }
  for (int d = n; d > 0; --d) {
    if (window_cached(d, d * bs)) return d;
  }
  return 0;
}

void KvCacheManager::WindowAddRef(BlockId w) {
  if (wpool_.ref_count(w) == 0) {
    wevictable_.erase({wserial_[static_cast<size_t>(w.value())], w.value()});
  }
  wpool_.AddRef(w);
}

void KvCacheManager::WindowRelease(BlockId w) {
  wpool_.Release(w);
  if (wpool_.ref_count(w) == 0 && wpool_.is_cached(w)) {
    wserial_[static_cast<size_t>(w.value())] = next_wserial_++;
    wevictable_.insert({wserial_[static_cast<size_t>(w.value())], w.value()});
  }
}

void KvCacheManager::WindowEvict(BlockId w) {
  const RadixTree::Node* node = wnode_[static_cast<size_t>(w.value())];
  wevictable_.erase({wserial_[static_cast<size_t>(w.value())], w.value()});
  wkept_[static_cast<size_t>(RadixTree::block(node).value())] = kNoWindowBlock;
  wnode_[static_cast<size_t>(w.value())] = nullptr;
  wpool_.Evict(w);
  ++window_evicted_;
}

void KvCacheManager::WindowKeep(const RadixTree::Node* node, BlockId w) {
  KV_CHECK(!CachedWindowBlock(node).valid(), "a node keeps one window block");
  wpool_.MarkCached(w);
  wnode_[static_cast<size_t>(w.value())] = node;
  wkept_[static_cast<size_t>(RadixTree::block(node).value())] = w;
}

void KvCacheManager::OnNodeEvicted(const RadixTree::Node* node) {
  const BlockId w = CachedWindowBlock(node);
  if (!w.valid()) return;
  // An evictable node is on no sequence's locked path, and only those hold its window block.
  KV_CHECK_EQ(wpool_.ref_count(w), 0);
  WindowEvict(w);
}

bool KvCacheManager::WindowMakeRoom(int n) {
  if (wpool_.num_free() >= n) return true;
  if (wpool_.num_free() + static_cast<int>(wevictable_.size()) < n) return false;
  Tick();
  // Least recently released first; the windows of pinned and held prefixes only when nothing
  // else is left (their hits need them).
  std::vector<BlockId> victims;
  std::vector<BlockId> kept;
  for (const auto& [serial, b] : wevictable_) {
    if (wpool_.num_free() + static_cast<int>(victims.size()) >= n) break;
    const RadixTree::Node* node = wnode_[static_cast<size_t>(b)];
    if (RadixTree::pin_ref(node) > 0 || RadixTree::held(node, tree_->now())) {
      kept.push_back(BlockId(b));
    } else {
      victims.push_back(BlockId(b));
    }
  }
  for (size_t i = 0; wpool_.num_free() + static_cast<int>(victims.size()) < n; ++i) {
    victims.push_back(kept[i]);
  }
  for (BlockId b : victims) WindowEvict(b);
  return true;
}

void KvCacheManager::SlideWindow(Seq& s, int next_slot) {
  if (!has_window_group()) return;
  const int first = std::min(WindowFirstBlock(next_slot), static_cast<int>(s.wtable.size()));
  for (; s.window_first < first; ++s.window_first) {
    BlockId& w = s.wtable[static_cast<size_t>(s.window_first)];
    if (w.valid()) WindowRelease(w);
    w = kNoWindowBlock;
  }
}

// ----------------------------------------------------------------------------------------------

std::pair<RadixTree::Node*, int> KvCacheManager::MatchPartial(CacheNamespace ns,
                                                              RadixTree::Node* parent,
                                                              std::span<const TokenId> tokens,
                                                              int start) const {
  if (!config_.partial_block_hits || !copier_ || (has_window_group() && !window_copier_)) {
    return {nullptr, 0};
  }
  // The last token is always computed.
  const int max_tokens = static_cast<int>(tokens.size()) - 1 - start;
  return tree_->LongestPartialChild(ns, parent, tokens.subspan(static_cast<size_t>(start)),
                                    max_tokens);
}

int KvCacheManager::BeginSequence(SeqId seq, CacheNamespace ns, std::span<const TokenId> tokens,
                                  int32_t priority, bool count_tokens, bool partial_block,
                                  int max_hit_tokens) {
  KV_CHECK(!seqs_.count(seq), "sequence {} is already live", seq.value());
  Seq& s = seqs_.emplace(seq, Seq{ns, priority, BlockTable(config_.block_size)}).first->second;
  s.counted = !count_tokens;
  if (!tree_) return 0;
  Tick();  // a hit renews only holds that are still live
  s.query_tokens = static_cast<int>(tokens.size());
  if (tokens.empty()) return 0;
  // At least the last token is computed: its logits are what the request needs next.
  const int max_tokens = std::min(static_cast<int>(tokens.size()) - 1, max_hit_tokens);
  const int max_blocks = max_tokens / config_.block_size;
  std::vector<RadixTree::Node*> path = tree_->Match(ns, tokens, max_blocks);
  const int bs = config_.block_size;
  auto [source, m] = partial_block ? MatchPartial(ns, path.empty() ? nullptr : path.back(),
                                                  tokens.first(static_cast<size_t>(max_tokens) + 1),
                                                  static_cast<int>(path.size()) * bs)
                                   : std::pair<RadixTree::Node*, int>{nullptr, 0};
  if (has_window_group()) {
    path.resize(static_cast<size_t>(WindowHitDepth(path, &source, m)));
    if (source == nullptr) m = 0;
  }
  for (RadixTree::Node* n : path) {
    pool_.AddRef(RadixTree::block(n));
    s.table.Append(RadixTree::block(n));
  }
  if (!path.empty()) {
    tree_->Lock(path.back());
    tree_->Touch(path.back(), priority);
    s.node = path.back();
  }
  s.num_committed = static_cast<int>(path.size());
  s.hit_tokens = s.num_committed * bs;
  if (has_window_group()) {  // the window at the hit (referenced: room-making cannot take it)
    s.window_first = std::min(WindowFirstBlock(s.hit_tokens), s.num_committed);
    s.wtable.assign(path.size(), kNoWindowBlock);
    for (size_t i = static_cast<size_t>(s.window_first); i < path.size(); ++i) {
      s.wtable[i] = CachedWindowBlock(path[i]);
      WindowAddRef(s.wtable[i]);
    }
  }
  if (m == 0) return s.hit_tokens;
  // The source is locked (and its window block referenced) while room is made, so eviction
  // cannot take them; the copies happen before they are let go.
  tree_->Lock(source);
  const BlockId wsource = has_window_group() ? CachedWindowBlock(source) : kNoWindowBlock;
  if (wsource.valid()) WindowAddRef(wsource);
  if (MakeRoom(1) && (!wsource.valid() || WindowMakeRoom(1))) {
    const BlockId dst = *pool_.Allocate();
    s.table.Append(dst);
    copier_(RadixTree::block(source), dst);
    if (wsource.valid()) {
      const BlockId wdst = *wpool_.Allocate();
      s.wtable.push_back(wdst);
      window_copier_(wsource, wdst);
    }
    tree_->Touch(source, priority, /*hits=*/0);
    s.hit_tokens += m;
    s.partial_hit_tokens = m;
  }
  if (wsource.valid()) WindowRelease(wsource);
  tree_->Unlock(source);
  return s.hit_tokens;
}

BlockKey KvCacheManager::PrefixKey(SeqId seq) const {
  const Seq& s = Get(seq);
  return RadixTree::ChainStart(s.ns, s.node);
}

int KvCacheManager::num_allocatable_blocks() const {
  // The window group's pool is sized for every running sequence's window (EngineCore), so the
  // main pool is what admission weighs.
  return pool_.num_free() + (tree_ ? tree_->num_evictable() : 0);
}

void KvCacheManager::set_block_listener(BlockListener* listener) {
  if (!tree_) return;
  listener_ = listener;
  InstallListeners();
}

void KvCacheManager::add_block_observer(BlockListener* observer) {
  if (!tree_) return;
  observers_.push_back(observer);
  InstallListeners();
}

void KvCacheManager::InstallListeners() {
  fanout_.Clear();
  if (listener_) fanout_.Add(listener_);
  for (BlockListener* o : observers_) fanout_.Add(o);
  const std::vector<BlockListener*>& all = fanout_.listeners();
  tree_->set_listener(all.empty() ? nullptr : all.size() == 1 ? all.front() : &fanout_);
}

int64_t KvCacheManager::NowMs() const {
  if (config_.clock) return config_.clock();
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void KvCacheManager::Tick() {
  if (!tree_) return;
  const int64_t now = NowMs();
  tree_->SetNow(now);
  std::erase_if(explicit_holds_, [now](const auto& entry) { return entry.second.until <= now; });
}

void KvCacheManager::RetainInTiers(const std::vector<RadixTree::Node*>& path, size_t from,
                                   int64_t until_ms) {
  for (size_t i = from; i < path.size(); ++i) tree_->Retain(path[i], until_ms);
  if (listener_) tier_retained_blocks_ += static_cast<int64_t>(path.size() - from);
}

KvCacheManager::HoldResult KvCacheManager::HoldPrefix(CacheNamespace ns,
                                                      std::span<const TokenId> tokens,
                                                      int64_t ttl_ms, bool ram) {
  HoldResult r;
  if (!tree_ || ttl_ms <= 0) return r;
  Tick();
  const int bs = config_.block_size;
  const std::vector<RadixTree::Node*> path =
      tree_->Match(ns, tokens, static_cast<int>(tokens.size()) / bs);
  // The longest leading run of the path that fits the retained share: holds are path-closed,
  // so a prefix of the path is held or none.
  size_t fit = 0;
  if (ram) {
    int added = 0;
    for (; fit < path.size(); ++fit) {
      added += !RadixTree::held(path[fit], tree_->now());
      if (tree_->num_held() + added > max_held_blocks_) break;
    }
  }
  if (fit > 0) tree_->HoldRenewable(path[fit - 1], ttl_ms);
  RetainInTiers(path, fit, tree_->now() + ttl_ms);
  r.held_tokens = static_cast<int>(fit) * bs;
  r.tier_tokens = listener_ ? static_cast<int>(path.size() - fit) * bs : 0;
  return r;
}

Result<int> KvCacheManager::HoldExplicit(uint64_t id, CacheNamespace ns,
                                         std::span<const TokenId> tokens, int64_t until_ms) {
  if (!tree_) return FailedPrecondition("explicit caches need prefix caching enabled");
  Tick();
  if (until_ms <= tree_->now()) return InvalidArgument("the deadline has passed");
  const std::vector<RadixTree::Node*> path =
      tree_->Match(ns, tokens, static_cast<int>(tokens.size()) / config_.block_size);
  const int added = path.empty() ? 0 : tree_->CountUnheld(path.back());
  if (tree_->num_held() + added > max_held_blocks_) {
    return ResourceExhausted(fmt::format(
        "holding {} more blocks would exceed the retained share of {} blocks ({}% of the KV "
        "cache); delete a cache, shorten one, or raise --max-retained-fraction",
        added, max_held_blocks_, config_.max_retained_fraction * 100));
  }
  auto it = explicit_holds_.find(id);
  // A fixed deadline only grows in the tree: a cache that is shortened or moved to another
  // prefix needs the fixed holds rebuilt.
  const bool rebuild = it != explicit_holds_.end() &&
                       (it->second.until > until_ms || it->second.ns != ns ||
                        !std::equal(tokens.begin(), tokens.end(), it->second.tokens.begin(),
                                    it->second.tokens.end()));
  explicit_holds_[id] = ExplicitHold{ns, {tokens.begin(), tokens.end()}, until_ms};
  if (rebuild) {
    RebuildFixedHolds();
  } else if (!path.empty()) {
    tree_->HoldFixed(path.back(), until_ms);
  }
  return static_cast<int>(path.size()) * config_.block_size;
}

void KvCacheManager::ReleaseExplicit(uint64_t id) {
  if (!tree_) return;
  Tick();
  if (explicit_holds_.erase(id) != 0) RebuildFixedHolds();
}

void KvCacheManager::RebuildFixedHolds() {
  tree_->ClearAllFixed();
  for (const auto& [hid, h] : explicit_holds_) {
    const std::vector<RadixTree::Node*> path =
        tree_->Match(h.ns, h.tokens, static_cast<int>(h.tokens.size()) / config_.block_size);
    if (!path.empty()) tree_->HoldFixed(path.back(), h.until);
  }
}

bool KvCacheManager::MakeRoom(int n) {
  if (pool_.num_free() >= n) return true;
  const int deficit = n - pool_.num_free();
  if (!tree_ || tree_->num_evictable() < deficit) return false;
  Tick();  // expired holds are ordinary candidates again
  const int evicted = tree_->Evict(deficit);
  KV_CHECK_EQ(evicted, deficit);
  return true;
}

bool KvCacheManager::Allocate(SeqId seq, int num_tokens) {
  Seq& s = Get(seq);
  const int need = s.table.BlocksNeededFor(num_tokens - s.evicted);
  if (need > 0) {
    // The window group's new blocks: those its window reads from (a sequence whose step starts
    // past a whole window of new blocks does not need the earlier ones; they stay released).
    const int wneed = has_window_group() ? need : 0;
    if (!MakeRoom(need) || !WindowMakeRoom(wneed)) return false;
    std::vector<BlockId> got;
    KV_CHECK(pool_.AllocateN(need, &got));
    for (BlockId b : got) s.table.Append(b);
    if (wneed > 0) {
      got.clear();
      KV_CHECK(wpool_.AllocateN(wneed, &got));
      s.wtable.insert(s.wtable.end(), got.begin(), got.end());
    }
  }
  if (!s.counted) {
    s.counted = true;
    query_tokens_ += s.query_tokens;
    hit_tokens_ += s.hit_tokens;
    partial_hit_tokens_ += s.partial_hit_tokens;
  }
  return true;
}

void KvCacheManager::Shrink(SeqId seq, int num_tokens) {
  Seq& s = Get(seq);
  const int keep = (num_tokens - s.evicted + config_.block_size - 1) / config_.block_size;
  KV_CHECK_GE(keep, s.num_committed);
  while (s.table.num_blocks() > keep) pool_.Release(s.table.PopBack());
  while (static_cast<int>(s.wtable.size()) > keep) {
    if (s.wtable.back().valid()) WindowRelease(s.wtable.back());
    s.wtable.pop_back();
  }
  s.window_first = std::min(s.window_first, keep);
}

std::span<const BlockId> KvCacheManager::block_table(SeqId seq) const {
  return Get(seq).table.blocks();
}

std::span<const BlockId> KvCacheManager::window_table(SeqId seq) const { return Get(seq).wtable; }

// NOTE (commit): the blocks [num_committed, full) are walked down from the node the sequence
// already locks. Each is either new to the tree (inserted with the sequence's own block) or was
// cached meanwhile by another sequence that computed the same tokens; then the sequence adopts
// the cached block (bit-identical K/V: same namespace, same token path) and frees its duplicate,
// which keeps "the first num_committed blocks are the locked path" true. The lock then moves
// from the old deepest node to the new one (lock first, so the shared path never looks
// evictable in between).
void KvCacheManager::Commit(SeqId seq, std::span<const TokenId> tokens, int num_computed) {
  Seq& s = Get(seq);
  CommitTree(s, tokens, num_computed);
  SlideWindow(s, num_computed - s.evicted);
}

void KvCacheManager::CommitTree(Seq& s, std::span<const TokenId> tokens, int num_computed) {
  if (!tree_ || s.edited) return;
  const int bs = config_.block_size;
  const int full =
      std::min({num_computed, static_cast<int>(tokens.size()), s.table.capacity_tokens()}) / bs;
  RadixTree::Node* node = s.node;
  int committed = s.num_committed;
  for (int i = committed; i < full; ++i) {
    const auto block_tokens = tokens.subspan(static_cast<size_t>(i) * bs, bs);
    const BlockId mine = s.table.blocks()[i];
    RadixTree::Node* next = tree_->FindChild(s.ns, node, block_tokens);
    if (next) {
      const BlockId cached = RadixTree::block(next);
      if (cached != mine) {
        pool_.AddRef(cached);
        s.table.ReplaceBlock(i, cached);
        pool_.Release(mine);
      }
    } else {
      next = tree_->AddChild(s.ns, node, block_tokens, mine);
      if (!next) break;  // token-hash collision with a different block: stop sharing here
    }
    if (has_window_group()) CommitWindowBlock(s, i, next);
    node = next;
    committed = i + 1;
  }
  if (node == s.node) return;
  tree_->Lock(node);
  tree_->Touch(node, s.priority, /*hits=*/0);
  if (s.node) tree_->Unlock(s.node);
  s.node = node;
  s.num_committed = committed;
}

// The window part of committed block i: kept beside its node when the node has none (a window
// block released before its commit stays released), or swapped for the node's (identical bytes).
void KvCacheManager::CommitWindowBlock(Seq& s, int i, const RadixTree::Node* node) {
  BlockId& mine = s.wtable[static_cast<size_t>(i)];
  if (!mine.valid()) return;
  const BlockId cached = CachedWindowBlock(node);
  if (!cached.valid()) {
    WindowKeep(node, mine);
  } else if (cached != mine) {
    WindowAddRef(cached);
    WindowRelease(mine);
    mine = cached;
  }
}

bool KvCacheManager::PrivatizeBlocks(Seq& s, int from, int keep_committed, BlockEviction* e) {
  const int n = s.table.num_blocks();
  // The blocks to edit that are shared: committed ones (the tree holds them) and ones another
  // table holds (a parallel sample's).
  std::vector<int> shared;
  for (int i = from; i < n; ++i) {
    if (i < s.num_committed || pool_.ref_count(s.table.blocks()[i]) > 1) shared.push_back(i);
  }
  // The sequence's own blocks are in use, so making room cannot evict them.
  if (!MakeRoom(static_cast<int>(shared.size()))) return false;
  std::vector<BlockId> release;
  for (int i : shared) {
    const BlockId dst = *pool_.Allocate();
    e->copies.push_back(BlockCopy{s.table.blocks()[i], dst});
    release.push_back(s.table.blocks()[i]);
    s.table.ReplaceBlock(i, dst);
  }
  // Keep the locked path to the last block before keep_committed (lock first, so the shared
  // part of the path never looks evictable in between).
  keep_committed = std::min(s.num_committed, keep_committed);
  RadixTree::Node* node = s.node;
  for (int d = s.num_committed; d > keep_committed; --d) node = RadixTree::parent(node);
  if (keep_committed == 0) node = nullptr;
  if (node != s.node) {
    if (node) tree_->Lock(node);
    if (s.node) tree_->Unlock(s.node);
    s.node = node;
  }
  s.num_committed = keep_committed;
  for (BlockId b : release) pool_.Release(b);
  return true;
}

std::optional<BlockEviction> KvCacheManager::EvictBlocks(SeqId seq, int first, int count) {
  KV_CHECK(!has_window_group(), "eviction inside a sequence with a window group");
  Seq& s = Get(seq);
  const int n = s.table.num_blocks();
  KV_CHECK(first >= 0 && count >= 1 && first + count <= n, "evicting blocks [{}, {}) of {}", first,
           first + count, n);
  BlockEviction e;
  if (!PrivatizeBlocks(s, first + count, first, &e)) return std::nullopt;
  for (BlockId b : s.table.Erase(first, count)) pool_.Release(b);
  e.moved.assign(s.table.blocks().begin() + first, s.table.blocks().end());
  e.evicted_tokens = count * config_.block_size;
  s.evicted += e.evicted_tokens;
  s.edited = true;
  return e;
}

std::optional<BlockEviction> KvCacheManager::CompactBlocks(SeqId seq, int count) {
  KV_CHECK(!has_window_group(), "eviction inside a sequence with a window group");
  Seq& s = Get(seq);
  KV_CHECK(count >= 1 && count <= s.table.num_blocks(), "compacting away {} blocks of {}", count,
           s.table.num_blocks());
  BlockEviction e;
  if (!PrivatizeBlocks(s, 0, 0, &e)) return std::nullopt;
  e.moved.assign(s.table.blocks().begin(), s.table.blocks().end());
  e.evicted_tokens = count * config_.block_size;
  s.evicted += e.evicted_tokens;
  s.edited = true;
  return e;
}

void KvCacheManager::EndSequence(SeqId seq) {
  Seq& s = Get(seq);
  if (s.node) tree_->Unlock(s.node);
  for (BlockId b : s.table.TakeAll()) pool_.Release(b);
  for (BlockId w : s.wtable) {
    if (w.valid()) WindowRelease(w);
  }
  seqs_.erase(seq);
}

Result<std::optional<BlockCopy>> KvCacheManager::Fork(SeqId parent, SeqId child, int num_computed) {
  KV_CHECK(!seqs_.count(child), "sequence {} is already live", child.value());
  const int bs = config_.block_size;
  const int slots = num_computed - Get(parent).evicted;
  const int full = slots / bs;
  const bool partial = slots % bs != 0;
  {
    const Seq& p = Get(parent);
    KV_CHECK_GE(p.table.capacity_tokens(), slots);
    if (partial && (!MakeRoom(1) || (has_window_group() && !WindowMakeRoom(1)))) {
      return ResourceExhausted("no KV block free for the copy-on-write of a parallel sample");
    }
  }
  const Seq& p = Get(parent);  // MakeRoom does not touch sequences; re-fetch for clarity
  Seq c{.ns = p.ns,
        .priority = p.priority,
        .table = BlockTable(bs),
        .node = p.node,
        .num_committed = p.num_committed,
        .counted = true,
        .evicted = p.evicted,
        .edited = p.edited,
        .wtable = {},
        .window_first = std::min(p.window_first, full)};
  for (int i = 0; i < full; ++i) {
    pool_.AddRef(p.table.blocks()[i]);
    c.table.Append(p.table.blocks()[i]);
  }
  if (has_window_group()) {
    c.wtable.assign(p.wtable.begin(), p.wtable.begin() + full);
    for (BlockId w : c.wtable) {
      if (w.valid()) WindowAddRef(w);
    }
  }
  std::optional<BlockCopy> copy;
  if (partial) {
    const BlockId dst = *pool_.Allocate();
    c.table.Append(dst);
    copy = BlockCopy{p.table.blocks()[full], dst};
    if (has_window_group()) {
      const BlockId wdst = *wpool_.Allocate();
      c.wtable.push_back(wdst);
      window_copier_(p.wtable[static_cast<size_t>(full)], wdst);
    }
  }
  if (c.node) tree_->Lock(c.node);
  seqs_.emplace(child, std::move(c));
  return copy;
}

uint64_t KvCacheManager::PinKey(CacheNamespace ns, std::span<const TokenId> tokens) {
  uint64_t h = ns.value ^ 0x51ed270b27a3f1c5ull;
  for (TokenId t : tokens) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return h;
}

Result<int> KvCacheManager::Pin(CacheNamespace ns, std::span<const TokenId> tokens) {
  if (!tree_) return FailedPrecondition("pinning needs prefix caching enabled");
  const int max_blocks = static_cast<int>(tokens.size()) / config_.block_size;
  const std::vector<RadixTree::Node*> path = tree_->Match(ns, tokens, max_blocks);
  if (path.empty()) {
    return NotFound("no full block of this prefix is cached; run a request with it first");
  }
  int newly_pinned = 0;
  for (const RadixTree::Node* n : path) newly_pinned += RadixTree::pin_ref(n) == 0;
  if (tree_->num_pinned() + newly_pinned > max_pinned_blocks_) {
    return ResourceExhausted(fmt::format(
        "pinning {} more blocks would exceed the pinned share of {} blocks ({}% of the cache); "
        "unpin something or raise the pinned fraction",
        newly_pinned, max_pinned_blocks_, config_.max_pinned_fraction * 100));
  }
  tree_->Pin(path.back());
  pins_.emplace(PinKey(ns, tokens), path.back());
  return static_cast<int>(path.size()) * config_.block_size;
}

Status KvCacheManager::Unpin(CacheNamespace ns, std::span<const TokenId> tokens) {
  auto it = pins_.find(PinKey(ns, tokens));
  if (it == pins_.end()) return NotFound("this prefix is not pinned");
  tree_->Unpin(it->second);
  pins_.erase(it);
  return Status::Ok();
}

KvCacheStats KvCacheManager::stats() const {
  KvCacheStats st;
  st.num_blocks = pool_.num_blocks();
  st.num_free = pool_.num_free();
  st.num_cached = pool_.num_cached();
  st.num_in_use = pool_.num_in_use();
  if (tree_) {
    st.num_pinned = tree_->num_pinned();
    st.num_held = tree_->num_held();
    st.max_held = max_held_blocks_;
    st.num_explicit_holds = static_cast<int>(explicit_holds_.size());
    st.tier_retained_blocks = tier_retained_blocks_;
    st.num_tree_blocks = tree_->num_nodes();
    st.evicted_blocks = tree_->num_evicted();
  }
  st.num_window_blocks = wpool_.num_blocks();
  st.window_free = wpool_.num_free();
  st.window_cached = wpool_.num_cached();
  st.window_in_use = wpool_.num_in_use();
  st.window_evicted = window_evicted_;
  st.query_tokens = query_tokens_;
  st.hit_tokens = hit_tokens_;
  st.partial_hit_tokens = partial_hit_tokens_;
  return st;
}

void KvCacheManager::CheckWindowInvariants() const {
  wpool_.CheckInvariants();
  std::unordered_map<int32_t, int> refs;
  for (const auto& [id, s] : seqs_) {
    KV_CHECK_EQ(static_cast<int>(s.wtable.size()), s.table.num_blocks());
    for (size_t i = 0; i < s.wtable.size(); ++i) {
      const BlockId w = s.wtable[i];
      KV_CHECK(w.valid() == (static_cast<int>(i) >= s.window_first),
               "seq {} window entry {} is {} with the window from {}", id.value(), i, w.value(),
               s.window_first);
      if (w.valid()) ++refs[w.value()];
      // A committed block's window part is the one its node keeps.
      if (w.valid() && static_cast<int>(i) < s.num_committed && wpool_.is_cached(w)) {
        KV_CHECK(wnode_[static_cast<size_t>(w.value())] != nullptr, "window block {}", w.value());
      }
    }
  }
  size_t evictable = 0;
  for (int32_t b = 0; b < wpool_.num_blocks(); ++b) {
    const BlockId w(b);
    KV_CHECK(wpool_.ref_count(w) == (refs.count(b) ? refs[b] : 0),
             "window block {} has ref {} but tables hold it {} times", b, wpool_.ref_count(w),
             refs.count(b) ? refs[b] : 0);
    const RadixTree::Node* node = wnode_[static_cast<size_t>(b)];
    KV_CHECK(wpool_.is_cached(w) == (node != nullptr), "window block {} cached without a node", b);
    if (node) KV_CHECK(CachedWindowBlock(node) == w, "window block {} not kept by its node", b);
    const bool candidate = node && wpool_.ref_count(w) == 0;
    KV_CHECK(candidate == (wevictable_.count({wserial_[static_cast<size_t>(b)], b}) != 0),
             "window block {} eviction candidate mismatch", b);
    evictable += candidate;
  }
  KV_CHECK_EQ(evictable, wevictable_.size());
}

void KvCacheManager::CheckInvariants() const {
  pool_.CheckInvariants();
  if (has_window_group()) CheckWindowInvariants();
  std::unordered_map<int32_t, int> refs;  // block -> tables holding it
  for (const auto& [id, s] : seqs_) {
    for (BlockId b : s.table.blocks()) ++refs[b.value()];
    const std::vector<BlockId> path = RadixTree::PathBlocks(s.node);
    KV_CHECK_EQ(static_cast<int>(path.size()), s.num_committed);
    for (int i = 0; i < s.num_committed; ++i) {
      KV_CHECK(path[i] == s.table.blocks()[i], "seq {} block {} is not its locked path", id.value(),
               i);
    }
  }
  for (int32_t b = 0; b < pool_.num_blocks(); ++b) {
    const int held = refs.count(b) ? refs[b] : 0;
    KV_CHECK(pool_.ref_count(BlockId(b)) == held, "block {} has ref {} but {} tables hold it", b,
             pool_.ref_count(BlockId(b)), held);
  }
  if (!tree_) {
    KV_CHECK_EQ(pool_.num_cached(), 0);
    return;
  }
  tree_->CheckInvariants();
  int tree_unlocked = 0;
  tree_->ForEachNode([&](const RadixTree::Node* n) {
    const bool in_use = pool_.ref_count(RadixTree::block(n)) > 0;
    KV_CHECK(in_use == (RadixTree::lock_ref(n) > 0), "block {} ref {} but lock_ref {}",
             RadixTree::block(n).value(), pool_.ref_count(RadixTree::block(n)),
             RadixTree::lock_ref(n));
    tree_unlocked += !in_use;
  });
  KV_CHECK_EQ(tree_unlocked, pool_.num_cached());
  KV_CHECK_LE(tree_->num_pinned(), max_pinned_blocks_);
  KV_CHECK_LE(tree_->num_held(), max_held_blocks_);
}

}  // namespace kvserve
