// MLA's latent KV cache and mixture-of-experts models in the engine: the prefix cache, copy-on-write,
// preemption, KV dtypes and the disk tier work on latent blocks exactly as on GQA blocks. Greedy
// output of batched, chunked, cached and preempted requests equals each request run alone on a
// Generator (no batching, no cache), and every block comes back.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "engine/engine_core.h"
#include "engine/generator.h"
#include "engine_test_util.h"

namespace kvserve {
namespace {
// The test executables are unity builds: this file's helpers stay apart from its neighbours'.
namespace latent_engine_test {

using testing_util::Greedy;

// deepseek2 (low-rank query, split attn_k_b / attn_v_b, sigmoid router with a selection bias,
// shared expert, a leading dense layer) or qwen3moe, small enough for a unit test.
const std::vector<uint8_t>& ModelBytes(const std::string& arch) {
  static std::map<std::string, std::vector<uint8_t>> memo;
  auto it = memo.find(arch);
  if (it != memo.end()) return it->second;
  SyntheticModelSpec s;
  s.arch = arch;
  s.num_layers = 3;
  s.hidden = 64;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.ffn = 96;
  s.context_length = 512;
  s.seed = 7;
  s.tokenizer = MakeSyntheticSpec(300);
  s.moe = {.num_experts = 8, .num_used = 2, .expert_ffn = 32};
  if (arch == "deepseek2") {
    s.moe.num_shared = 1;
    s.moe.leading_dense = 1;
    s.moe.gating = 2;
    s.moe.weights_norm = true;
    s.moe.selection_bias = true;
    s.mla = {.q_lora_rank = 24, .kv_lora_rank = 32, .qk_nope = 16, .qk_rope = 16, .v_head = 16};
  }
  auto writer = BuildSyntheticModel(s);
  EXPECT_TRUE(writer.ok()) << writer.status().ToString();
  return memo.emplace(arch, *writer->WriteToBytes()).first->second;
}

std::unique_ptr<Model> LoadModel(const std::string& arch, MlaForm form = MlaForm::kAbsorbed) {
  auto file = GgufFile::FromBytes(ModelBytes(arch));
  EXPECT_TRUE(file.ok());
  auto model = Model::Load(std::move(file).value(), ModelOptions{64, 0, form});
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return std::move(model).value();
}

struct Case {
  const char* arch;
  KvDtype dtype;
};

class LatentEngine : public ::testing::TestWithParam<Case> {};

TEST_P(LatentEngine, CachedBatchedPreemptedGreedyEqualsEachRequestAlone) {
  const Case c = GetParam();
  EngineConfig config = testing_util::SmallConfig();
  config.k_dtype = config.v_dtype = c.dtype;
  config.num_blocks = 10;  // 160 slots for six requests of 30..50 tokens + 12: preemption
  config.max_num_batched_tokens = 40;
  auto core = EngineCore::Create(LoadModel(c.arch), config);
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  const auto prompts = testing_util::PairedPrompts(41, 17);
  std::map<int64_t, std::vector<TokenId>> got = testing_util::RunTwoRounds(**core, prompts, 12);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<TokenId> want =
        testing_util::GreedyAlone(LoadModel(c.arch), c.dtype, prompts[i], 12);
    EXPECT_EQ(want.size(), 12u);  // no request ends early
    EXPECT_EQ(got[static_cast<int64_t>(i)], want) << "prompt " << i;
    EXPECT_EQ(got[10 + static_cast<int64_t>(i)], want) << "prompt " << i << ", second round";
  }
  const EngineStats st = (*core)->stats();
  EXPECT_GT(st.kv.hit_tokens, 0);
  EXPECT_GT(st.num_preemptions, 0);
  EXPECT_EQ(st.kv.num_in_use, 0);
  EXPECT_EQ(st.kv.num_free + st.kv.num_cached, st.kv.num_blocks);
  EXPECT_EQ(st.kv_latent, std::string(c.arch) == "deepseek2");
}

INSTANTIATE_TEST_SUITE_P(
    Models, LatentEngine,
    ::testing::Values(Case{"deepseek2", KvDtype::kF16}, Case{"deepseek2", KvDtype::kBF16},
                      Case{"deepseek2", KvDtype::kInt8}, Case{"deepseek2", KvDtype::kFp8E4M3},
                      Case{"qwen3moe", KvDtype::kF16}),
    [](const auto& param_info) {
      return std::string(param_info.param.arch) + "_" +
             std::string(KvDtypeName(param_info.param.dtype));
    });

// Eviction inside a sequence on latent blocks: the window and sinks policies re-rotate only the
// rope part of each moved vector, h2o and snapkv compact the single latent head by the scores
// of all query heads. Output does not depend on chunking or batching, and stays in budget.
TEST(LatentEngineEviction, EveryPolicyRunsOnLatentBlocks) {
  std::vector<TokenId> prompt;
  for (int i = 0; i < 150; ++i) prompt.push_back(3 + (i * 53 + (i * i) % 11) % 290);
  for (KvEvictionPolicy policy : {KvEvictionPolicy::kWindow, KvEvictionPolicy::kSinks,
                                  KvEvictionPolicy::kH2O, KvEvictionPolicy::kSnapKV}) {
    EngineRequest r = Greedy(prompt, 100);
    r.ignore_eos = true;
    r.kv_eviction = KvEvictionConfig{.policy = policy, .budget_tokens = 64, .sink_tokens = 4,
                                     .evict_batch_tokens = 16, .snapkv_window = 16};
    std::vector<std::vector<TokenId>> outs;
    for (int chunk : {48, 7}) {
      EngineConfig config = testing_util::SmallConfig();
      config.max_num_batched_tokens = chunk;
      auto core = EngineCore::Create(LoadModel("deepseek2"), config);
      ASSERT_TRUE(core.ok()) << core.status().ToString();
      ASSERT_TRUE((*core)->Add(RequestId(1), r).ok());
      if (chunk == 7) {
        ASSERT_TRUE((*core)->Add(RequestId(2), Greedy(prompt, 20)).ok());
      }
      std::map<int64_t, std::vector<TokenId>> got;
      std::vector<RequestOutput> events;
      int max_in_use = 0;
      while ((*core)->HasWork()) {
        ASSERT_TRUE((*core)->Step(&events).ok());
        (*core)->CheckInvariants();
        max_in_use = std::max(max_in_use, (*core)->stats().kv.num_in_use);
      }
      for (const RequestOutput& e : events) {
        got[e.id.value()].insert(got[e.id.value()].end(), e.new_tokens.begin(),
                                 e.new_tokens.end());
      }
      outs.push_back(got[1]);
      EXPECT_EQ(got[1].size(), 100u);
      const KvEvictionStats& st = (*core)->stats().kv_eviction;
      EXPECT_GT(st.evicted_tokens[static_cast<int>(policy)], 0) << KvEvictionPolicyName(policy);
      EXPECT_EQ((*core)->stats().kv.num_in_use, 0);
      if (chunk == 48) {
        EXPECT_LE(max_in_use, 64 / 16);  // the budget, in blocks
      }
    }
    EXPECT_EQ(outs[0], outs[1]) << KvEvictionPolicyName(policy);
  }
  // The decompressed form has no scores over the cache: h2o is refused by name.
  auto core = EngineCore::Create(LoadModel("deepseek2", MlaForm::kDecompressed),
                                 testing_util::SmallConfig());
  ASSERT_TRUE(core.ok());
  EngineRequest r = Greedy(prompt, 10);
  r.kv_eviction = KvEvictionConfig{.policy = KvEvictionPolicy::kH2O, .budget_tokens = 64,
                                   .evict_batch_tokens = 16};
  const Status st = (*core)->Add(RequestId(1), r);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("--mla-attention absorbed"), std::string::npos) << st.ToString();
}

// Latent blocks go to disk and come back after a restart with the same output.
TEST(LatentEngineTier, RestartServesLatentBlocksFromDisk) {
  testing_util::TempDir dir;
  EngineConfig config = testing_util::SmallConfig();
  config.tiers.disk_path = dir.path();
  const auto prompts = testing_util::PairedPrompts(41, 17);
  std::vector<testing_util::Done> first;
  {
    auto core = EngineCore::Create(LoadModel("deepseek2"), config);
    ASSERT_TRUE(core.ok()) << core.status().ToString();
    first = testing_util::RunAll(**core, prompts, 6);
  }
  auto core = EngineCore::Create(LoadModel("deepseek2"), config);
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  const auto again = testing_util::RunAll(**core, prompts, 6);
  int from_disk = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(again[i].tokens, first[i].tokens) << "prompt " << i;
    EXPECT_EQ(first[i].tokens,
              testing_util::GreedyAlone(LoadModel("deepseek2"), KvDtype::kF16, prompts[i], 6))
        << "prompt " << i;
    for (const auto& t : again[i].metrics.cached_tokens_by_tier) {
      if (t.tier == "disk") from_disk += t.tokens;
    }
  }
  EXPECT_GT(from_disk, 0);
}

}  // namespace latent_engine_test
}  // namespace
}  // namespace kvserve
