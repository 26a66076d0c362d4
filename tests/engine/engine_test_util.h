// Helpers for engine tests: a tiny synthetic model (2 layers, hidden 64, vocab 300) loaded from
// the same bytes as often as needed, a small cache configuration and an EngineCore over it,
// greedy requests, and the reference output of one request run alone on a Generator (no
// batching, no prefix cache).
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <memory>
#include <vector>

#include "engine/engine_core.h"
#include "engine/generator.h"
#include "engine/synthetic_model.h"
#include "model/model.h"

namespace kvserve::testing_util {

// The bytes of the tiny model with weights drawn from `seed` (memoized per seed; 42 is the
// model every engine test shares, another seed is "another fine-tune" of the same shape).
inline const std::vector<uint8_t>& TinyModelBytes(uint64_t seed = 42) {
  static std::map<uint64_t, std::vector<uint8_t>> memo;
  auto it = memo.find(seed);
  if (it != memo.end()) return it->second;
  std::vector<uint8_t> bytes = [seed] {
    SyntheticModelSpec spec;
    spec.num_layers = 2;
    spec.hidden = 64;
    spec.num_heads = 4;
    spec.num_kv_heads = 2;
    spec.ffn = 128;
    spec.context_length = 512;
    spec.seed = seed;
    spec.tokenizer = MakeSyntheticSpec(300);
    auto writer = BuildSyntheticModel(spec);
    EXPECT_TRUE(writer.ok()) << writer.status().ToString();
    return *writer->WriteToBytes();
  }();
  return memo.emplace(seed, std::move(bytes)).first->second;
}

inline std::unique_ptr<Model> TinyModel(int max_batch_tokens, uint64_t seed = 42) {
  auto file = GgufFile::FromBytes(TinyModelBytes(seed));
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  auto model = Model::Load(std::move(file).value(), ModelOptions{max_batch_tokens, 0});
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return std::move(model).value();
}

// 64 blocks of 16 slots, 8 sequences and 48 tokens per step, one thread.
inline EngineConfig SmallConfig() {
  EngineConfig c;
  c.num_threads = 1;
  c.block_size = 16;
  c.num_blocks = 64;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 48;
  return c;
}

inline std::unique_ptr<EngineCore> MakeCore(const EngineConfig& config) {
  auto core = EngineCore::Create(TinyModel(64), config);
  EXPECT_TRUE(core.ok()) << core.status().ToString();
  return std::move(core).value();
}

inline EngineRequest Greedy(std::vector<TokenId> prompt, int max_tokens, int n = 1) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0.f;
  r.max_tokens = max_tokens;
  r.n = n;
  return r;
}

// A fresh directory named after the running test, removed at the end.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("kvserve-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

struct Done {
  std::vector<TokenId> tokens;
  RequestMetrics metrics;
};

// Adds every request at once (greedy, max_tokens each) and steps, waiting for tier loads, until
// all have finished; checks the invariants after every step and that every block came back.
inline std::vector<Done> RunAll(EngineCore& core, const std::vector<std::vector<TokenId>>& prompts,
                         int max_tokens) {
  static int64_t next_id = 1;
  std::map<int64_t, size_t> index;
  for (size_t i = 0; i < prompts.size(); ++i) {
    index[next_id] = i;
    EXPECT_TRUE(core.Add(RequestId(next_id++), Greedy(prompts[i], max_tokens)).ok());
  }
  std::vector<Done> done(prompts.size());
  std::vector<RequestOutput> events;
  while (core.HasWork() || core.HasPendingTierLoads()) {
    if (!core.HasWork()) {
      core.WaitForTierLoad(std::chrono::milliseconds(100));
      continue;
    }
    EXPECT_TRUE(core.Step(&events).ok());
    core.CheckInvariants();
    for (RequestOutput& e : events) {
      Done& d = done[index.at(e.id.value())];
      d.tokens.insert(d.tokens.end(), e.new_tokens.begin(), e.new_tokens.end());
      if (e.finished) {
        EXPECT_NE(e.finish_reason, FinishReason::kError) << e.error.ToString();
        d.metrics = e.metrics;
      }
    }
    events.clear();
  }
  const EngineStats st = core.stats();
  EXPECT_EQ(st.kv.num_in_use, 0);
  EXPECT_EQ(core.kv_manager().num_live_sequences(), 0);
  return done;
}

