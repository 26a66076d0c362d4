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
// The test executables are unity builds: this file's helpers stay apart from its neighbours'.
namespace structured_engine_test {

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
  std::vector<TokenId> tokens;
  std::vector<float> logprobs;
};

// Runs the requests together on one core; returns each request's samples, in index order.
std::vector<std::vector<Sample>> RunAll(const std::vector<EngineRequest>& reqs,
                                        EngineConfig config = SmallConfig(),
                                        JumpForwardStats* jump = nullptr) {
  auto core = EngineCore::Create(TinyModel(64), config, &Tok());
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
      s.tokens.insert(s.tokens.end(), e.new_tokens.begin(), e.new_tokens.end());
      for (const SampleOutput& lp : e.logprobs) s.logprobs.push_back(lp.logprob);
      if (e.finished) s.reason = e.finish_reason;
    }
    events.clear();
  }
  const EngineStats st = (*core)->stats();
  EXPECT_EQ(st.kv.num_free + st.kv.num_cached, st.kv.num_blocks);  // every block is back
  if (jump) *jump = st.jump_forward;
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

EngineConfig JumpConfig(bool on, EngineConfig::JumpForwardMode mode) {
  EngineConfig c = SmallConfig();
  c.jump_forward = on;
  c.jump_forward_mode = mode;
  return c;
}

// JSON with long forced stretches: property names, enum prefixes, brackets.
std::vector<ConstraintSpec> ForcingSpecs() {
  ConstraintSpec person;
  person.kind = ConstraintKind::kJsonSchema;
  person.text = R"({"type":"object","properties":{"identifier":{"type":"integer","minimum":0,
    "maximum":99},"description":{"type":"string","maxLength":6},"category":{"enum":
    ["category-alpha","category-beta"]}},"required":["identifier","description","category"],
    "additionalProperties":false})";
  ConstraintSpec choice;
  choice.kind = ConstraintKind::kChoice;
  choice.choices = {"the quick brown fox jumps", "the quick brown dog sleeps"};
  return {person, choice};
}

TEST(StructuredEngine, JumpForwardVerifiedIsTokenForTokenDecoding) {
  for (const ConstraintSpec& spec : ForcingSpecs()) {
    auto c = Compile(spec);
    std::vector<EngineRequest> reqs;
    for (int seed = 0; seed < 6; ++seed) reqs.push_back(Request(seed, 64, c));
    reqs[0].sampling.temperature = 0.f;  // greedy beside seeded samples
    reqs[1].sampling.logprobs = true;
    JumpForwardStats jump;
    const auto off = RunAll(reqs, JumpConfig(false, EngineConfig::JumpForwardMode::kVerify));
    const auto on = RunAll(reqs, JumpConfig(true, EngineConfig::JumpForwardMode::kVerify), &jump);
    EXPECT_GT(jump.num_forced_tokens, 0);
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(on[i][0].tokens, off[i][0].tokens) << i;
      EXPECT_EQ(on[i][0].text, off[i][0].text) << i;
      EXPECT_EQ(on[i][0].reason, off[i][0].reason) << i;
      EXPECT_EQ(on[i][0].logprobs, off[i][0].logprobs) << i;
    }
  }
}

TEST(StructuredEngine, JumpForwardForcedKeepsTheTextValidAndSkipsDecodeSteps) {
  const ConstraintSpec json = ForcingSpecs()[0];
  auto c = Compile(json);
  auto grammar = structured::BuildGrammar(json);
  ASSERT_TRUE(grammar.ok());
  std::vector<EngineRequest> reqs;
  for (int seed = 0; seed < 8; ++seed) reqs.push_back(Request(40 + seed, 64, c));
  reqs[2].n = 2;
  reqs[3].sampling.logprobs = true;
  reqs[4].stop_strings = {"category-b"};  // a stop string inside a forced stretch
  JumpForwardStats jump;
  const auto on = RunAll(reqs, JumpConfig(true, EngineConfig::JumpForwardMode::kForce), &jump);
  EXPECT_GT(jump.num_jumps, 0);
  EXPECT_EQ(jump.num_accepted_tokens, jump.num_forced_tokens);
  for (size_t i = 0; i < reqs.size(); ++i) {
    for (const Sample& s : on[i]) {
      if (i == 4) {
        EXPECT_EQ(s.text.find("category-b"), std::string::npos) << s.text;
      }
      if (s.reason == FinishReason::kStop && i != 4) {
        EXPECT_TRUE(structured::FullMatch(*grammar, s.text)) << s.text;
      } else {
        EXPECT_TRUE(structured::PrefixMatch(*grammar, s.text)) << s.text;
      }
      // The tokens spell the text (what the client gets is what the model was fed).
      EXPECT_EQ(Tok().Decode(s.tokens), s.text) << i;
    }
  }
  // Forced tokens report logprob 0 (certain under the constraint), one entry per token.
  EXPECT_EQ(on[3][0].logprobs.size(), on[3][0].tokens.size());
  EXPECT_NE(std::find(on[3][0].logprobs.begin(), on[3][0].logprobs.end(), 0.f),
            on[3][0].logprobs.end());
  // A choice: after its first word the rest is forced.
  const ConstraintSpec choice = ForcingSpecs()[1];
  EngineRequest one = Request(3, 64, Compile(choice));
  one.sampling.temperature = 0.f;
  const Sample on1 = RunAll({one}, JumpConfig(true, EngineConfig::JumpForwardMode::kForce))[0][0];
  EXPECT_EQ(on1.reason, FinishReason::kStop);
  EXPECT_TRUE(on1.text == choice.choices[0] || on1.text == choice.choices[1]) << on1.text;
}

}  // namespace structured_engine_test
}  // namespace
}  // namespace kvserve
