// The lower KV tiers seen from the engine: blocks that come back from disk or Redis instead of
// being computed give byte-identical greedy output; a restart on the same directory serves the
// same prompts from disk; blocks of another model, corrupted or truncated records, and a dead
// Redis are counted misses, never wrong text.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "engine/engine.h"
#include "engine/engine_core.h"
#include "engine_test_util.h"
#include "prefix/redis_test_server.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;
using testing_util::Greedy;

// TempDir plus the block files in it.
class TempDir : public testing_util::TempDir {
 public:
  std::vector<fs::path> Files() const {
    std::vector<fs::path> out;
    if (!fs::exists(path())) return out;
    for (const auto& e : fs::recursive_directory_iterator(path())) {
      if (e.is_regular_file() && e.path().extension() == ".kvb") out.push_back(e.path());
    }
    return out;
  }
};

// The same shape and name as the test model, other weights (another "fine-tune").
std::unique_ptr<Model> OtherWeightsModel() { return testing_util::TinyModel(64, 43); }

EngineConfig TierConfig(const std::string& disk, const std::string& redis = {}) {
  EngineConfig c = testing_util::SmallConfig();
  c.tiers.disk_path = disk;
  c.tiers.redis_url = redis;
  return c;
}

std::unique_ptr<EngineCore> Core(const EngineConfig& c, std::unique_ptr<Model> model = nullptr) {
  auto core = EngineCore::Create(model ? std::move(model) : testing_util::TinyModel(64), c);
  EXPECT_TRUE(core.ok()) << core.status().ToString();
  return std::move(core).value();
}

using testing_util::Done;
using testing_util::RunAll;

int TierTokens(const RequestMetrics& m, const std::string& tier) {
  for (const auto& t : m.cached_tokens_by_tier) {
    if (t.tier == tier) return t.tokens;
  }
  ADD_FAILURE() << "no tier " << tier << " in cached_tokens_by_tier";
  return -1;
}

// Three prompts of 40 tokens (2 full blocks of 16 cached, the rest computed) with a shared
// first block.
std::vector<std::vector<TokenId>> Prompts() {
  std::vector<std::vector<TokenId>> p(3);
  for (int i = 0; i < 40; ++i) {
    p[0].push_back(3 + (i * 7) % 290);
    p[1].push_back(i < 16 ? p[0].back() : 5 + (i * 11) % 280);
    p[2].push_back(7 + (i * 13) % 285);
  }
  return p;
}

// By value: callers pass the temporary that EngineCore::stats() returns.
TierStats Tier(const EngineStats& st, const std::string& name) {
  for (const TierStats& t : st.tiers) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << "no tier " << name;
  return {};
}

TEST(TierEngine, RestartServesThePromptsFromDiskWithIdenticalOutput) {
  TempDir dir;
  testing_util::Reference ref;
  const auto prompts = Prompts();
  {
    auto core = Core(TierConfig(dir.path()));
    const auto first = RunAll(*core, prompts, 8);
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(first[i].tokens, ref.Greedy(prompts[i], 8));
    // Within one process the RAM tier answers.
    const auto again = RunAll(*core, prompts, 8);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(again[i].tokens, ref.Greedy(prompts[i], 8));
      EXPECT_EQ(again[i].metrics.cached_tokens, 32);
      EXPECT_EQ(TierTokens(again[i].metrics, "ram"), 32);
      EXPECT_EQ(TierTokens(again[i].metrics, "disk"), 0);
    }
  }  // destroying the core finishes its queued writes
  EXPECT_FALSE(dir.Files().empty());
  auto core = Core(TierConfig(dir.path()));
  const auto after = RunAll(*core, prompts, 8);
  int disk_tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(after[i].tokens, ref.Greedy(prompts[i], 8)) << "prompt " << i;
    EXPECT_EQ(after[i].metrics.cached_tokens, 32) << "prompt " << i;
    disk_tokens += TierTokens(after[i].metrics, "disk");
  }
  // 5 distinct blocks on disk (prompts 0 and 1 share their first): each loaded once, the shared
  // one then found in RAM by whichever request came second.
  EXPECT_EQ(disk_tokens, 5 * 16);
  const EngineStats st = core->stats();
  EXPECT_EQ(Tier(st, "disk").hit_blocks, 5);
  EXPECT_EQ(Tier(st, "disk").errors[static_cast<int>(TierError::kCorrupt)], 0);
}

