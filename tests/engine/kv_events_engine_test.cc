// The KV event stream seen by a subscriber: a ZeroMQ SUB socket (and a DEALER for the replay
// socket) in the test, decoding the batches with nlohmann::json, rebuilds the set of blocks the
// engine's radix tree holds after a workload with hits and evictions, block for block, with the
// vLLM hashes a router computes from the blocks' tokens (util/vllm_block_hash.h). The subscriber
// connects after the first batches were sent, so it also fills the gap from the replay socket.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <zmq.hpp>

#include "engine/engine_core.h"
#include "engine_test_util.h"
#include "prefix/block_record.h"
#include "util/vllm_block_hash.h"

namespace kvserve {
namespace {
namespace kv_events_engine_test {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// A block as the subscriber knows it.
struct Block {
  std::optional<uint64_t> parent;
  std::vector<int32_t> tokens;
  std::string medium;
};

uint64_t SeqOf(const zmq::message_t& m) {
  EXPECT_EQ(m.size(), 8u);
  uint64_t v = 0;
  for (size_t i = 0; i < m.size(); ++i) v = (v << 8) | static_cast<const uint8_t*>(m.data())[i];
  return v;
}

// A subscriber written against vLLM's public format only.
class Subscriber {
 public:
  Subscriber(const std::string& endpoint, const std::string& replay_endpoint) {
    sub_.set(zmq::sockopt::subscribe, "");
    sub_.connect(endpoint);
    replay_.connect(replay_endpoint);
  }

  // Applies batches in sequence order until batch `last` is applied, filling gaps (and the
  // batches sent before it connected) from the replay socket.
  void ReceiveThrough(uint64_t last) {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (next_ <= last) {
      ASSERT_LT(Clock::now(), deadline) << "no batch " << next_ << " after 60 s";
      std::vector<zmq::message_t> parts;
      if (!Receive(sub_, &parts, 100)) {
        if (next_ == 0 || pending_.count(next_) == 0) Replay();
        continue;
      }
      ASSERT_EQ(parts.size(), 3u);
      EXPECT_EQ(parts[0].to_string(), "kv@test@tiny");
      Buffer(SeqOf(parts[1]), parts[2]);
      if (pending_.count(next_) == 0) Replay();  // a gap: ask for what is missing
      Drain();
    }
  }

  std::map<uint64_t, Block> blocks;                        // medium "GPU": the RAM tree
  std::map<std::string, std::map<uint64_t, Block>> lower;  // the other media ("DISK", ...)
  int cleared = 0;
  int stored_events = 0, removed_events = 0;
  int replays = 0;
  std::set<std::string> salts_seen;

 private:
  static bool Receive(zmq::socket_t& s, std::vector<zmq::message_t>* parts, int timeout_ms) {
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) == 0) return false;
    parts->clear();
    do {
      zmq::message_t m;
      EXPECT_TRUE(s.recv(m));
      parts->push_back(std::move(m));
    } while (parts->back().more());
    return true;
  }

  void Buffer(uint64_t seq, const zmq::message_t& payload) {
    if (seq < next_) return;  // already applied (from the replay)
    const auto* p = static_cast<const uint8_t*>(payload.data());
    pending_[seq] = json::from_msgpack(std::vector<uint8_t>(p, p + payload.size()));
  }

  void Drain() {
    for (auto it = pending_.find(next_); it != pending_.end(); it = pending_.find(next_)) {
      Apply(it->second);
      pending_.erase(it);
      ++next_;
    }
  }

  // [identity, "", start] to the ROUTER; back come [seq, payload]... then [-1, ""].
  void Replay() {
    ++replays;
    uint8_t start[8];
    for (int i = 0; i < 8; ++i) start[i] = static_cast<uint8_t>(next_ >> (8 * (7 - i)));
    replay_.send(zmq::message_t(), zmq::send_flags::sndmore);
    replay_.send(zmq::buffer(start, 8), zmq::send_flags::none);
    for (;;) {
      std::vector<zmq::message_t> parts;
      ASSERT_TRUE(Receive(replay_, &parts, 30000)) << "no replay answer";
      ASSERT_EQ(parts.size(), 3u);
      EXPECT_EQ(parts[0].size(), 0u);
      if (SeqOf(parts[1]) == ~uint64_t{0}) break;
      Buffer(SeqOf(parts[1]), parts[2]);
    }
    Drain();
  }

