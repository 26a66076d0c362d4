// Eviction inside a sequence through the engine (sched/kv_eviction.h): greedy output does not
// depend on batching, chunking, preemption or the prefix cache; a stream runs far past the
// model's context within its budget; requests that share blocks with an evicting sequence are
// unaffected; every block comes back.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/engine_core.h"
#include "engine_test_util.h"

namespace kvserve {
namespace {
// The test executables are unity builds: this file's helpers stay apart from its neighbours'.
namespace kv_eviction_engine_test {

using testing_util::Greedy;
using testing_util::MakeCore;
using testing_util::Reference;
using testing_util::SmallConfig;
using testing_util::TinyModel;

std::vector<TokenId> Prompt(int seed, int n) {
  std::vector<TokenId> p;
  for (int i = 0; i < n; ++i) p.push_back(3 + (seed * 37 + i * 53 + (i * i) % 11) % 290);
  return p;
}

KvEvictionConfig Policy(KvEvictionPolicy policy, int budget = 64, int batch = 16) {
  return KvEvictionConfig{.policy = policy, .budget_tokens = budget, .sink_tokens = 4,
                          .evict_batch_tokens = batch, .snapkv_window = std::min(batch, 16)};
}

EngineRequest Evicting(std::vector<TokenId> prompt, int max_tokens, KvEvictionConfig c,
                       int n = 1) {
  EngineRequest r = Greedy(std::move(prompt), max_tokens, n);
  r.kv_eviction = c;
  return r;
}

struct Outcome {
  std::map<std::pair<int64_t, int>, std::vector<TokenId>> tokens;
  std::map<std::pair<int64_t, int>, RequestOutput> finals;
  std::map<int64_t, std::vector<float>> prompt_logprobs;
  int max_in_use = 0;
};

// Steps until done; checks the invariants and the blocks in use after every step.
Outcome RunToEnd(EngineCore& core) {
  Outcome run;
  std::vector<RequestOutput> events;
  while (core.HasWork()) {
    EXPECT_TRUE(core.Step(&events).ok());
    core.CheckInvariants();
    run.max_in_use = std::max(run.max_in_use, core.stats().kv.num_in_use);
    for (RequestOutput& e : events) {
      auto& ids = run.tokens[{e.id.value(), e.index}];
      ids.insert(ids.end(), e.new_tokens.begin(), e.new_tokens.end());
      auto& lp = run.prompt_logprobs[e.id.value()];
      lp.insert(lp.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
      if (e.finished) run.finals[{e.id.value(), e.index}] = e;
    }
    events.clear();
  }
  EXPECT_EQ(core.stats().kv.num_in_use, 0);
  return run;
}

std::vector<TokenId> RunOne(EngineConfig config, const EngineRequest& r) {
  auto core = MakeCore(config);
  EXPECT_TRUE(core->Add(RequestId(1), r).ok());
  return RunToEnd(*core).tokens[{1, 0}];
}

constexpr KvEvictionPolicy kPolicies[] = {KvEvictionPolicy::kWindow, KvEvictionPolicy::kSinks,
                                          KvEvictionPolicy::kH2O, KvEvictionPolicy::kSnapKV};

TEST(KvEviction, GreedyOutputDoesNotDependOnChunkingBatchingOrThePrefixCache) {
  for (KvEvictionPolicy policy : kPolicies) {
    const EngineRequest r = Evicting(Prompt(1, 150), 200, Policy(policy));
    const std::vector<TokenId> alone = RunOne(SmallConfig(), r);
    ASSERT_EQ(alone.size(), 200u);
    EngineConfig small_steps = SmallConfig();
    small_steps.max_num_batched_tokens = 7;  // chunks that straddle every eviction point
    EXPECT_EQ(RunOne(small_steps, r), alone) << KvEvictionPolicyName(policy);
    EngineConfig no_cache = SmallConfig();
    no_cache.enable_prefix_caching = false;
    EXPECT_EQ(RunOne(no_cache, r), alone) << KvEvictionPolicyName(policy);
    // Batched with other requests, evicting and not, and with its own parallel sample.
    auto core = MakeCore(SmallConfig());
    ASSERT_TRUE(core->Add(RequestId(1), r).ok());
    ASSERT_TRUE(core->Add(RequestId(2), Greedy(Prompt(2, 40), 30)).ok());
    ASSERT_TRUE(core->Add(RequestId(3), Evicting(Prompt(1, 150), 200, Policy(policy), 2)).ok());
    const Outcome run = RunToEnd(*core);
    EXPECT_EQ(run.tokens.at({1, 0}), alone);
    EXPECT_EQ(run.tokens.at({3, 0}), alone);
    EXPECT_EQ(run.tokens.at({3, 1}), alone);
    Reference ref;
    EXPECT_EQ(run.tokens.at({2, 0}), ref.Greedy(Prompt(2, 40), 30));
    EXPECT_GT(run.finals.at({1, 0}).metrics.evicted_tokens, 0);
    const KvEvictionStats& st = core->stats().kv_eviction;
    EXPECT_GT(st.evicted_tokens[static_cast<int>(policy)], 0);
    EXPECT_GT(st.num_shifts, 0);
    const bool scored = policy == KvEvictionPolicy::kH2O || policy == KvEvictionPolicy::kSnapKV;
    EXPECT_EQ(st.num_compactions > 0, scored);
    EXPECT_EQ(st.compacted_slots > 0, scored);
  }
}

TEST(KvEviction, SpeculationDoesNotChangeTheOutput) {
  // n-gram drafts are verified for window and sinks; h2o and snapkv take none (a rejected
  // draft's query would have scored). Either way greedy output equals speculation off.
  EngineConfig spec = SmallConfig();
  spec.spec.method = SpecMethod::kNgram;
  spec.spec.adaptive = false;
  spec.spec.num_speculative_tokens = 3;
  spec.spec.prompt_lookup_min = 1;
  spec.spec.prompt_lookup_max = 3;
  for (KvEvictionPolicy policy : kPolicies) {
    const EngineRequest r = Evicting(Prompt(12, 90), 160, Policy(policy));
    auto core = MakeCore(spec);
    ASSERT_TRUE(core->Add(RequestId(1), r).ok());
    const Outcome run = RunToEnd(*core);
    EXPECT_EQ(run.tokens.at({1, 0}), RunOne(SmallConfig(), r)) << KvEvictionPolicyName(policy);
    const bool scored = policy == KvEvictionPolicy::kH2O || policy == KvEvictionPolicy::kSnapKV;
    EXPECT_EQ(core->stats().spec.num_draft_tokens == 0, scored) << KvEvictionPolicyName(policy);
  }
}

TEST(KvEviction, TheScoredPoliciesKeepOtherTokensThanTheWindow) {
  // Same budget and batch: once tokens go, each choice shows in the output.
  std::map<KvEvictionPolicy, std::vector<TokenId>> out;
  for (KvEvictionPolicy policy : kPolicies) {
    out[policy] = RunOne(SmallConfig(), Evicting(Prompt(11, 120), 120, Policy(policy, 64, 16)));
  }
  EXPECT_NE(out[KvEvictionPolicy::kH2O], out[KvEvictionPolicy::kSnapKV]);
  EXPECT_NE(out[KvEvictionPolicy::kH2O], out[KvEvictionPolicy::kWindow]);
  EXPECT_NE(out[KvEvictionPolicy::kSnapKV], out[KvEvictionPolicy::kWindow]);
}

TEST(KvEviction, EvictionChangesTheOutputOnlyOnceTheBudgetIsReached) {
  // Within the budget nothing is evicted: the output is plain decoding's.
  Reference ref;
  const EngineRequest within = Evicting(Prompt(3, 20), 40, Policy(KvEvictionPolicy::kSinks));
  EXPECT_EQ(RunOne(SmallConfig(), within), ref.Greedy(Prompt(3, 20), 40));
  // Sinks and window differ once blocks go (the first block is kept by one, not the other).
  const std::vector<TokenId> sinks =
      RunOne(SmallConfig(), Evicting(Prompt(3, 20), 200, Policy(KvEvictionPolicy::kSinks)));
  const std::vector<TokenId> window =
      RunOne(SmallConfig(), Evicting(Prompt(3, 20), 200, Policy(KvEvictionPolicy::kWindow)));
  EXPECT_NE(sinks, window);
  const std::vector<TokenId>& plain = ref.Greedy(Prompt(3, 20), 40);
  EXPECT_TRUE(std::equal(plain.begin(), plain.end(), sinks.begin()));  // 60 tokens: no eviction
}

TEST(KvEviction, AStreamFarPastTheContextStaysWithinItsBudget) {
  // 8k prompt tokens scored and 2k generated on a model with a context of 512 (sinks: 20
  // contexts, some 300 evictions); the scored policies, whose steps cost more, stream 4k + 1k.
  for (KvEvictionPolicy policy : kPolicies) {
    if (policy == KvEvictionPolicy::kWindow) continue;  // the same blocks as sinks, less one
    const bool long_run = policy == KvEvictionPolicy::kSinks;
    const int prompt = long_run ? 8000 : 4000, gen = long_run ? 2000 : 1000;
    auto core = MakeCore(SmallConfig());
    EngineRequest r = Evicting(Prompt(4, prompt), gen, Policy(policy, 128, 32));
    r.score_prompt = true;
    r.ignore_eos = true;
    ASSERT_TRUE(core->Add(RequestId(1), r).ok());
    const Outcome run = RunToEnd(*core);
    EXPECT_EQ(run.tokens.at({1, 0}).size(), static_cast<size_t>(gen));
    EXPECT_LE(run.max_in_use, 128 / 16);
    const std::vector<float>& lp = run.prompt_logprobs.at(1);
    ASSERT_EQ(lp.size(), static_cast<size_t>(prompt - 1));
    for (float v : lp) ASSERT_TRUE(std::isfinite(v) && v <= 0.f);
    // Everything past the budget went, 32 tokens at a time (the last token is never computed).
    const RequestOutput& f = run.finals.at({1, 0});
    const int64_t computed = prompt + gen - 1;
    EXPECT_EQ(f.metrics.evicted_tokens, (computed - 128 + 31) / 32 * 32)
        << KvEvictionPolicyName(policy);
    EXPECT_EQ(core->stats().kv.num_in_use, 0);
  }
}

TEST(KvEviction, RequestsSharingBlocksWithAnEvictingSequenceAreUnaffected) {
  Reference ref;
  const std::vector<TokenId> shared = Prompt(5, 64);
  std::vector<TokenId> longer = shared;
  for (TokenId t : Prompt(6, 30)) longer.push_back(t);
  auto core = MakeCore(SmallConfig());
  // A caches the shared prefix; B starts on it and evicts (copying what it moves); C and D
  // hit the prefix before and after B's evictions.
  ASSERT_TRUE(core->Add(RequestId(1), Greedy(shared, 5)).ok());
  RunToEnd(*core);
  ASSERT_TRUE(core->Add(RequestId(2), Evicting(longer, 150, Policy(KvEvictionPolicy::kSinks))).ok());
  ASSERT_TRUE(core->Add(RequestId(3), Greedy(longer, 40)).ok());
  Outcome run = RunToEnd(*core);
  EXPECT_EQ(run.tokens.at({3, 0}), ref.Greedy(longer, 40));
  EXPECT_GT(run.finals.at({2, 0}).metrics.cached_tokens, 0);
  EXPECT_GT(core->stats().kv_eviction.copied_blocks, 0);
  ASSERT_TRUE(core->Add(RequestId(4), Greedy(longer, 40)).ok());
  run = RunToEnd(*core);
  EXPECT_EQ(run.tokens.at({4, 0}), ref.Greedy(longer, 40));
  EXPECT_GT(run.finals.at({4, 0}).metrics.cached_tokens, 0);
  // h2o and snapkv take no cached prefix (their scores need every token's query), so their
  // output is the cache-off output; the others still hit the tree.
  for (KvEvictionPolicy policy : {KvEvictionPolicy::kH2O, KvEvictionPolicy::kSnapKV}) {
    EngineConfig no_cache = SmallConfig();
    no_cache.enable_prefix_caching = false;
    const EngineRequest evicting = Evicting(longer, 150, Policy(policy));
    ASSERT_TRUE(core->Add(RequestId(5), evicting).ok());
    ASSERT_TRUE(core->Add(RequestId(6), Greedy(longer, 40)).ok());
    run = RunToEnd(*core);
    EXPECT_EQ(run.finals.at({5, 0}).metrics.cached_tokens, 0);
    EXPECT_EQ(run.tokens.at({5, 0}), RunOne(no_cache, evicting));
    EXPECT_EQ(run.tokens.at({6, 0}), ref.Greedy(longer, 40));
    ASSERT_TRUE(core->Add(RequestId(7), Greedy(longer, 40)).ok());
    run = RunToEnd(*core);
    EXPECT_EQ(run.tokens.at({7, 0}), ref.Greedy(longer, 40));
    EXPECT_GT(run.finals.at({7, 0}).metrics.cached_tokens, 0);
  }
}

TEST(KvEviction, ACacheOfExactlyTheBudgetIsEnoughWithThePrefixCacheOn) {
  // The blocks an eviction moves were never committed, so it copies nothing.
  for (KvEvictionPolicy policy : kPolicies) {
    EngineConfig exact = SmallConfig();
    exact.num_blocks = 4;
    const EngineRequest r = Evicting(Prompt(10, 100), 120, Policy(policy));
    EXPECT_EQ(RunOne(exact, r), RunOne(SmallConfig(), r)) << KvEvictionPolicyName(policy);
  }
}

class KvEvictionPreemption : public ::testing::TestWithParam<KvEvictionPolicy> {};
INSTANTIATE_TEST_SUITE_P(Policies, KvEvictionPreemption, ::testing::ValuesIn(kPolicies),
                         [](const auto& p) { return std::string(KvEvictionPolicyName(p.param)); });

TEST_P(KvEvictionPreemption, APreemptedEvictingSequenceResumesWithTheSameOutput) {
  const EngineRequest r = Evicting(Prompt(7, 100), 150, Policy(GetParam()));
  const std::vector<TokenId> alone = RunOne(SmallConfig(), r);
  EngineConfig tight = SmallConfig();
  tight.num_blocks = 10;  // the evicting request's 4 blocks and a growing one's cannot both fit
  auto core = MakeCore(tight);
  ASSERT_TRUE(core->Add(RequestId(1), r).ok());
  EngineRequest big = Greedy(Prompt(8, 60), 90);
  big.priority = 5;
  ASSERT_TRUE(core->Add(RequestId(2), big).ok());
  const Outcome run = RunToEnd(*core);
  EXPECT_GT(core->stats().num_preemptions, 0);
  EXPECT_EQ(run.tokens.at({1, 0}), alone);
  Reference ref;
  EXPECT_EQ(run.tokens.at({2, 0}), ref.Greedy(Prompt(8, 60), 90));
}

TEST(KvEviction, PromptScoresEqualTheModelsLogitsWithoutEvictionAndDoNotDependOnChunks) {
  const std::vector<TokenId> prompt = Prompt(9, 120);
  auto gen = Generator::Create(TinyModel(64), GeneratorConfig{.num_threads = 1});
  ASSERT_TRUE(gen.ok());
  const auto logits = (*gen)->PromptLogits(prompt, 0);
  ASSERT_TRUE(logits.ok());
  const size_t vocab = (*gen)->model().config().vocab;
  EngineRequest r = Greedy(prompt, 1);
  r.score_prompt = true;
  auto core = MakeCore(SmallConfig());
  ASSERT_TRUE(core->Add(RequestId(1), r).ok());
  const std::vector<float> scores = RunToEnd(*core).prompt_logprobs.at(1);
  ASSERT_EQ(scores.size(), prompt.size() - 1);
  for (size_t i = 0; i + 1 < prompt.size(); ++i) {
    const float* row = logits->data() + i * vocab;
    double max = row[0], sum = 0;
    for (size_t v = 0; v < vocab; ++v) max = std::max<double>(max, row[v]);
    for (size_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max);
    EXPECT_NEAR(scores[i], row[prompt[i + 1]] - max - std::log(sum), 1e-4) << i;
  }
  // With eviction, the scores of the same stream in chunks of 48 and of 5 are identical.
  EngineRequest e = Evicting(Prompt(9, 400), 1, Policy(KvEvictionPolicy::kWindow));
  e.score_prompt = true;
  std::vector<std::vector<float>> by_chunk;
  for (int chunk : {48, 5}) {
    EngineConfig c = SmallConfig();
    c.max_num_batched_tokens = chunk;
    auto core2 = MakeCore(c);
    ASSERT_TRUE(core2->Add(RequestId(1), e).ok());
    by_chunk.push_back(RunToEnd(*core2).prompt_logprobs.at(1));
  }
  EXPECT_EQ(by_chunk[0], by_chunk[1]);
  EXPECT_EQ(by_chunk[0].size(), 399u);
}

TEST(KvEviction, RefusesWhatCannotWorkWithClearErrors) {
  auto core = MakeCore(SmallConfig());
  // Past the context without a policy.
  Status st = core->Add(RequestId(1), Greedy(Prompt(1, 100), 600));
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("kv_eviction"), std::string::npos) << st.message();
  // A budget the model cannot hold; no budget at all.
  st = core->Add(RequestId(2), Evicting(Prompt(1, 10), 10, Policy(KvEvictionPolicy::kSinks, 4096)));
  EXPECT_FALSE(st.ok());
  st = core->Add(RequestId(3), Evicting(Prompt(1, 10), 10, Policy(KvEvictionPolicy::kSinks, 0)));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("budget"), std::string::npos) << st.message();
  EXPECT_FALSE(core->HasWork());
  // A bad engine default is a start-up error.
  EngineConfig bad = SmallConfig();
  bad.kv_eviction = Policy(KvEvictionPolicy::kWindow, 8);
  EXPECT_FALSE(EngineCore::Create(TinyModel(64), bad).ok());
}

}  // namespace kv_eviction_engine_test
}  // namespace
}  // namespace kvserve