// A prompt that fills its last block: RAM and, after a restart, the disk both give all but the
// final token (the last block is loaded too, and its first 15 tokens copied).
TEST(TierEngine, APromptFillingItsLastBlockComputesOnlyTheFinalTokenFromRamAndDisk) {
  TempDir dir;
  testing_util::Reference ref;
  std::vector<std::vector<TokenId>> prompts(1);
  for (int i = 0; i < 48; ++i) prompts[0].push_back(3 + (i * 17) % 290);
  const std::vector<TokenId> expected = ref.Greedy(prompts[0], 8);
  {
    auto core = Core(TierConfig(dir.path()));
    EXPECT_EQ(RunAll(*core, prompts, 8)[0].tokens, expected);
    const auto again = RunAll(*core, prompts, 8);
    EXPECT_EQ(again[0].tokens, expected);
    EXPECT_EQ(again[0].metrics.cached_tokens, 47);
    EXPECT_EQ(TierTokens(again[0].metrics, "ram"), 47);
    EXPECT_EQ(core->stats().kv.partial_hit_tokens, 15);
  }
  auto core = Core(TierConfig(dir.path()));
  const auto after = RunAll(*core, prompts, 8);
  EXPECT_EQ(after[0].tokens, expected);
  EXPECT_EQ(after[0].metrics.cached_tokens, 47);
  EXPECT_EQ(TierTokens(after[0].metrics, "disk"), 47);
  EXPECT_EQ(TierTokens(after[0].metrics, "ram"), 0);
  EXPECT_EQ(Tier(core->stats(), "disk").hit_blocks, 3);
  // Run again: now everything comes from RAM, and nothing more is loaded.
  const auto ram = RunAll(*core, prompts, 8);
  EXPECT_EQ(ram[0].tokens, expected);
  EXPECT_EQ(TierTokens(ram[0].metrics, "ram"), 47);
  EXPECT_EQ(Tier(core->stats(), "disk").hit_blocks, 3);
}

TEST(TierEngine, AnotherModelWithTheSameShapeAndNameNeverHits) {
  TempDir dir;
  const auto prompts = Prompts();
  { RunAll(*Core(TierConfig(dir.path())), prompts, 4); }
  const size_t files = dir.Files().size();
  ASSERT_GT(files, 0u);
  auto other = Core(TierConfig(dir.path()), OtherWeightsModel());
  const auto out = RunAll(*other, prompts, 4);
  for (const Done& d : out) {  // only RAM hits (prompts 0 and 1 share a block)
    EXPECT_EQ(d.metrics.cached_tokens, TierTokens(d.metrics, "ram"));
    EXPECT_EQ(TierTokens(d.metrics, "disk"), 0);
  }
  const EngineStats st = other->stats();
  EXPECT_EQ(Tier(st, "disk").hit_blocks, 0);
  EXPECT_EQ(Tier(st, "disk").errors[static_cast<int>(TierError::kCorrupt)], 0);
}

void FlipByte(const fs::path& file, std::uintmax_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x40));
}