  void Apply(const json& batch) {
    ASSERT_TRUE(batch.is_array());
    ASSERT_EQ(batch.size(), 3u);
    EXPECT_TRUE(batch[0].is_number_float());
    EXPECT_EQ(batch[2], 0);
    for (const json& e : batch[1]) {
      const std::string tag = e[0];
      if (tag == "AllBlocksCleared") {
        ASSERT_EQ(e.size(), 1u);
        blocks.clear();
        lower.clear();
        ++cleared;
      } else if (tag == "BlockStored") {
        ASSERT_GE(e.size(), 8u);
        ++stored_events;
        const json& hashes = e[1];
        const size_t bs = e[4].get<size_t>();
        ASSERT_EQ(e[3].size(), hashes.size() * bs);
        const std::string medium = e[6];
        auto& set = medium == "GPU" ? blocks : lower[medium];
        std::optional<uint64_t> parent;
        if (!e[2].is_null()) {
          parent = e[2].get<uint64_t>();
          // In RAM a parent is always held (leaf-only eviction); a lower tier may have dropped it.
          if (medium == "GPU") {
            EXPECT_TRUE(blocks.count(*parent)) << "a parent the subscriber does not know";
          }
        }
        if (e.size() > 8) salts_seen.insert(e[8][0][0].get<std::string>());
        for (size_t i = 0; i < hashes.size(); ++i) {
          Block b{parent, {}, medium};
          for (size_t t = 0; t < bs; ++t) b.tokens.push_back(e[3][i * bs + t]);
          const uint64_t h = hashes[i];
          EXPECT_FALSE(set.count(h)) << "stored twice on " << medium << ": " << h;
          set[h] = b;
          parent = h;
        }
      } else if (tag == "BlockRemoved") {
        ASSERT_EQ(e.size(), 3u);
        ++removed_events;
        const std::string medium = e[2];
        auto& set = medium == "GPU" ? blocks : lower[medium];
        for (const json& h : e[1]) {
          EXPECT_EQ(set.erase(h.get<uint64_t>()), 1u)
              << "removed a block " << medium << " does not hold";
        }
      } else {
        ADD_FAILURE() << "unknown event " << tag;
      }
    }
  }

  zmq::context_t ctx_{1};
  zmq::socket_t sub_{ctx_, zmq::socket_type::sub};
  zmq::socket_t replay_{ctx_, zmq::socket_type::dealer};
  uint64_t next_ = 0;
  std::map<uint64_t, json> pending_;
};

// The tree's blocks as vLLM hashes: each node's path of tokens from its namespace root, hashed
// the way a router hashes a prompt.
std::map<uint64_t, std::vector<int32_t>> TreeBlocks(const EngineCore& core, const std::string& salt,
                                                    const std::set<uint64_t>& salted_roots) {
  std::map<uint64_t, std::vector<int32_t>> out;
  const RadixTree* tree = core.kv_manager().tree();
  const VllmBlockHash none = VllmNoneHash("");
  tree->ForEachNode([&](const RadixTree::Node* n) {
    std::vector<const RadixTree::Node*> path;
    for (const RadixTree::Node* p = n; RadixTree::parent(p); p = RadixTree::parent(p)) {
      path.push_back(p);
    }
    std::vector<int32_t> tokens;
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      const auto t = RadixTree::tokens(*it);
      tokens.insert(tokens.end(), t.begin(), t.end());
    }
    const RadixTree::Node* root = RadixTree::parent(path.back());
    const bool salted = salted_roots.count(RadixTree::key(root).Prefix64()) != 0;
    const auto hashes = VllmBlockHashes(tokens, tree->block_size(), none, salted ? salt : "");
    const auto own = RadixTree::tokens(n);
    out[VllmHashToU64(hashes.back())] = std::vector<int32_t>(own.begin(), own.end());
  });
  return out;
}