// Greedy output of `prompt` run alone on a Generator over `model` (no batching, no cache).
inline std::vector<TokenId> GreedyAlone(std::unique_ptr<Model> model, KvDtype dtype,
                                        const std::vector<TokenId>& prompt, int max_tokens) {
  auto gen = Generator::Create(
      std::move(model), GeneratorConfig{.num_threads = 1, .k_dtype = dtype, .v_dtype = dtype});
  EXPECT_TRUE(gen.ok()) << gen.status().ToString();
  GenerateRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0.f;
  r.max_tokens = max_tokens;
  auto out = (*gen)->Generate(r, nullptr);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out->ids;
}

// Six prompts of 30..50 tokens (ids 3..292) in pairs (0, 1), (2, 3), (4, 5) whose partners share
// their first 20 or 36 tokens (a full block, then a partial one); token i of prompt r is
// 3 + (base * a + i * b) % 290.
inline std::vector<std::vector<TokenId>> PairedPrompts(int a, int b) {
  std::vector<std::vector<TokenId>> p(6);
  for (int r = 0; r < 6; ++r) {
    const int shared = r % 2 == 0 ? 20 : 36;
    for (int i = 0; i < 30 + 4 * r; ++i) {
      const int base = i < shared ? r / 2 : r;  // partners share a prefix
      p[static_cast<size_t>(r)].push_back(3 + (base * a + i * b) % 290);
    }
  }
  return p;
}

// Two rounds of greedy requests for `prompts` (max_tokens each, ids round * 10 + i), the
// second hitting the first's cached blocks, stepped to the end with the invariants checked
// after every step; each request's tokens by id.
inline std::map<int64_t, std::vector<TokenId>> RunTwoRounds(
    EngineCore& core, const std::vector<std::vector<TokenId>>& prompts, int max_tokens) {
  std::map<int64_t, std::vector<TokenId>> got;
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_TRUE(
          core.Add(RequestId(round * 10 + static_cast<int64_t>(i)), Greedy(prompts[i], max_tokens))
              .ok());
    }
    std::vector<RequestOutput> events;
    while (core.HasWork()) {
      EXPECT_TRUE(core.Step(&events).ok());
      core.CheckInvariants();
    }
    for (const RequestOutput& e : events) {
      auto& ids = got[e.id.value()];
      ids.insert(ids.end(), e.new_tokens.begin(), e.new_tokens.end());
      if (e.finished) {
        EXPECT_NE(e.finish_reason, FinishReason::kError) << e.error.ToString();
      }
    }
  }
  return got;
}

// Greedy output of `prompt` run alone (with the given KV cache types), memoized.
class Reference {
 public:
  explicit Reference(KvDtype k_dtype = KvDtype::kF16, KvDtype v_dtype = KvDtype::kF16) {
    auto gen = Generator::Create(
        TinyModel(64), GeneratorConfig{.num_threads = 1, .k_dtype = k_dtype, .v_dtype = v_dtype});
    EXPECT_TRUE(gen.ok()) << gen.status().ToString();
    gen_ = std::move(gen).value();
  }
  const std::vector<TokenId>& Greedy(const std::vector<TokenId>& prompt, int max_tokens,
                                     const std::vector<TokenId>& stop_ids = {}) {
    auto key = std::make_pair(prompt, std::make_pair(max_tokens, stop_ids));
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    GenerateRequest r;
    r.prompt = prompt;
    r.sampling.temperature = 0.f;
    r.max_tokens = max_tokens;
    r.stop_ids = stop_ids;
    auto result = gen_->Generate(r, nullptr);
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    return memo_[key] = result->ids;
  }

 private:
  std::unique_ptr<Generator> gen_;
  std::map<std::pair<std::vector<TokenId>, std::pair<int, std::vector<TokenId>>>,
           std::vector<TokenId>>
      memo_;
};

}  // namespace kvserve::testing_util