TEST(TierEngine, CorruptedAndTruncatedFilesAreCountedMissesNeverWrongText) {
  TempDir dir;
  testing_util::Reference ref;
  const auto prompts = Prompts();
  { RunAll(*Core(TierConfig(dir.path())), prompts, 8); }
  auto files = dir.Files();
  ASSERT_GE(files.size(), 5u);
  std::sort(files.begin(), files.end());
  // Flip one payload byte in every file: each is a counted corrupt miss at load time.
  for (const fs::path& f : files) FlipByte(f, fs::file_size(f) / 2);
  {
    auto core = Core(TierConfig(dir.path()));
    const auto out = RunAll(*core, prompts, 8);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(out[i].tokens, ref.Greedy(prompts[i], 8));
      EXPECT_EQ(TierTokens(out[i].metrics, "disk"), 0);
    }
    const TierStats disk = Tier(core->stats(), "disk");
    // Requests 0 and 2 meet their corrupt first block; request 1 shares request 0's, which is
    // gone from the disk by the time it looks.
    EXPECT_GE(disk.errors[static_cast<int>(TierError::kCorrupt)], 2);
    EXPECT_EQ(disk.hit_blocks, 0);
  }
  // The bad files were deleted; the blocks computed again were written anew.
  files = dir.Files();
  ASSERT_FALSE(files.empty());
  fs::resize_file(files.front(), fs::file_size(files.front()) / 3);  // truncated
  auto core = Core(TierConfig(dir.path()));
  const auto out = RunAll(*core, prompts, 8);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(out[i].tokens, ref.Greedy(prompts[i], 8));
}

TEST(TierEngine, WriteBackWritesBlocksWhenRamEvictsThem) {
  TempDir dir;
  testing_util::Reference ref;
  EngineConfig c = TierConfig(dir.path());
  c.tiers.write_policy = TierWritePolicy::kWriteBack;
  c.num_blocks = 4;  // one request (3 blocks) at a time: every new prompt evicts
  auto core = Core(c);
  const auto prompts = Prompts();
  RunAll(*core, {prompts[0]}, 4);
  core->FlushTierWrites();
  EXPECT_EQ(Tier(core->stats(), "disk").blocks_written, 0);  // nothing evicted yet
  RunAll(*core, {prompts[2]}, 4);
  RunAll(*core, {prompts[1]}, 4);
  core->FlushTierWrites();
  EXPECT_GT(Tier(core->stats(), "disk").blocks_written, 0);
  EXPECT_GT(core->stats().kv.evicted_blocks, 0);
  // What RAM evicted comes back from disk, with the same output. (A block is on disk once its
  // queued write has landed: flush first, or a request may compute it again instead.)
  int disk_tokens = 0;
  for (const auto& p : prompts) {
    core->FlushTierWrites();
    const auto out = RunAll(*core, {p}, 4);
    EXPECT_EQ(out[0].tokens, ref.Greedy(p, 4));
    EXPECT_EQ(out[0].metrics.cached_tokens, 32);
    disk_tokens += TierTokens(out[0].metrics, "disk");
  }
  EXPECT_GT(disk_tokens, 0);
}

// prompt_cache_retention "24h" with a disk tier: the prompt's blocks are written to disk at once
// (even write-back, with nothing evicted) and kept there for the day, the deadline stored as the
// files' modification time; RAM holds nothing, and a restart serves the prompt from disk.
TEST(TierEngine, ATierOnlyHoldWritesTheBlocksToDiskWithTheirDeadline) {
  TempDir dir;
  testing_util::Reference ref;
  EngineConfig c = TierConfig(dir.path());
  c.tiers.write_policy = TierWritePolicy::kWriteBack;
  const auto prompts = Prompts();
  {
    auto core = Core(c);
    EngineRequest r = Greedy(prompts[0], 4);
    r.holds.push_back(KvHold{40, 24 * 3'600'000, /*tiers_only=*/true});
    ASSERT_TRUE(core->Add(RequestId(1), std::move(r)).ok());
    std::vector<RequestOutput> events;
    RequestMetrics m;
    while (core->HasWork()) {
      ASSERT_TRUE(core->Step(&events).ok());
      for (const RequestOutput& e : events) {
        if (e.request_finished) m = e.metrics;
      }
      events.clear();
    }
    EXPECT_EQ(m.held_tokens, std::vector<int>{32});
    EXPECT_EQ(core->stats().kv.num_held, 0);
    EXPECT_EQ(core->stats().kv.tier_retained_blocks, 2);
    core->FlushTierWrites();
    EXPECT_EQ(Tier(core->stats(), "disk").blocks_written, 2);
    const auto later = fs::file_time_type::clock::now() + std::chrono::hours(23);
    int retained = 0;
    for (const fs::path& f : dir.Files()) retained += fs::last_write_time(f) > later;
    EXPECT_EQ(retained, 2);
  }
  auto restarted = Core(c);
  const auto out = RunAll(*restarted, {prompts[0]}, 4);
  EXPECT_EQ(out[0].tokens, ref.Greedy(prompts[0], 4));
  EXPECT_EQ(TierTokens(out[0].metrics, "disk"), 32);
}

