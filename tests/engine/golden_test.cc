// Golden end-to-end test: the small synthetic model's exact greedy text for a fixed prompt.
// Any change to the tokenizer, the synthetic weights, the kernels or the KV path that moves a
// single token shows up here. Regenerate only for an intended change, with
//   kvserve make-model --out M.gguf --layers 4 --hidden 256 --heads 8 --kv-heads 2 --ffn 768
//     --vocab 1024 --context 4096 --type F32 --seed 20261122
//   kvserve run --model M.gguf --prompt "Once upon a time" -n 24 --temp 0 --json
#include <gtest/gtest.h>

#include "engine/generator.h"
#include "engine/synthetic_model.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {
// The test executables are unity builds: this file's helpers stay apart from its neighbours'.
namespace golden_test {

TEST(Golden, DefaultModelGreedyTextIsPinned) {
  auto writer = BuildSyntheticModel(SmallSyntheticModelSpec());
  ASSERT_TRUE(writer.ok());
  auto file = GgufFile::FromBytes(*writer->WriteToBytes());
  ASSERT_TRUE(file.ok());
  auto tok = Tokenizer::FromGguf(*file);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::vector<TokenId> prompt = tok->Encode("Once upon a time", true, false);
  EXPECT_EQ(prompt, (std::vector<TokenId>{1, 259, 300, 273, 262, 264, 557, 357, 480}));

  for (int threads : {1, 2}) {
    auto model = Model::Load(GgufFile::FromBytes(*writer->WriteToBytes()).value(), ModelOptions{});
    ASSERT_TRUE(model.ok());
    auto gen = Generator::Create(std::move(model).value(), GeneratorConfig{.num_threads = threads});
    ASSERT_TRUE(gen.ok());
    GenerateRequest req;
    req.prompt = prompt;
    req.sampling.temperature = 0.f;
    req.max_tokens = 24;
    auto result = (*gen)->Generate(req, nullptr);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_EQ(result->ids, (std::vector<TokenId>{349, 522, 398, 492, 360, 389, 377, 422, 553, 457,
                                                 482, 370, 484, 556, 360, 389, 311, 463, 290, 545,
                                                 559, 450, 360, 264}))
        << "threads=" << threads;
    EXPECT_EQ(tok->Decode(result->ids),
              "to bee not write i or as u cache then lo for look upo i orZ someE mad sto abou ie");
  }
}

}  // namespace golden_test
}  // namespace
}  // namespace kvserve
