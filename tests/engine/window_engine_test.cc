// Models with sliding-window layers in the engine (gemma2, gemma3, Mistral-style llama, phi3,
// gpt-oss): the
// prefix cache, chunked prefill, batching and preemption give the same greedy output as each
// request run alone on a Generator (no batching, no cache); every block comes back; eviction
// inside a sequence is refused by name.
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
namespace window_engine_test {

using testing_util::Greedy;

// Windows of 6 slots, so prompts of 30..50 tokens and their continuations run far past them.
const std::vector<uint8_t>& ModelBytes(const std::string& name) {
  static std::map<std::string, std::vector<uint8_t>> memo;
  auto it = memo.find(name);
  if (it != memo.end()) return it->second;
  SyntheticModelSpec s;
  s.arch = name == "mistral" ? "llama" : name;
  s.num_layers = name == "gemma3" ? 6 : 3;
  s.hidden = 64;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.ffn = 96;
  s.context_length = 512;
  s.seed = 11;
  s.tokenizer = MakeSyntheticSpec(300);
  s.sliding_window = 6;
  if (name == "gemma2") {
    s.attn_softcap = 5.f;
    s.final_softcap = 8.f;
  } else if (name == "phi3") {
    s.rope_original_context = 64;  // the long LongRoPE factors at the engine's context of 512
  } else if (name == "gpt-oss") {  // sinks, biases, a biased router over 4 experts, YaRN
    s.moe = {.num_experts = 4, .num_used = 2, .expert_ffn = 32};
    s.yarn_factor = 4.f;
    s.yarn_original_context = 64;
  }
  auto writer = BuildSyntheticModel(s);
  EXPECT_TRUE(writer.ok()) << writer.status().ToString();
  return memo.emplace(name, *writer->WriteToBytes()).first->second;
}

std::unique_ptr<Model> LoadModel(const std::string& name) {
  auto file = GgufFile::FromBytes(ModelBytes(name));
  EXPECT_TRUE(file.ok());
  auto model = Model::Load(std::move(file).value(), ModelOptions{64, 0});
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return std::move(model).value();
}

struct Case {
  const char* name;
  KvDtype dtype;
};

class WindowEngine : public ::testing::TestWithParam<Case> {};

TEST_P(WindowEngine, CachedBatchedPreemptedGreedyEqualsEachRequestAlone) {
  const Case c = GetParam();
  EngineConfig config = testing_util::SmallConfig();
  config.k_dtype = config.v_dtype = c.dtype;
  config.num_blocks = 10;  // 160 slots for six requests of 30..50 tokens + 12: preemption
  config.max_num_batched_tokens = 40;
  auto core = EngineCore::Create(LoadModel(c.name), config);
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  const auto prompts = testing_util::PairedPrompts(37, 13);
  std::map<int64_t, std::vector<TokenId>> got = testing_util::RunTwoRounds(**core, prompts, 12);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<TokenId> want =
        testing_util::GreedyAlone(LoadModel(c.name), c.dtype, prompts[i], 12);
    EXPECT_EQ(want.size(), 12u);
    EXPECT_EQ(got[static_cast<int64_t>(i)], want) << "prompt " << i;
    EXPECT_EQ(got[10 + static_cast<int64_t>(i)], want) << "prompt " << i << ", second round";
  }
  const EngineStats st = (*core)->stats();
  EXPECT_GT(st.kv.hit_tokens, 0);
  EXPECT_GT(st.num_preemptions, 0);
  EXPECT_EQ(st.kv.num_in_use, 0);
  EXPECT_EQ(st.kv.num_free + st.kv.num_cached, st.kv.num_blocks);
}

INSTANTIATE_TEST_SUITE_P(
    Models, WindowEngine,
    ::testing::Values(Case{"gemma2", KvDtype::kF16}, Case{"gemma3", KvDtype::kF16},
                      Case{"gemma3", KvDtype::kInt8}, Case{"mistral", KvDtype::kF16},
                      Case{"phi3", KvDtype::kF16}, Case{"gpt-oss", KvDtype::kF16}),
    [](const auto& param_info) {
      std::string name = param_info.param.name;
      std::replace(name.begin(), name.end(), '-', '_');
      return name + "_" + std::string(KvDtypeName(param_info.param.dtype));
    });