TEST(TierEngine, UnusableDiskDirectoryLeavesTheTierOffAndServes) {
  TempDir dir;
  fs::create_directories(fs::path(dir.path()).parent_path());
  { std::ofstream(dir.path()) << "a file where the directory should be"; }
  testing_util::Reference ref;
  auto core = Core(TierConfig(dir.path()));
  const auto prompts = Prompts();
  const auto out = RunAll(*core, prompts, 4);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(out[i].tokens, ref.Greedy(prompts[i], 4));
  const EngineStats st = core->stats();
  EXPECT_TRUE(st.tiers.empty());
  EXPECT_EQ(st.failed_tiers, std::vector<std::string>{"disk"});
  fs::remove(dir.path());
}

// Write-through lands on the tier writer thread, possibly after the engine's last step: the
// threaded Engine's stats still show it once it has landed, with no further step.
TEST(TierEngine, ThreadedEngineStatsShowWritesThatLandAfterTheLastStep) {
  TempDir dir;
  auto engine = Engine::Create(testing_util::TinyModel(64), TierConfig(dir.path()));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto stream = (*engine)->AddRequest(Greedy(Prompts()[0], 4));
  ASSERT_TRUE(stream.ok());
  RequestOutput e;
  while ((*stream)->Next(&e)) {
  }
  // Two full prompt blocks are written. Polling is the synchronisation; the deadline only
  // bounds a hang (a stale snapshot would never change while the engine sleeps).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int64_t written = 0;
  while ((written = Tier((*engine)->stats(), "disk").blocks_written) < 2 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(written, 2);
  EXPECT_EQ(dir.Files().size(), 2u);
}

// The threaded Engine: its step thread sleeps while only tier loads are in flight and is woken
// by the reader thread when one finishes (no lost wake-up: every request ends).
TEST(TierEngine, ThreadedEngineWakesForTierLoadsFromManyClients) {
  TempDir dir;
  testing_util::Reference ref;
  const auto prompts = Prompts();
  { RunAll(*Core(TierConfig(dir.path())), prompts, 6); }
  for (int round = 0; round < 2; ++round) {  // a fresh engine each round: RAM empty, disk warm
    auto engine = Engine::Create(testing_util::TinyModel(64), TierConfig(dir.path()));
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    std::vector<std::vector<TokenId>> got(prompts.size());
    std::vector<int> disk(prompts.size(), 0);
    std::vector<std::thread> clients;
    for (size_t i = 0; i < prompts.size(); ++i) {
      clients.emplace_back([&, i] {
        auto stream = (*engine)->AddRequest(Greedy(prompts[i], 6));
        ASSERT_TRUE(stream.ok());
        RequestOutput e;
        while ((*stream)->Next(&e)) {
          got[i].insert(got[i].end(), e.new_tokens.begin(), e.new_tokens.end());
          if (e.finished) disk[i] = TierTokens(e.metrics, "disk");
        }
      });
    }
    for (auto& t : clients) t.join();
    int disk_tokens = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got[i], ref.Greedy(prompts[i], 6)) << i;
      disk_tokens += disk[i];
    }
    EXPECT_EQ(disk_tokens, 5 * 16);
    EXPECT_EQ((*engine)->stats().kv.num_in_use, 0);
  }
}

