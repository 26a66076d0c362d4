// Structured output through the engine: constrained samples always match their constraint,
// whatever the seed, with n > 1 and beside unconstrained requests, whose output the masks never
// change; every block comes back.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "engine/engine_core.h"
#include "engine_test_util.h"
#include "structured/constraint.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

using structured::ConstraintKind;
using structured::ConstraintSpec;
using testing_util::SmallConfig;
using testing_util::TinyModel;
using testing_util::TinyModelBytes;

const Tokenizer& Tok() {
  static auto tok = [] {
    auto file = GgufFile::FromBytes(TinyModelBytes());
    EXPECT_TRUE(file.ok());
    return Tokenizer::FromGguf(*file);
  }();
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return *tok;
}

std::shared_ptr<structured::TokenMasker> Compile(const ConstraintSpec& spec) {
  static structured::ConstraintCompiler compiler(structured::TokenVocab::FromTokenizer(Tok()),
                                                 structured::ConstraintCompilerOptions{});
  auto m = compiler.Compile(spec);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return *m;
}

std::vector<TokenId> Prompt(int seed) {
  std::vector<TokenId> p;
  for (int i = 0; i < 7; ++i) p.push_back(3 + (seed * 37 + i * 53) % 290);
  return p;
}

struct Sample {
  std::string text;
  FinishReason reason = FinishReason::kLength;
};

// Runs the requests together on one core; returns each request's samples, in index order.
std::vector<std::vector<Sample>> RunAll(const std::vector<EngineRequest>& reqs) {
  auto core = EngineCore::Create(TinyModel(64), SmallConfig(), &Tok());
  EXPECT_TRUE(core.ok());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_TRUE((*core)->Add(RequestId(static_cast<int64_t>(i)), reqs[i]).ok());
  }
  std::vector<std::vector<Sample>> out(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) out[i].resize(static_cast<size_t>(reqs[i].n));
  std::vector<RequestOutput> events;
  while ((*core)->HasWork()) {
    EXPECT_TRUE((*core)->Step(&events).ok());
    for (const RequestOutput& e : events) {
      Sample& s = out[static_cast<size_t>(e.id.value())][static_cast<size_t>(e.index)];
      s.text += e.text;
      if (e.finished) s.reason = e.finish_reason;
    }
    events.clear();
  }
  const EngineStats st = (*core)->stats();
  EXPECT_EQ(st.kv.num_free + st.kv.num_cached, st.kv.num_blocks);  // every block is back
  return out;
}

EngineRequest Request(int seed, int max_tokens, std::shared_ptr<structured::TokenMasker> c) {
  EngineRequest r;
  r.prompt = Prompt(seed);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = static_cast<uint64_t>(seed);
  r.sampling.has_seed = true;
  r.constraint = std::move(c);
  return r;
}

TEST(StructuredEngine, ChoiceAlwaysEndsOnOneOfTheChoices) {
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kChoice;
  spec.choices = {"yes", "no", "maybe later"};
  auto c = Compile(spec);
  std::vector<EngineRequest> reqs;
  for (int seed = 0; seed < 12; ++seed) reqs.push_back(Request(seed, 16, c));
  reqs[3].n = 3;
  for (const auto& samples : RunAll(reqs)) {
    for (const Sample& s : samples) {
      EXPECT_EQ(s.reason, FinishReason::kStop);
      EXPECT_TRUE(s.text == "yes" || s.text == "no" || s.text == "maybe later") << s.text;
    }
  }
}

TEST(StructuredEngine, RegexOutputsMatchTheRegex) {
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kRegex;
  spec.text = R"([a-c]{2,5}-[0-9]{3}(x|yz)?)";
  auto c = Compile(spec);
  std::vector<EngineRequest> reqs;
  for (int seed = 0; seed < 10; ++seed) reqs.push_back(Request(100 + seed, 24, c));
  const std::regex re(spec.text);
  auto grammar = structured::BuildGrammar(spec);
  ASSERT_TRUE(grammar.ok());
  int finished = 0;
  for (const auto& samples : RunAll(reqs)) {
    const Sample& s = samples[0];
    if (s.reason == FinishReason::kStop) {
      ++finished;
      EXPECT_TRUE(std::regex_match(s.text, re)) << s.text;
    } else {  // cut by max_tokens: still a prefix of a match
      EXPECT_EQ(s.reason, FinishReason::kLength);
      EXPECT_TRUE(structured::PrefixMatch(*grammar, s.text)) << s.text;
    }
  }
  EXPECT_GT(finished, 0);
}

TEST(StructuredEngine, MasksDoNotChangeUnconstrainedRequestsInTheSameBatch) {
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kChoice;
  spec.choices = {"alpha", "beta"};
  EngineRequest plain = Request(7, 12, nullptr);
  plain.sampling.temperature = 0.f;
  plain.ignore_eos = true;
  const std::string alone = RunAll({plain})[0][0].text;
  std::vector<EngineRequest> mixed = {Request(1, 12, Compile(spec)), plain,
                                      Request(2, 12, Compile(spec))};
  EXPECT_EQ(RunAll(mixed)[1][0].text, alone);
}

TEST(StructuredEngine, ProcessorRefusesWhatTheGrammarRefuses) {
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kChoice;
  spec.choices = {"ab"};
  auto c = Compile(spec);
  structured::ConstraintProcessor p(c);
  TokenHistory h(Tok().vocab_size());
  std::vector<float> logits(static_cast<size_t>(Tok().vocab_size()), 0.f);
  p.Process(logits, h);
  int allowed = 0;
  for (float l : logits) allowed += std::isinf(l) ? 0 : 1;
  EXPECT_GT(allowed, 0);
  for (size_t t = 0; t < logits.size(); ++t) {
    if (!std::isinf(logits[t])) {
      const std::string piece = Tok().TokenToPiece(static_cast<TokenId>(t));
      EXPECT_EQ(std::string("ab").rfind(piece, 0), 0u) << "token " << t << " '" << piece << "'";
    }
  }
}

}  // namespace
}  // namespace kvserve
