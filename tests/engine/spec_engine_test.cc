// Speculative decoding in the engine: greedy output is exactly the output without it (alone,
// batched, with prefix caching, preemption and quantized KV, for both proposers), a draft model
// equal to the target has every draft accepted, seeded sampling draws the same tokens with and
// without speculation and the same distribution across seeds, and every block comes back.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include "engine/engine_core.h"
#include "engine_test_util.h"

namespace kvserve {
namespace {
// The test executables are unity builds: this file's helpers stay apart from its neighbours'.
namespace spec_engine_test {

using testing_util::Greedy;
using testing_util::MakeCore;
using testing_util::SmallConfig;

// The tiny model of `seed` as a file (the draft model is loaded from a path).
std::string ModelFile(const testing_util::TempDir& dir, uint64_t seed) {
  std::filesystem::create_directories(dir.path());
  const std::string path = dir.path() + "/tiny-" + std::to_string(seed) + ".gguf";
  const std::vector<uint8_t>& bytes = testing_util::TinyModelBytes(seed);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path;
}

// Not adaptive unless asked: whether the adaptive policy drafts depends on measured step times,
// and the tests that count drafts must not.
SpecConfig Ngram(int k = 4, bool adaptive = false) {
  SpecConfig s;
  s.adaptive = adaptive;
  s.method = SpecMethod::kNgram;
  s.num_speculative_tokens = k;
  s.prompt_lookup_min = 1;
  s.prompt_lookup_max = 3;
  return s;
}

SpecConfig Draft(const std::string& path, int k = 4, bool adaptive = true) {
  SpecConfig s;
  s.method = SpecMethod::kDraftModel;
  s.draft_model = path;
  s.num_speculative_tokens = k;
  s.adaptive = adaptive;
  return s;
}

struct Outcome {
  std::map<int64_t, std::map<int, std::vector<TokenId>>> tokens;  // request -> sample -> ids
  std::map<int64_t, RequestMetrics> metrics;                      // sample 0's final metrics
  EngineStats stats;
};

// Adds every request at once, steps until all finish, checks the invariants after each step
// and that every block is back at the end.
Outcome RunAll(EngineCore& core, const std::vector<EngineRequest>& requests) {
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_TRUE(core.Add(RequestId(static_cast<int64_t>(i)), requests[i]).ok());
  }
  Outcome o;
  std::vector<RequestOutput> events;
  while (core.HasWork()) {
    EXPECT_TRUE(core.Step(&events).ok());
    core.CheckInvariants();
    for (RequestOutput& e : events) {
      auto& ids = o.tokens[e.id.value()][e.index];
      ids.insert(ids.end(), e.new_tokens.begin(), e.new_tokens.end());
      EXPECT_NE(e.finish_reason, FinishReason::kError) << e.error.ToString();
      if (e.finished && e.index == 0) o.metrics[e.id.value()] = e.metrics;
    }
    events.clear();
  }
  o.stats = core.stats();
  EXPECT_EQ(o.stats.kv.num_in_use, 0);
  EXPECT_EQ(core.kv_manager().num_live_sequences(), 0);
  if (const DraftRunner* d = core.draft_runner()) {
    EXPECT_EQ(d->num_live(), 0);
    EXPECT_EQ(d->kv_manager().stats().num_in_use, 0);
  }
  return o;
}

// Prompts that repeat themselves (what n-gram lookup feeds on) and shared prefixes.
std::vector<EngineRequest> MixedGreedy(int max_tokens) {
  std::vector<EngineRequest> rs;
  const std::vector<TokenId> system = {7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24};
  for (int i = 0; i < 6; ++i) {
    std::vector<TokenId> p = system;
    const std::vector<TokenId> part = {static_cast<TokenId>(40 + i), 41, 42, 43, static_cast<TokenId>(50 + 3 * i)};
    for (int rep = 0; rep < 3; ++rep) p.insert(p.end(), part.begin(), part.end());
    rs.push_back(Greedy(p, max_tokens - i));
  }
  rs.push_back(Greedy({100, 101, 102, 100, 101, 102, 100}, max_tokens));
  rs.push_back(Greedy({5}, max_tokens));
  return rs;
}

void ExpectMatchesAlone(const Outcome& o, const std::vector<EngineRequest>& rs,
                        testing_util::Reference& ref) {
  for (size_t i = 0; i < rs.size(); ++i) {
    const auto& samples = o.tokens.at(static_cast<int64_t>(i));
    for (const auto& [index, ids] : samples) {
      EXPECT_EQ(ids, ref.Greedy(rs[i].prompt, rs[i].max_tokens)) << "request " << i << " sample " << index;
    }
  }
}

TEST(SpecEngine, NgramGreedyMatchesRunningAloneUnderBatching) {
  testing_util::Reference ref;
  const auto rs = MixedGreedy(40);
  {  // adaptive: exact, whatever it decides to draft
    EngineConfig c = SmallConfig();
    c.spec = Ngram(4, /*adaptive=*/true);
    auto core = MakeCore(c);
    ExpectMatchesAlone(RunAll(*core, rs), rs, ref);
  }
  EngineConfig c = SmallConfig();
  c.spec = Ngram();
  auto core = MakeCore(c);
  const Outcome o = RunAll(*core, rs);
  ExpectMatchesAlone(o, rs, ref);
  EXPECT_GT(o.stats.spec.num_drafts, 0);
  EXPECT_GT(o.stats.spec.num_accepted_tokens, 0);
  EXPECT_LE(o.stats.spec.num_accepted_tokens, o.stats.spec.num_draft_tokens);
  int64_t per_pos = 0;
  for (int64_t n : o.stats.spec.accepted_per_pos) per_pos += n;
  EXPECT_EQ(per_pos, o.stats.spec.num_accepted_tokens);
}

TEST(SpecEngine, DraftEqualToTargetHasEveryDraftAccepted) {
  testing_util::TempDir dir;
  testing_util::Reference ref;
  EngineConfig c = SmallConfig();
  c.spec = Draft(ModelFile(dir, 42), 4, /*adaptive=*/false);
  auto core = MakeCore(c);
  const auto rs = MixedGreedy(30);
  const Outcome o = RunAll(*core, rs);
  ExpectMatchesAlone(o, rs, ref);
  EXPECT_GT(o.stats.spec.num_draft_tokens, 100);
  EXPECT_EQ(o.stats.spec.num_accepted_tokens, o.stats.spec.num_draft_tokens);
  // Every request here has one sample: their counts add up to the engine's, the verification
  // that ended each one included.
  int64_t drafted = 0;
  for (const auto& [id, m] : o.metrics) drafted += m.draft_tokens;
  EXPECT_EQ(drafted, o.stats.spec.num_draft_tokens);
  for (const auto& [id, m] : o.metrics) {
    EXPECT_EQ(m.accepted_tokens, m.draft_tokens) << "request " << id;
    // Up to 5 tokens per verification: most of the request was generated by accepted drafts.
    if (rs[static_cast<size_t>(id)].max_tokens >= 20) {
      EXPECT_GT(m.draft_tokens, m.generated_tokens / 2);
    }
  }
}

TEST(SpecEngine, DraftModelWithOtherWeightsIsStillExact) {
  testing_util::TempDir dir;
  testing_util::Reference ref;
  for (bool adaptive : {false, true}) {
    EngineConfig c = SmallConfig();
    c.spec = Draft(ModelFile(dir, 43), 3, adaptive);
    auto core = MakeCore(c);
    // The scratch sequence that measured the costs left nothing behind: no block in use, no
    // cache entry, no lookup counted.
    const KvCacheStats fresh = core->stats().kv;
    EXPECT_EQ(fresh.num_free, fresh.num_blocks);
    EXPECT_EQ(fresh.num_tree_blocks, 0);
    EXPECT_EQ(fresh.query_tokens, 0);
    const auto rs = MixedGreedy(30);
    const Outcome o = RunAll(*core, rs);
    ExpectMatchesAlone(o, rs, ref);
    // Drafts: all of them, or (adaptive) at least the probe at each sequence's first decode
    // step; the draft has other weights, so some are rejected.
    EXPECT_GT(o.stats.spec.num_drafts, 0);
    EXPECT_LT(o.stats.spec.num_accepted_tokens, o.stats.spec.num_draft_tokens);
    // The adaptive policy prices verification from a table measured at start-up: a step of
    // 1..k+1 rows, each measured.
    if (adaptive) {
      ASSERT_EQ(o.stats.spec.step_seconds_by_rows.size(), 4u);
      for (double s : o.stats.spec.step_seconds_by_rows) EXPECT_GT(s, 0.0);
      EXPECT_GT(o.stats.spec.calibration_seconds, 0.0);
    } else {
      EXPECT_TRUE(o.stats.spec.step_seconds_by_rows.empty());
    }
  }
}

TEST(SpecEngine, ExactUnderPreemptionAndParallelSamples) {
  testing_util::TempDir dir;
  testing_util::Reference ref;
  for (SpecConfig spec : {Ngram(5), Draft(ModelFile(dir, 42), 5, false)}) {
    EngineConfig c = SmallConfig();
    c.block_size = 4;
    c.num_blocks = 40;  // 160 slots for ~8 sequences of up to 60 tokens: preemption
    c.spec = spec;
    auto core = MakeCore(c);
    auto rs = MixedGreedy(32);
    rs[1].n = 2;
    rs[6].n = 3;
    const Outcome o = RunAll(*core, rs);
    ExpectMatchesAlone(o, rs, ref);
    EXPECT_GT(o.stats.num_preemptions, 0) << SpecMethodName(spec.method);
    EXPECT_GT(o.stats.spec.num_accepted_tokens, 0);
  }
}

TEST(SpecEngine, ExactWithoutPrefixCachingAndWithQuantizedKv) {
  testing_util::TempDir dir;
  testing_util::Reference ref_int8(KvDtype::kInt8, KvDtype::kInt8);
  testing_util::Reference ref;
  for (SpecConfig spec : {Ngram(), Draft(ModelFile(dir, 42))}) {
    EngineConfig q = SmallConfig();
    q.k_dtype = q.v_dtype = KvDtype::kInt8;
    q.spec = spec;
    auto core = MakeCore(q);
    auto rs = MixedGreedy(24);
    ExpectMatchesAlone(RunAll(*core, rs), rs, ref_int8);
    EngineConfig nc = SmallConfig();
    nc.enable_prefix_caching = false;
    nc.spec = spec;
    auto core2 = MakeCore(nc);
    ExpectMatchesAlone(RunAll(*core2, rs), rs, ref);
  }
}

TEST(SpecEngine, PerRequestOptOutAndMaxTokensAreKept) {
  testing_util::TempDir dir;
  testing_util::Reference ref;
  EngineConfig c = SmallConfig();
  c.spec = Draft(ModelFile(dir, 42), 8, false);
  auto core = MakeCore(c);
  auto rs = MixedGreedy(20);
  rs[0].speculative = false;
  rs[2].max_tokens = 2;  // one verification at most, with one draft
  const Outcome o = RunAll(*core, rs);
  ExpectMatchesAlone(o, rs, ref);
  EXPECT_EQ(o.metrics.at(0).draft_tokens, 0);
  EXPECT_GT(o.metrics.at(1).draft_tokens, 0);
  EXPECT_LE(o.metrics.at(2).draft_tokens, 1);
  for (const auto& [id, samples] : o.tokens) {
    EXPECT_EQ(samples.at(0).size(), static_cast<size_t>(rs[static_cast<size_t>(id)].max_tokens));
  }
}

EngineRequest Sampled(uint64_t seed, int max_tokens) {
  EngineRequest r = Greedy({30, 31, 32, 33, 30, 31, 32, 33, 30, 31}, max_tokens);
  r.sampling.temperature = 1.0f;
  r.sampling.top_k = 6;
  r.sampling.repetition_penalty = 1.05f;
  r.sampling.seed = seed;
  r.sampling.has_seed = true;
  return r;
}

TEST(SpecEngine, SeededSamplingDrawsTheSameTokensWithAndWithout) {
  testing_util::TempDir dir;
  std::vector<EngineRequest> rs;
  for (uint64_t seed = 0; seed < 8; ++seed) rs.push_back(Sampled(seed, 24));
  auto plain = MakeCore(SmallConfig());
  const Outcome off = RunAll(*plain, rs);
  for (SpecConfig spec : {Ngram(), Draft(ModelFile(dir, 42), 4, false)}) {
    EngineConfig c = SmallConfig();
    c.spec = spec;
    auto core = MakeCore(c);
    const Outcome on = RunAll(*core, rs);
    EXPECT_EQ(on.tokens, off.tokens) << SpecMethodName(spec.method);
    EXPECT_GT(on.stats.spec.num_accepted_tokens, 0);
    EXPECT_LT(on.stats.spec.num_accepted_tokens, on.stats.spec.num_draft_tokens);
  }
}

// Pearson's two-sample chi-square over the tokens at generated positions 2..5 (those that
// verification samples), bins with fewer than 10 expected pooled.
TEST(SpecEngine, SampledDistributionMatchesWithoutSpeculationChiSquare) {
  testing_util::TempDir dir;
  constexpr int kSeeds = 300;
  const auto histogram = [&](const EngineConfig& c, uint64_t first_seed) {
    auto core = MakeCore(c);
    std::vector<EngineRequest> rs;
    for (int i = 0; i < kSeeds; ++i) rs.push_back(Sampled(first_seed + static_cast<uint64_t>(i), 6));
    std::map<std::pair<int, TokenId>, int> h;
    int64_t accepted = 0;
    for (size_t b = 0; b < rs.size(); b += 8) {  // a few batches, not one huge one
      std::vector<EngineRequest> batch(rs.begin() + static_cast<ptrdiff_t>(b),
                                       rs.begin() + static_cast<ptrdiff_t>(std::min(rs.size(), b + 8)));
      const Outcome o = RunAll(*core, batch);
      for (const auto& [id, samples] : o.tokens) {
        for (int pos = 2; pos < 6; ++pos) ++h[{pos, samples.at(0)[static_cast<size_t>(pos)]}];
      }
      accepted = o.stats.spec.num_accepted_tokens;
    }
    return std::make_pair(h, accepted);
  };
  EngineConfig spec = SmallConfig();
  spec.spec = Draft(ModelFile(dir, 42), 4, false);  // its own argmax: accepted often, not always
  // Disjoint seeds, so the test compares distributions, not identical draws.
  const auto [with, accepted] = histogram(spec, 1000);
  const auto [without, unused] = histogram(SmallConfig(), 5000);
  EXPECT_GT(accepted, 0);
  std::map<std::pair<int, TokenId>, std::pair<int, int>> both;
  for (const auto& [k, n] : with) both[k].first += n;
  for (const auto& [k, n] : without) both[k].second += n;
  double chi2 = 0;
  int bins = 0;
  std::pair<int, int> pooled{0, 0};
  const auto add = [&](int a, int b) {
    const double e = (a + b) / 2.0;
    chi2 += (a - e) * (a - e) / e + (b - e) * (b - e) / e;
    ++bins;
  };
  for (const auto& [k, ab] : both) {
    if (ab.first + ab.second < 20) {
      pooled.first += ab.first;
      pooled.second += ab.second;
    } else {
      add(ab.first, ab.second);
    }
  }
  if (pooled.first + pooled.second > 0) add(pooled.first, pooled.second);
  const int df = bins - 1;
  ASSERT_GT(df, 5);
  // The 0.1% critical value (Wilson-Hilferty): a fixed seed set, so this never flakes.
  const double z = 3.09;
  const double crit = df * std::pow(1 - 2.0 / (9 * df) + z * std::sqrt(2.0 / (9 * df)), 3);
  EXPECT_LT(chi2, crit) << "chi2 " << chi2 << " over " << df << " degrees of freedom";
  std::printf("[ summary ] chi2 %.1f, %d degrees of freedom, critical %.1f; %lld drafts accepted\n",
              chi2, df, crit, static_cast<long long>(accepted));
}

TEST(SpecEngine, DraftWithAnotherVocabularyIsRefused) {
  testing_util::TempDir dir;
  SyntheticModelSpec spec;
  spec.num_layers = 1;
  spec.hidden = 32;
  spec.num_heads = 2;
  spec.num_kv_heads = 1;
  spec.ffn = 64;
  spec.context_length = 512;
  spec.tokenizer = MakeSyntheticSpec(400);
  auto w = BuildSyntheticModel(spec);
  ASSERT_TRUE(w.ok());
  std::filesystem::create_directories(dir.path());
  const std::string path = dir.path() + "/other-vocab.gguf";
  const auto bytes = *w->WriteToBytes();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  EngineConfig c = SmallConfig();
  c.spec = Draft(path);
  auto core = EngineCore::Create(testing_util::TinyModel(64), c);
  ASSERT_FALSE(core.ok());
  EXPECT_NE(core.status().message().find("vocabulary"), std::string::npos) << core.status().message();
  c.spec = Draft(dir.path() + "/missing.gguf");
  auto missing = EngineCore::Create(testing_util::TinyModel(64), c);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing.gguf"), std::string::npos);
}

}  // namespace spec_engine_test
}  // namespace
}  // namespace kvserve