TEST(TierEngine, TwoEnginesOnOneRedisShareBlocksWithIdenticalOutput) {
  testing_util::RedisTestServer redis;
  ASSERT_TRUE(redis.Start());
  testing_util::Reference ref;
  const auto prompts = Prompts();
  auto a = Core(TierConfig("", redis.url()));
  auto b = Core(TierConfig("", redis.url()));  // another replica: its own RAM
  RunAll(*a, prompts, 8);
  a->FlushTierWrites();
  EXPECT_EQ(Tier(a->stats(), "redis").blocks_written, 5);  // 5 distinct full blocks
  const auto out = RunAll(*b, prompts, 8);
  int redis_tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(out[i].tokens, ref.Greedy(prompts[i], 8));
    EXPECT_EQ(out[i].metrics.cached_tokens, 32);
    redis_tokens += TierTokens(out[i].metrics, "redis");
  }
  EXPECT_EQ(redis_tokens, 5 * 16);
  // Blocks that came from Redis are not written back to it.
  b->FlushTierWrites();
  EXPECT_EQ(Tier(b->stats(), "redis").blocks_written, 0);
}

TEST(TierEngine, GarbageInRedisIsACountedMissAndDeleted) {
  testing_util::RedisTestServer redis;
  ASSERT_TRUE(redis.Start());
  testing_util::Reference ref;
  const auto prompts = Prompts();
  {
    auto a = Core(TierConfig("", redis.url()));
    RunAll(*a, prompts, 8);
  }
  redisReply* keys = redis.Command("KEYS kvserve:*");
  ASSERT_NE(keys, nullptr);
  ASSERT_EQ(keys->elements, 5u);
  for (size_t i = 0; i < keys->elements; ++i) {
    freeReplyObject(redis.Command("SET %s garbage", keys->element[i]->str));
  }
  freeReplyObject(keys);
  auto b = Core(TierConfig("", redis.url()));
  const auto out = RunAll(*b, prompts, 8);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(out[i].tokens, ref.Greedy(prompts[i], 8));
  EXPECT_GE(Tier(b->stats(), "redis").errors[static_cast<int>(TierError::kCorrupt)], 2);
  // Every bad value was deleted or written anew by B's write-through: none is left. (Which
  // blocks B then found in Redis depends on how its writes and loads interleave.)
  b->FlushTierWrites();
  keys = redis.Command("KEYS kvserve:*");
  ASSERT_NE(keys, nullptr);
  for (size_t i = 0; i < keys->elements; ++i) {
    redisReply* len = redis.Command("STRLEN %s", keys->element[i]->str);
    ASSERT_NE(len, nullptr);
    EXPECT_GT(len->integer, 1000) << keys->element[i]->str;
    freeReplyObject(len);
  }
  freeReplyObject(keys);
}

TEST(TierEngine, DeadRedisFailsNoRequestAndIsBypassed) {
  testing_util::RedisTestServer redis;
  ASSERT_TRUE(redis.Start());
  testing_util::Reference ref;
  TempDir dir;
  auto core = Core(TierConfig(dir.path(), redis.url()));
  redis.Kill();
  const auto prompts = Prompts();
  const auto out = RunAll(*core, prompts, 8);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(out[i].tokens, ref.Greedy(prompts[i], 8));
  core->FlushTierWrites();
  const EngineStats st = core->stats();
  const TierStats& r = Tier(st, "redis");
  EXPECT_GE(r.errors[static_cast<int>(TierError::kConnection)] +
                r.errors[static_cast<int>(TierError::kTimeout)],
            1);
  EXPECT_GT(Tier(st, "disk").blocks_written, 0);  // the disk tier goes on
}

TEST(TierEngine, TiersNeedPrefixCaching) {
  EngineConfig c = TierConfig("/tmp/unused");
  c.enable_prefix_caching = false;
  auto core = EngineCore::Create(testing_util::TinyModel(64), c);
  ASSERT_FALSE(core.ok());
  EXPECT_NE(core.status().message().find("prefix caching"), std::string::npos);
}

}  // namespace
}  // namespace kvserve