// `families` x 3 prompts of 70 tokens (4 full blocks); a family's members share their first 32
// tokens (hits).
std::vector<std::vector<TokenId>> PromptFamilies(int families) {
  std::vector<std::vector<TokenId>> prompts;
  for (int family = 0; family < families; ++family) {
    for (int member = 0; member < 3; ++member) {
      std::vector<TokenId> p;
      for (int i = 0; i < 70; ++i) {
        p.push_back(i < 32 ? 3 + (family * 37 + i * 7) % 280
                           : 5 + (family * 13 + member * 17 + i * 11) % 270);
      }
      prompts.push_back(std::move(p));
    }
  }
  return prompts;
}

TEST(KvEventsEngine, SubscriberRebuildsTheTreeAfterHitsAndEvictions) {
  EngineConfig c = testing_util::SmallConfig();
  c.num_blocks = 24;  // three of the prompts below fill it: later ones evict
  c.kv_events.enabled = true;
  c.kv_events.endpoint = "tcp://127.0.0.1:*";
  c.kv_events.replay_endpoint = "tcp://127.0.0.1:*";
  c.kv_events.topic = "kv@test@tiny";
  auto core = testing_util::MakeCore(c);
  KvEventPublisher* pub = core->kv_event_publisher();
  ASSERT_NE(pub, nullptr);
  EXPECT_EQ(pub->endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << pub->endpoint();

  std::vector<std::vector<TokenId>> prompts = PromptFamilies(5);
  // The subscriber joins after the first requests: the replay socket gives it what it missed.
  testing_util::RunAll(*core, {prompts[0], prompts[1]}, 4);
  pub->Flush();
  Subscriber sub(pub->endpoint(), pub->replay_endpoint());
  for (size_t i = 2; i + 2 < prompts.size(); i += 3) {
    testing_util::RunAll(*core, {prompts[i], prompts[i + 1], prompts[i + 2]}, 6);
    testing_util::RunAll(*core, {prompts[i - 2]}, 3);  // an older prompt again: hit or recompute
  }
  // A salted prompt: its first block's hash carries the salt as vLLM's extra key.
  EngineRequest salted = testing_util::Greedy(prompts[3], 2);
  salted.cache_salt = "tenant-a";
  ASSERT_TRUE(core->Add(RequestId(9000), salted).ok());
  std::vector<RequestOutput> out;
  while (core->HasWork()) ASSERT_TRUE(core->Step(&out).ok());
  testing_util::RunAll(*core, {prompts.back()}, 2);
  pub->Flush();

  const KvEventStats st = pub->stats();
  ASSERT_GT(st.batches, 3u);
  EXPECT_GT(st.removed_blocks, 0u) << "the workload should evict";
  EXPECT_EQ(st.unknown_blocks, 0u);
  sub.ReceiveThrough(st.batches - 1);
  EXPECT_EQ(sub.cleared, 1);  // the first batch: the RAM cache starts empty
  EXPECT_GE(sub.replays, 1);
  EXPECT_EQ(sub.salts_seen, (std::set<std::string>{"tenant-a"}));

  const std::set<uint64_t> salted_roots{RootKey(core->NamespaceFor("tenant-a")).Prefix64()};
  const auto tree = TreeBlocks(*core, "tenant-a", salted_roots);
  EXPECT_EQ(static_cast<int>(tree.size()), core->kv_manager().tree()->num_nodes());
  ASSERT_EQ(sub.blocks.size(), tree.size());
  for (const auto& [hash, tokens] : tree) {
    auto it = sub.blocks.find(hash);
    ASSERT_NE(it, sub.blocks.end()) << "the subscriber lacks block " << hash;
    EXPECT_EQ(it->second.tokens, tokens);
    EXPECT_EQ(it->second.medium, "GPU");
  }
  // A router's view of a prompt: its block hashes, computed from its tokens alone.
  const auto hashes = VllmBlockHashes(prompts.back(), 16, VllmNoneHash(""));
  for (const VllmBlockHash& h : hashes) EXPECT_TRUE(sub.blocks.count(VllmHashToU64(h)));
  const auto salted_hashes = VllmBlockHashes(prompts[3], 16, VllmNoneHash(""), "tenant-a");
  EXPECT_TRUE(sub.blocks.count(VllmHashToU64(salted_hashes[0])));
}

// A restart on a disk tier: the new publisher starts with AllBlocksCleared, and the blocks loaded
// from disk into RAM are BlockStored like computed ones (the tier the engine computes from is
// what the stream reports), with the same hashes as before the restart.
TEST(KvEventsEngine, BlocksLoadedFromDiskAfterARestartAreStoredAgain) {
  testing_util::TempDir dir;
  EngineConfig c = testing_util::SmallConfig();
  c.tiers.disk_path = dir.path();
  c.kv_events.enabled = true;
  c.kv_events.endpoint = "tcp://127.0.0.1:*";
  c.kv_events.replay_endpoint = "tcp://127.0.0.1:*";
  c.kv_events.topic = "kv@test@tiny";
  std::vector<TokenId> prompt;
  for (int i = 0; i < 50; ++i) prompt.push_back(3 + (i * 7) % 280);
  const auto hashes = VllmBlockHashes(prompt, 16, VllmNoneHash(""));  // 3 full blocks
  {
    auto core = testing_util::MakeCore(c);
    testing_util::RunAll(*core, {prompt}, 2);
    core->FlushTierWrites();
  }
  auto core = testing_util::MakeCore(c);
  KvEventPublisher* pub = core->kv_event_publisher();
  const auto done = testing_util::RunAll(*core, {prompt}, 2);
  EXPECT_EQ(done[0].metrics.cached_tokens, 48);  // all three blocks from disk
  pub->Flush();
  Subscriber sub(pub->endpoint(), pub->replay_endpoint());
  sub.ReceiveThrough(pub->stats().batches - 1);
  EXPECT_EQ(sub.cleared, 1);
  EXPECT_EQ(static_cast<int>(sub.blocks.size()), core->kv_manager().tree()->num_nodes());
  for (const VllmBlockHash& h : hashes) {
    ASSERT_TRUE(sub.blocks.count(VllmHashToU64(h)));
    EXPECT_EQ(sub.blocks[VllmHashToU64(h)].medium, "GPU");
    // The disk's surviving records were announced after AllBlocksCleared, with its medium.
    EXPECT_TRUE(sub.lower["DISK"].count(VllmHashToU64(h)));
  }
}

// The vLLM hash of every full block of these token sequences (unsalted), by kvserve key.
void AddKeysAndHashes(const EngineCore& core, const std::vector<TokenId>& seq,
                      std::unordered_map<BlockKey, uint64_t>* out) {
  BlockKey key = RootKey(core.NamespaceFor(""));
  const auto hashes = VllmBlockHashes(seq, 16, VllmNoneHash(""));
  for (size_t b = 0; b < hashes.size(); ++b) {
    key = ChainKey(key, std::span<const TokenId>(seq).subspan(b * 16, 16));
    (*out)[key] = VllmHashToU64(hashes[b]);
  }
}

// The disk tier's records (the files under their final names), as vLLM hashes. With
// `chained_only`, only those whose parents up to the first block are records too: what a
// restarted tier can name (the others' hashes need tokens no record holds).
std::set<uint64_t> DiskBlocks(const std::string& dir,
                              const std::unordered_map<BlockKey, uint64_t>& hashes,
                              bool chained_only = false) {
  std::unordered_map<BlockKey, BlockKey> parent_of;  // key → parent key (root: itself)
  for (const auto& sub : std::filesystem::directory_iterator(dir)) {
    if (sub.path().filename() == "tmp") continue;
    for (const auto& f : std::filesystem::directory_iterator(sub.path())) {
      BlockKey key;
      EXPECT_TRUE(Digest256::FromHex(f.path().stem().string(), &key)) << f.path();
      std::ifstream in(f.path(), std::ios::binary);
      std::vector<char> header(kRecordHeaderBytes);
      in.read(header.data(), static_cast<std::streamsize>(header.size()));
      const auto h = ParseBlockRecordHeader(
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(header.data()), header.size()));
      EXPECT_TRUE(h.ok()) << f.path();
      if (h.ok()) parent_of[key] = h->parent_key == h->root_key ? key : h->parent_key;
    }
  }
  std::set<uint64_t> out;
  for (const auto& [key, parent] : parent_of) {
    auto it = hashes.find(key);
    EXPECT_NE(it, hashes.end()) << "a record of no block of the workload";
    if (it == hashes.end()) continue;
    bool chained = true;
    for (BlockKey k = key; chained_only && !(parent_of.at(k) == k);) {
      k = parent_of.at(k);
      chained = parent_of.count(k) != 0;
      if (!chained) break;
    }
    if (chained) out.insert(it->second);
  }
  return out;
}

