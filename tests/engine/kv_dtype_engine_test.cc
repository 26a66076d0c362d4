// Quantized KV caches in the engine: quantization happens per token when K/V are written, so
// batched, chunked, prefix-cached greedy output still equals each request run alone with the
// same cache types; caches of different types never share a namespace; int4 refuses head dims
// its rotation cannot handle; stats report bytes per token and capacity.
#include <gtest/gtest.h>

#include <set>

#include "engine/engine_core.h"
#include "engine/generator.h"
#include "engine/synthetic_model.h"
#include "engine_test_util.h"
#include "util/byte_size.h"

namespace kvserve {
namespace {
// The test executables are unity builds: this file's helpers stay apart from its neighbours'.
namespace kv_dtype_engine_test {

using testing_util::Greedy;
using testing_util::MakeCore;
using testing_util::TinyModel;

std::vector<TokenId> Prompt(int seed, int n) {
  std::vector<TokenId> p;
  for (int i = 0; i < n; ++i) p.push_back(3 + (seed * 41 + i * 59) % 290);
  return p;
}

// The engine tests' small cache on 2 threads, with the given KV cache types.
EngineConfig Config(KvDtype k, KvDtype v) {
  EngineConfig c = testing_util::SmallConfig();
  c.num_threads = 2;
  c.k_dtype = k;
  c.v_dtype = v;
  return c;
}

class QuantizedEngine : public ::testing::TestWithParam<std::pair<KvDtype, KvDtype>> {};

TEST_P(QuantizedEngine, PrefixCachedBatchedGreedyOutputEqualsEachRequestRunAlone) {
  const auto [k, v] = GetParam();
  auto core = MakeCore(Config(k, v));
  // Requests share a 40-token prefix (two full blocks) and arrive in two waves, so the second
  // wave reads the first wave's quantized blocks from the prefix cache.
  const std::vector<TokenId> shared = Prompt(9, 40);
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 0; i < 6; ++i) {
    std::vector<TokenId> p = shared;
    const std::vector<TokenId> tail = Prompt(i, 3 + 7 * i);
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  std::map<int64_t, std::vector<TokenId>> got;
  std::map<int64_t, int> cached;
  std::vector<RequestOutput> events;
  for (int wave = 0; wave < 2; ++wave) {
    for (int i = wave * 3; i < wave * 3 + 3; ++i) {
      ASSERT_TRUE(core->Add(RequestId(i), Greedy(prompts[i], 8)).ok());
    }
    while (core->HasWork()) {
      ASSERT_TRUE(core->Step(&events).ok());
      core->CheckInvariants();
    }
    for (const RequestOutput& e : events) {
      auto& ids = got[e.id.value()];
      ids.insert(ids.end(), e.new_tokens.begin(), e.new_tokens.end());
      if (e.finished) cached[e.id.value()] = e.metrics.cached_tokens;
    }
    events.clear();
  }
  testing_util::Reference alone(k, v);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(got[i], alone.Greedy(prompts[i], 8))
        << KvDtypeName(k) << "/" << KvDtypeName(v) << " request " << i;
  }
  for (int i = 3; i < 6; ++i) EXPECT_GE(cached[i], 32) << "request " << i;
  const EngineStats st = core->stats();
  EXPECT_EQ(st.kv.num_in_use, 0);
  EXPECT_EQ(st.kv_k_dtype, k);
  EXPECT_EQ(st.kv_v_dtype, v);
  EXPECT_EQ(st.kv_capacity_tokens, 64 * 16);
  // TinyModel: 2 layers, 2 KV heads, head_dim 16.
  EXPECT_EQ(st.kv_bytes_per_token,
            2u * 2 * (KvBytesPerHeadVector(k, 16) + KvBytesPerHeadVector(v, 16)));
}

INSTANTIATE_TEST_SUITE_P(KvTypes, QuantizedEngine,
                         ::testing::Values(std::pair{KvDtype::kInt8, KvDtype::kInt8},
                                           std::pair{KvDtype::kInt4, KvDtype::kInt4},
                                           std::pair{KvDtype::kFp8E4M3, KvDtype::kFp8E5M2},
                                           std::pair{KvDtype::kBF16, KvDtype::kInt4}),
                         [](const auto& p) {
                           return std::string(KvDtypeName(p.param.first)) + "_" +
                                  std::string(KvDtypeName(p.param.second));
                         });

TEST(EngineCore, PrefixCacheNamespaceIncludesTheKeyAndValueTypes) {
  std::set<uint64_t> seen;
  for (auto [k, v] :
       {std::pair{KvDtype::kF16, KvDtype::kF16}, std::pair{KvDtype::kInt8, KvDtype::kF16},
        std::pair{KvDtype::kF16, KvDtype::kInt8}, std::pair{KvDtype::kInt8, KvDtype::kInt8},
        std::pair{KvDtype::kInt4, KvDtype::kInt4}, std::pair{KvDtype::kFp8E4M3, KvDtype::kFp8E4M3},
        std::pair{KvDtype::kFp8E5M2, KvDtype::kFp8E4M3}}) {
    auto core = MakeCore(Config(k, v));
    EXPECT_TRUE(seen.insert(core->NamespaceFor("").value).second)
        << KvDtypeName(k) << "/" << KvDtypeName(v) << " shares a namespace";
    // The same types give the same namespace (a restart keeps its cache keys).
    EXPECT_EQ(MakeCore(Config(k, v))->NamespaceFor("").value, core->NamespaceFor("").value);
  }
}

TEST(EngineCore, Int4RefusesAHeadDimThatIsNotAPowerOfTwo) {
  SyntheticModelSpec spec;
  spec.num_layers = 1;
  spec.hidden = 96;
  spec.num_heads = 4;  // head_dim 24
  spec.num_kv_heads = 2;
  spec.ffn = 64;
  spec.context_length = 64;
  spec.tokenizer = MakeSyntheticSpec(100);
  auto writer = BuildSyntheticModel(spec);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  const std::vector<uint8_t> bytes = *writer->WriteToBytes();
  auto load = [&] {
    auto file = GgufFile::FromBytes(bytes);
    EXPECT_TRUE(file.ok());
    auto model = Model::Load(std::move(file).value(), ModelOptions{64, 0});
    EXPECT_TRUE(model.ok());
    return std::move(model).value();
  };
  auto core = EngineCore::Create(load(), Config(KvDtype::kF16, KvDtype::kInt4));
  ASSERT_FALSE(core.ok());
  EXPECT_NE(core.status().message().find("power of two"), std::string::npos)
      << core.status().message();
  auto gen = Generator::Create(load(), GeneratorConfig{.k_dtype = KvDtype::kInt4});
  ASSERT_FALSE(gen.ok());
  EXPECT_NE(gen.status().message().find("head_dim is 24"), std::string::npos)
      << gen.status().message();
  EXPECT_TRUE(EngineCore::Create(load(), Config(KvDtype::kInt8, KvDtype::kFp8E4M3)).ok());
}

TEST(KvCapacity, SummaryStatesTypesBytesPerTokenAndTokens) {
  KvLayout l{.num_layers = 6,
             .num_kv_heads = 2,
             .head_dim = 64,
             .block_size = 16,
             .k_dtype = KvDtype::kInt8,
             .v_dtype = KvDtype::kInt4};
  EXPECT_EQ(l.bytes_per_token(), 6u * 2 * (66 + 36));
  EXPECT_EQ(KvCapacitySummary(l, 1024),
            "KV cache int8/int4: 1224 bytes/token, 16384 tokens in 19.1 MiB");
  EXPECT_EQ(FormatByteSize(512), "512 B");
  EXPECT_EQ(FormatByteSize(2ull << 30), "2.0 GiB");
  EXPECT_EQ(FormatByteSize(1536), "1.5 KiB");
}

}  // namespace kv_dtype_engine_test
}  // namespace
}  // namespace kvserve
