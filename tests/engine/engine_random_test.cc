// The correctness test of the whole KV machinery: thousands of interleaved operations (add,
// cancel, pin/unpin, step until requests finish) with prompts that share prefixes, parallel
// samples and priorities, under a cache small enough to force eviction and preemption. Every greedy output
// must equal the output of the same request run alone without batching or caching, the KV
// invariants must hold after every step, and every block must be back at the end. With a disk
// tier the operations also include flushing the tier's writes and restarting the engine on the
// same directory (RAM empty, disk kept), under a disk capacity small enough to evict there too.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>

#include "engine/engine_core.h"
#include "engine_test_util.h"
#include "prefix/redis_test_server.h"

namespace kvserve {
namespace {

struct Live {
  std::vector<TokenId> prompt;
  int max_tokens;
  int n;
  bool cancelled = false;
  std::map<int, std::vector<TokenId>> tokens;  // by sample index
  int finished = 0;
};

struct Totals {
  int finished = 0, cancelled = 0, pins = 0, restarts = 0;
  int64_t preemptions = 0, evictions = 0, hits = 0, partial_hits = 0;
  int64_t tier_hit_blocks = 0, tier_written_blocks = 0, tier_corrupt = 0;
  int64_t draft_tokens = 0, accepted_tokens = 0;
};

std::unique_ptr<EngineCore> NewCore(const EngineConfig& config) {
  auto core_or = EngineCore::Create(testing_util::TinyModel(32), config);
  EXPECT_TRUE(core_or.ok()) << core_or.status().ToString();
  return std::move(core_or).value();
}

Totals RunRandomized(EngineConfig config, uint64_t seed, int num_ops) {
  std::unique_ptr<EngineCore> core_ptr = NewCore(config);
  const bool tiers = config.tiers.any();
  static testing_util::Reference ref;  // shared by the configurations: outputs do not depend on them
  std::unique_ptr<EngineCore>& core = core_ptr;  // follows restarts
  Totals totals;
  const auto accumulate_tiers = [&](EngineCore& c) {
    c.FlushTierWrites();
    for (const TierStats& t : c.stats().tiers) {
      totals.tier_hit_blocks += t.hit_blocks;
      totals.tier_written_blocks += t.blocks_written;
      totals.tier_corrupt += t.errors[static_cast<int>(TierError::kCorrupt)];
    }
  };
  std::mt19937_64 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  // A few shared "system prompts" of different lengths, some extending others.
  std::vector<std::vector<TokenId>> prefixes(5);
  for (size_t p = 0; p < prefixes.size(); ++p) {
    for (int i = 0; i < 8 + 9 * static_cast<int>(p); ++i) prefixes[p].push_back(uniform(3, 299));
  }
  prefixes[4].assign(prefixes[3].begin(), prefixes[3].begin() + 20);
  prefixes[4].insert(prefixes[4].end(), {11, 12, 13, 14, 15, 16});

  std::map<int64_t, Live> live;
  std::vector<TokenId> pinned;  // the prefix pinned now, if any
  int64_t next_id = 0;
  std::vector<RequestOutput> events;
  auto drain = [&] {
    for (RequestOutput& e : events) {
      Live& l = live.at(e.id.value());
      auto& ids = l.tokens[e.index];
      ids.insert(ids.end(), e.new_tokens.begin(), e.new_tokens.end());
      if (!e.finished) continue;
      EXPECT_NE(e.finish_reason, FinishReason::kError) << e.error.ToString();
      if (e.finish_reason != FinishReason::kCancelled) {
        EXPECT_EQ(ids, ref.Greedy(l.prompt, l.max_tokens)) << "request " << e.id.value()
                                                           << " sample " << e.index;
        ++totals.finished;
      }
      if (e.request_finished) live.erase(e.id.value());
    }
    events.clear();
  };
  for (int op = 0; op < num_ops; ++op) {
    const bool planned_restart = tiers && (op == num_ops / 3 || op == 2 * num_ops / 3);
    const int kind = planned_restart ? 6 : uniform(0, 9);
    if (kind < 4 && live.size() < 12) {  // add
      EngineRequest r;
      r.prompt = prefixes[static_cast<size_t>(uniform(0, 4))];
      if (uniform(0, 3) == 0) r.prompt.resize(static_cast<size_t>(uniform(1, static_cast<int>(r.prompt.size()))));
      for (int i = uniform(1, 10); i > 0; --i) r.prompt.push_back(uniform(3, 299));
      r.sampling.temperature = 0.f;
      r.max_tokens = uniform(1, 12);
      r.n = uniform(0, 5) == 0 ? 2 : 1;
      r.priority = uniform(0, 2);
      const int64_t id = next_id++;
      EXPECT_TRUE(core->Add(RequestId(id), r).ok());
      live[id] = Live{r.prompt, r.max_tokens, r.n};
    } else if (kind == 4 && !live.empty()) {  // cancel a random live request
      auto it = live.begin();
      std::advance(it, uniform(0, static_cast<int>(live.size()) - 1));
      core->Cancel(RequestId(it->first), &events);
      ++totals.cancelled;
    } else if (kind == 5 && uniform(0, 3) == 0) {  // pin or unpin a shared prefix
      if (pinned.empty()) {
        const auto& p = prefixes[static_cast<size_t>(uniform(0, 4))];
        if (core->Pin(p).ok()) {  // NotFound until some request computed it
          pinned = p;
          ++totals.pins;
        }
      } else {
        EXPECT_TRUE(core->Unpin(pinned).ok());
        pinned.clear();
      }
    } else if (tiers && kind == 6 && !planned_restart && uniform(0, 7) == 0) {  // writes land
      core->FlushTierWrites();
    } else if (tiers && ((kind == 6 && uniform(0, 40) == 0) || planned_restart)) {
      // Restart on the same directory: at random, and at two fixed points so that every run
      // restarts (tier loads complete asynchronously, so the random draws after them vary).
      for (auto& [id, l] : live) core->Cancel(RequestId(id), &events);
      totals.cancelled += static_cast<int>(live.size());
      drain();
      pinned.clear();
      accumulate_tiers(*core);
      core_ptr.reset();
      core_ptr = NewCore(config);
      ++totals.restarts;
    } else if (core->HasWork()) {  // step: requests finish here
      EXPECT_TRUE(core->Step(&events).ok());
    } else if (core->HasPendingTierLoads()) {
      core->WaitForTierLoad(std::chrono::milliseconds(50));
    }
    core->CheckInvariants();
    drain();
  }
  if (!pinned.empty()) {
    EXPECT_TRUE(core->Unpin(pinned).ok());
  }
  while (core->HasWork() || core->HasPendingTierLoads()) {
    if (!core->HasWork()) {
      core->WaitForTierLoad(std::chrono::milliseconds(50));
      continue;
    }
    EXPECT_TRUE(core->Step(&events).ok());
    core->CheckInvariants();
    drain();
  }
  EXPECT_TRUE(live.empty());
  const EngineStats st = core->stats();
  EXPECT_EQ(st.kv.num_in_use, 0);
  EXPECT_EQ(st.kv.num_free + st.kv.num_cached, st.kv.num_blocks);
  EXPECT_EQ(core->kv_manager().num_live_sequences(), 0);
  if (const DraftRunner* d = core->draft_runner()) {
    EXPECT_EQ(d->num_live(), 0);
    EXPECT_EQ(d->kv_manager().stats().num_in_use, 0);
  }
  totals.draft_tokens = st.spec.num_draft_tokens;
  totals.accepted_tokens = st.spec.num_accepted_tokens;
  if (tiers) accumulate_tiers(*core);
  totals.preemptions = st.num_preemptions;
  totals.evictions = st.kv.evicted_blocks;
  totals.hits = st.kv.hit_tokens;
  totals.partial_hits = st.kv.partial_hit_tokens;
  std::printf(
      "[ summary ] %d ops: %d samples checked, %d cancels, %lld preemptions, "
      "%lld evicted blocks, %lld hit tokens (%lld in copied partial blocks), %d pins\n",
      num_ops, totals.finished, totals.cancelled, static_cast<long long>(totals.preemptions),
      static_cast<long long>(totals.evictions), static_cast<long long>(totals.hits),
      static_cast<long long>(totals.partial_hits), totals.pins);
  if (config.spec.enabled()) {
    std::printf("[ summary ] speculative (%s): %lld drafts, %lld accepted\n",
                SpecMethodName(config.spec.method), static_cast<long long>(totals.draft_tokens),
                static_cast<long long>(totals.accepted_tokens));
  }
  if (tiers) {
    std::printf("[ summary ] tiers: %d restarts, %lld blocks loaded, %lld written, %lld corrupt\n",
                totals.restarts, static_cast<long long>(totals.tier_hit_blocks),
                static_cast<long long>(totals.tier_written_blocks),
                static_cast<long long>(totals.tier_corrupt));
  }
  return totals;
}

EngineConfig SmallCache(bool caching, EvictionPolicyKind policy) {
  EngineConfig c;
  c.num_threads = 1;
  c.block_size = 4;
  c.num_blocks = 24;  // 96 slots; one request needs up to 17 blocks (66 tokens)
  c.max_num_seqs = 6;
  c.max_num_batched_tokens = 32;
  c.max_model_len = 128;
  c.enable_prefix_caching = caching;
  c.eviction_policy = policy;
  return c;
}

TEST(EngineRandomized, LruCacheMatchesRunningAloneUnderEvictionAndPreemption) {
  const Totals t = RunRandomized(SmallCache(true, EvictionPolicyKind::kLru), 1, 4000);
  EXPECT_GT(t.finished, 200);
  EXPECT_GT(t.cancelled, 50);
  EXPECT_GT(t.preemptions, 0);
  EXPECT_GT(t.evictions, 0);
  EXPECT_GT(t.hits, 0);
  EXPECT_GT(t.partial_hits, 0);  // prompts that leave or end inside cached blocks
  EXPECT_GT(t.pins, 0);
}

TEST(EngineRandomized, WholeBlockHitsOnlyMatchToo) {
  EngineConfig c = SmallCache(true, EvictionPolicyKind::kLru);
  c.partial_block_hits = false;
  const Totals t = RunRandomized(c, 4, 1000);
  EXPECT_GT(t.hits, 0);
  EXPECT_EQ(t.partial_hits, 0);
}

TEST(EngineRandomized, LfuAndPriorityPoliciesToo) {
  const Totals lfu = RunRandomized(SmallCache(true, EvictionPolicyKind::kLfu), 2, 1000);
  const Totals prio = RunRandomized(SmallCache(true, EvictionPolicyKind::kPriority), 3, 1000);
  EXPECT_GT(lfu.evictions, 0);
  EXPECT_GT(prio.evictions, 0);
  EXPECT_GT(lfu.preemptions, 0);
  EXPECT_GT(prio.preemptions, 0);
}

TEST(EngineRandomized, DiskTierWriteThroughMatchesAcrossRestarts) {
  testing_util::TempDir dir;
  EngineConfig c = SmallCache(true, EvictionPolicyKind::kLru);
  c.tiers.disk_path = dir.path();
  c.tiers.disk_size_bytes = 60 * 1024;  // ~50 records of 1.2 KB: the disk evicts too
  const Totals t = RunRandomized(c, 5, 3000);
  EXPECT_GT(t.finished, 100);
  EXPECT_GT(t.restarts, 0);
  EXPECT_GT(t.tier_hit_blocks, 0);
  EXPECT_GT(t.tier_written_blocks, 0);
  EXPECT_EQ(t.tier_corrupt, 0);
}

TEST(EngineRandomized, DiskTierWriteBackMatchesToo) {
  testing_util::TempDir dir;
  EngineConfig c = SmallCache(true, EvictionPolicyKind::kLru);
  c.tiers.disk_path = dir.path();
  c.tiers.write_policy = TierWritePolicy::kWriteBack;
  const Totals t = RunRandomized(c, 6, 2000);
  EXPECT_GT(t.finished, 100);
  EXPECT_GT(t.tier_hit_blocks, 0);
  EXPECT_GT(t.tier_written_blocks, 0);
  EXPECT_EQ(t.tier_corrupt, 0);
}

TEST(EngineRandomized, DiskAndRedisTiersMatchToo) {
  testing_util::TempDir dir;
  testing_util::RedisTestServer redis;
  ASSERT_TRUE(redis.Start());
  EngineConfig c = SmallCache(true, EvictionPolicyKind::kLru);
  c.tiers.disk_path = dir.path();
  c.tiers.disk_size_bytes = 30 * 1024;  // small: many blocks only Redis still holds
  c.tiers.redis_url = redis.url();
  const Totals t = RunRandomized(c, 7, 2000);
  EXPECT_GT(t.finished, 100);
  EXPECT_GT(t.restarts, 0);
  EXPECT_GT(t.tier_hit_blocks, 0);
  EXPECT_EQ(t.tier_corrupt, 0);
}

TEST(EngineRandomized, NgramSpeculationMatchesToo) {
  EngineConfig c = SmallCache(true, EvictionPolicyKind::kLru);
  c.spec.method = SpecMethod::kNgram;
  c.spec.num_speculative_tokens = 4;
  c.spec.prompt_lookup_min = 1;
  c.spec.adaptive = false;  // the counts below must not depend on measured step times
  const Totals t = RunRandomized(c, 8, 3000);
  EXPECT_GT(t.finished, 150);
  EXPECT_GT(t.preemptions, 0);
  EXPECT_GT(t.accepted_tokens, 0);
  EXPECT_LT(t.accepted_tokens, t.draft_tokens);
}

TEST(EngineRandomized, DraftModelSpeculationMatchesToo) {
  testing_util::TempDir dir;
  std::filesystem::create_directories(dir.path());
  // The target itself as draft (every draft accepted) and a model of another seed (mostly
  // rejected). Not adaptive: a draft as large as the target never pays, and the adaptive policy
  // would rightly not draft at all.
  for (uint64_t draft_seed : {42, 43}) {
    const std::string path = dir.path() + "/draft-" + std::to_string(draft_seed) + ".gguf";
    const std::vector<uint8_t>& bytes = testing_util::TinyModelBytes(draft_seed);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    EngineConfig c = SmallCache(true, EvictionPolicyKind::kLru);
    c.spec.method = SpecMethod::kDraftModel;
    c.spec.draft_model = path;
    c.spec.num_speculative_tokens = 3;
    c.spec.adaptive = false;
    const Totals t = RunRandomized(c, 9 + draft_seed, 1500);
    EXPECT_GT(t.finished, 80);
    EXPECT_GT(t.preemptions, 0);
    EXPECT_GT(t.draft_tokens, 0);
    if (draft_seed == 42) {
      EXPECT_EQ(t.accepted_tokens, t.draft_tokens);
    }
  }
}

TEST(EngineRandomized, NoPrefixCachingMatchesToo) {
  const Totals t = RunRandomized(SmallCache(false, EvictionPolicyKind::kLru), 4, 1000);
  EXPECT_EQ(t.hits, 0);
  EXPECT_GT(t.preemptions, 0);
}

}  // namespace
}  // namespace kvserve
