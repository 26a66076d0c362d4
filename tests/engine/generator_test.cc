// Generator as a specification: the embedded default model's greedy output is pinned, every
// request gives back every KV block, and errors are ordinary results.
#include "engine/generator.h"

#include <gtest/gtest.h>

#include "engine/synthetic_model.h"

namespace kvserve {
namespace {
// The test executables are unity builds: this file's helpers stay apart from its neighbours'.
namespace generator_test {

std::unique_ptr<Generator> MakeGenerator(GeneratorConfig config, SyntheticModelSpec spec = SmallSyntheticModelSpec()) {
  auto writer = BuildSyntheticModel(spec);
  EXPECT_TRUE(writer.ok()) << writer.status().ToString();
  auto file = GgufFile::FromBytes(*writer->WriteToBytes());
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  auto model = Model::Load(std::move(file).value(), ModelOptions{32, 0});
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  auto gen = Generator::Create(std::move(model).value(), config);
  EXPECT_TRUE(gen.ok()) << gen.status().ToString();
  return std::move(gen).value();
}

GenerateRequest Greedy(std::vector<TokenId> prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0.f;
  r.max_tokens = max_tokens;
  return r;
}

std::vector<TokenId> PromptOf(int n) {
  std::vector<TokenId> p;
  for (int i = 0; i < n; ++i) p.push_back(1 + (i * 53) % 1000);
  return p;
}

TEST(Generator, GreedyDecodeAgreesWithPrefillLogits) {
  // Decoding token by token must pick what the prefill of the whole sequence says is the argmax.
  auto gen = MakeGenerator(GeneratorConfig{.num_threads = 2, .k_dtype = KvDtype::kF32,
                                           .v_dtype = KvDtype::kF32});
  const std::vector<TokenId> prompt = PromptOf(40);  // longer than one 32-token batch
  auto result = gen->Generate(Greedy(prompt, 12), nullptr);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(result->ids.size(), 12u);
  std::vector<TokenId> all = prompt;
  all.insert(all.end(), result->ids.begin(), result->ids.end() - 1);
  auto logits = gen->PromptLogits(all, 0);
  ASSERT_TRUE(logits.ok());
  const int vocab = gen->model().config().vocab;
  for (size_t i = 0; i < result->ids.size(); ++i) {
    const float* row = logits->data() + (prompt.size() - 1 + i) * vocab;
    EXPECT_EQ(std::max_element(row, row + vocab) - row, result->ids[i]) << "token " << i;
  }
  EXPECT_EQ(gen->block_pool().num_free(), gen->block_pool().num_blocks());
  gen->block_pool().CheckInvariants();
}

TEST(Generator, EveryBlockComesBackAfterSuccessAndAfterErrors) {
  auto gen = MakeGenerator(GeneratorConfig{.num_threads = 1, .block_size = 4, .num_blocks = 6});
  const int total = gen->block_pool().num_blocks();
  ASSERT_EQ(total, 6);
  // Fits: 10 prompt + 8 generated = 18 slots = 5 blocks.
  ASSERT_TRUE(gen->Generate(Greedy(PromptOf(10), 8), nullptr).ok());
  EXPECT_EQ(gen->block_pool().num_free(), total);
  // Runs out of blocks midway: an ordinary ResourceExhausted, nothing leaked.
  auto full = gen->Generate(Greedy(PromptOf(20), 10), nullptr);
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(gen->block_pool().num_free(), total);
  // A cancelled request also gives everything back.
  auto cancelled = gen->Generate(Greedy(PromptOf(5), 8),
                                 [](TokenId, const SampleOutput&) { return false; });
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(gen->block_pool().num_free(), total);
  gen->block_pool().CheckInvariants();
}

TEST(Generator, RejectsBadPromptsClearly) {
  auto gen = MakeGenerator(GeneratorConfig{.num_threads = 1, .max_model_len = 64});
  EXPECT_EQ(gen->Generate(Greedy({}, 4), nullptr).status().code(), StatusCode::kInvalidArgument);
  auto too_long = gen->Generate(Greedy(PromptOf(60), 10), nullptr);
  EXPECT_EQ(too_long.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(too_long.status().message().find("64"), std::string::npos);
  auto bad_id = gen->Generate(Greedy({1, 99999}, 4), nullptr);
  EXPECT_EQ(bad_id.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(gen->block_pool().num_free(), gen->block_pool().num_blocks());
}

TEST(Generator, StopsAtAStopToken) {
  auto gen = MakeGenerator(GeneratorConfig{.num_threads = 1});
  auto free_run = gen->Generate(Greedy(PromptOf(8), 6), nullptr);
  ASSERT_TRUE(free_run.ok());
  GenerateRequest req = Greedy(PromptOf(8), 6);
  req.stop_ids = {free_run->ids[2]};
  auto stopped = gen->Generate(req, nullptr);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->finish_reason, FinishReason::kStop);
  EXPECT_LE(stopped->ids.size(), 3u);
  EXPECT_EQ(stopped->ids.back(), free_run->ids[2]);
}

}  // namespace generator_test
}  // namespace
}  // namespace kvserve