// The window group (kv_storage.h): the window layers' K/V in a pool of their own, too small
// for the requests' whole contexts and shared with the prefix cache's windows. Blocks of 4
// tokens, so that the windows' blocks are released as the requests run past them.
TEST_P(WindowEngine, WithTheWindowGroupGreedyEqualsEachRequestAlone) {
  const Case c = GetParam();
  EngineConfig config = testing_util::SmallConfig();
  config.k_dtype = config.v_dtype = c.dtype;
  config.block_size = 4;
  config.num_blocks = 30;  // 120 slots for six requests of 30..50 tokens + 12: preemption
  config.num_window_blocks = 26;
  config.max_num_seqs = 3;
  config.max_num_batched_tokens = 40;
  auto core = EngineCore::Create(LoadModel(c.name), config);
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  ASSERT_EQ((*core)->stats().kv.num_window_blocks, 26);
  const auto prompts = testing_util::PairedPrompts(37, 13);
  std::map<int64_t, std::vector<TokenId>> got = testing_util::RunTwoRounds(**core, prompts, 12);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<TokenId> want =
        testing_util::GreedyAlone(LoadModel(c.name), c.dtype, prompts[i], 12);
    EXPECT_EQ(got[static_cast<int64_t>(i)], want) << "prompt " << i;
    EXPECT_EQ(got[10 + static_cast<int64_t>(i)], want) << "prompt " << i << ", second round";
  }
  const EngineStats st = (*core)->stats();
  EXPECT_GT(st.kv.hit_tokens, 0);
  EXPECT_GT(st.num_preemptions, 0);
  EXPECT_GT(st.kv.window_evicted, 0);
  EXPECT_EQ(st.kv.num_in_use, 0);
  EXPECT_EQ(st.kv.window_in_use, 0);
  const std::unique_ptr<Model> model = LoadModel(c.name);
  const ModelConfig& mc = model->config();
  int windowed = 0;
  for (int l = 0; l < mc.num_layers; ++l) windowed += mc.LayerWindow(l) > 0;
  EXPECT_GT(windowed, 0);
  EXPECT_EQ(st.kv_window_layers, windowed);
}

// What the group saves: the same tokens in less memory, or more tokens in the same memory.
TEST(WindowEnginePlan, TheGroupHoldsOnlyTheRunningWindows) {
  EngineConfig config = testing_util::SmallConfig();
  config.num_blocks = 0;
  config.max_num_seqs = 2;
  config.kv_cache_memory_bytes = 4u << 20;
  auto model = LoadModel("gemma3");
  const KvLayout layout = model->MakeKvLayout(config.block_size, config.k_dtype, config.v_dtype);
  auto full = PlanKvBlocks(
      [&] {
        EngineConfig c = config;
        c.kv_windows = false;
        return c;
      }(),
      model->config(), layout);
  auto plan = PlanKvBlocks(config, model->config(), layout);
  ASSERT_TRUE(full.ok() && plan.ok());
  EXPECT_EQ(full->num_window_blocks, 0);
  EXPECT_EQ(plan->layout.num_window_layers(), 5);
  EXPECT_EQ(plan->layout.bytes_per_token() * 6, full->layout.bytes_per_token());
  // Within the budget, and about six times the tokens: one layer in six pays for them.
  EXPECT_LE(plan->num_blocks * plan->layout.bytes_per_block() +
                plan->num_window_blocks * plan->layout.window_bytes_per_block(),
            config.kv_cache_memory_bytes);
  EXPECT_GT(plan->num_blocks, 5 * full->num_blocks);
  // A budget the group's blocks alone would fill: no group.
  config.kv_cache_memory_bytes = 64u << 10;
  plan = PlanKvBlocks(config, model->config(), layout);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->num_window_blocks, 0);
}

// Eviction moves slots under the windows, which count slots back from each query: refused.
TEST(WindowEngineEviction, IsRefusedByName) {
  auto core = EngineCore::Create(LoadModel("gemma3"), testing_util::SmallConfig());
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  std::vector<TokenId> prompt(40, 7);
  EngineRequest r = Greedy(prompt, 10);
  r.kv_eviction = KvEvictionConfig{
      .policy = KvEvictionPolicy::kWindow, .budget_tokens = 32, .evict_batch_tokens = 16};
  const Status st = (*core)->Add(RequestId(1), r);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("sliding-window"), std::string::npos) << st.ToString();
  EXPECT_EQ((*core)->stats().kv.num_in_use, 0);
}

}  // namespace window_engine_test
}  // namespace
}  // namespace kvserve