template <typename Map>
std::set<uint64_t> Keys(const Map& m) {
  std::set<uint64_t> out;
  for (const auto& [k, v] : m) out.insert(k);
  return out;
}

// The lower tiers announce their own contents: after a workload with RAM hits, RAM evictions
// (into the disk, written through), disk evictions (a disk of 40 records), and loads back from
// disk, the subscriber's "GPU" view is exactly the tree and its "DISK" view exactly the disk's
// records; after a restart, AllBlocksCleared and then every surviving record on "DISK".
TEST(KvEventsEngine, PerMediumViewsMatchTheRamTreeAndTheDiskRecords) {
  testing_util::TempDir dir;
  EngineConfig c = testing_util::SmallConfig();
  c.num_blocks = 24;
  c.tiers.disk_path = dir.path();
  uint64_t record_bytes = 0;
  {  // one block's record size, for a disk that holds 40 of them
    auto probe = testing_util::MakeCore(c);
    std::vector<TokenId> p(17, 5);
    testing_util::RunAll(*probe, {p}, 1);
    probe->FlushTierWrites();
    const TierStats st = probe->TierStatsNow().at(0);
    ASSERT_EQ(st.entries, 1);
    record_bytes = static_cast<uint64_t>(st.bytes_held);
  }
  std::filesystem::remove_all(dir.path());
  c.tiers.disk_size_bytes = 40 * record_bytes;
  c.kv_events.enabled = true;
  c.kv_events.endpoint = "tcp://127.0.0.1:*";
  c.kv_events.replay_endpoint = "tcp://127.0.0.1:*";
  c.kv_events.topic = "kv@test@tiny";

  std::vector<std::vector<TokenId>> prompts = PromptFamilies(6);
  std::unordered_map<BlockKey, uint64_t> hashes;
  auto core = testing_util::MakeCore(c);
  const auto run = [&](EngineCore& engine, const std::vector<std::vector<TokenId>>& batch) {
    const auto done = testing_util::RunAll(engine, batch, 4);
    engine.FlushTierWrites();  // the disk holds them before the next run looks (no timing)
    for (size_t i = 0; i < batch.size(); ++i) {
      std::vector<TokenId> seq = batch[i];
      seq.insert(seq.end(), done[i].tokens.begin(), done[i].tokens.end());
      AddKeysAndHashes(engine, seq, &hashes);
    }
  };
  for (size_t i = 0; i + 2 < prompts.size(); i += 3) {
    run(*core, {prompts[i], prompts[i + 1], prompts[i + 2]});
    if (i >= 6) run(*core, {prompts[i - 6]});  // evicted from RAM by now: loaded from disk
  }
  run(*core, {prompts[1]});
  core->FlushTierWrites();
  KvEventPublisher* pub = core->kv_event_publisher();
  pub->Flush();
  const TierStats disk = core->TierStatsNow().at(0);
  EXPECT_GT(disk.hit_blocks, 0) << "the workload should load blocks back from disk";
  const KvEventStats st = pub->stats();
  EXPECT_GT(st.tier_stored_blocks, 0u);
  EXPECT_GT(st.tier_removed_blocks, 0u) << "the 40-record disk should evict";
  EXPECT_EQ(st.unknown_blocks, 0u);
  EXPECT_EQ(st.unnamed_tier_blocks, 0u);
  {
    Subscriber sub(pub->endpoint(), pub->replay_endpoint());
    sub.ReceiveThrough(st.batches - 1);
    EXPECT_EQ(sub.cleared, 1);
    EXPECT_EQ(Keys(sub.blocks), Keys(TreeBlocks(*core, "", {})));
    const std::set<uint64_t> on_disk = DiskBlocks(dir.path(), hashes);
    EXPECT_EQ(static_cast<int64_t>(on_disk.size()), disk.entries);
    EXPECT_EQ(Keys(sub.lower["DISK"]), on_disk);
    EXPECT_EQ(sub.lower.size(), 1u);  // no other medium
  }

  // A restart: AllBlocksCleared, then the disk's records; a load from disk adds them to RAM.
  core.reset();
  core = testing_util::MakeCore(c);
  pub = core->kv_event_publisher();
  const std::set<uint64_t> on_disk = DiskBlocks(dir.path(), hashes, /*chained_only=*/true);
  ASSERT_FALSE(on_disk.empty());
  pub->Flush();
  // Records whose parent the disk evicted cannot be named after a restart: counted, not sent.
  EXPECT_EQ(pub->stats().unnamed_tier_blocks + on_disk.size(),
            DiskBlocks(dir.path(), hashes).size());
  {
    Subscriber sub(pub->endpoint(), pub->replay_endpoint());
    sub.ReceiveThrough(pub->stats().batches - 1);
    EXPECT_EQ(sub.cleared, 1);
    EXPECT_TRUE(sub.blocks.empty());
    EXPECT_EQ(Keys(sub.lower["DISK"]), on_disk);
  }
  run(*core, {prompts.back()});
  core->FlushTierWrites();
  pub->Flush();
  EXPECT_GT(core->TierStatsNow().at(0).hit_blocks, 0);
  Subscriber sub(pub->endpoint(), pub->replay_endpoint());
  sub.ReceiveThrough(pub->stats().batches - 1);
  EXPECT_EQ(Keys(sub.blocks), Keys(TreeBlocks(*core, "", {})));
  // Since the restart: the named records, plus the blocks written since (named from RAM).
  std::set<uint64_t> expected = DiskBlocks(dir.path(), hashes, /*chained_only=*/true);
  for (uint64_t h : DiskBlocks(dir.path(), hashes)) {
    if (sub.blocks.count(h) || on_disk.count(h)) expected.insert(h);
  }
  EXPECT_EQ(Keys(sub.lower["DISK"]), expected);
}

TEST(KvEventsEngine, EventsNeedPrefixCachingAndAFreeEndpoint) {
  EngineConfig c = testing_util::SmallConfig();
  c.kv_events.enabled = true;
  c.kv_events.endpoint = "tcp://127.0.0.1:*";
  c.enable_prefix_caching = false;
  auto no_cache = EngineCore::Create(testing_util::TinyModel(64), c);
  ASSERT_FALSE(no_cache.ok());
  EXPECT_NE(no_cache.status().message().find("--no-prefix-caching"), std::string::npos);

  c.enable_prefix_caching = true;
  auto first = testing_util::MakeCore(c);
  c.kv_events.endpoint = first->kv_event_publisher()->endpoint();  // taken
  c.kv_events.endpoint.replace(c.kv_events.endpoint.find("127.0.0.1"), 9, "*");
  auto second = EngineCore::Create(testing_util::TinyModel(64), c);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("cannot bind"), std::string::npos)
      << second.status().message();
}

}  // namespace kv_events_engine_test
}  // namespace
}  // namespace kvserve
