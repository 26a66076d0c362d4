// Constraints as requests name them: tool-call grammars in each family's format, and the lazy
// processor of tool_choice "auto", which leaves text free until the format's trigger.
#include "structured/constraint.h"

#include <gtest/gtest.h>

#include <cmath>

#include "sample/token_history.h"
#include "structured/matcher.h"

namespace kvserve::structured {
namespace {

ConstraintSpec ToolSpecFor(ToolFormat format, bool parallel) {
  ConstraintSpec spec;
  spec.kind = ConstraintKind::kToolCalls;
  spec.tool_format = format;
  spec.parallel_tool_calls = parallel;
  spec.tools = {
      ToolSpec{
          "get_weather",
          R"({"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]})"},
      ToolSpec{"now", R"({"type":"object","properties":{}})"}};
  return spec;
}

TEST(ToolCallGrammar, HermesCallsWithArgumentsValidAgainstTheirSchema) {
  auto g = BuildGrammar(ToolSpecFor(ToolFormat::kHermes, true));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const std::string weather =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"unit\":\"c\"}}"
      "\n</tool_call>";
  const std::string now = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(FullMatch(*g, weather));
  EXPECT_TRUE(FullMatch(*g, now));
  EXPECT_TRUE(FullMatch(*g, weather + "\n" + now));  // parallel calls
  // Unknown function, missing required argument, undeclared argument (strict by default).
  EXPECT_FALSE(
      FullMatch(*g, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(
      FullMatch(*g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(
      FullMatch(*g, "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"x\":1}}\n</tool_call>"));
  EXPECT_FALSE(FullMatch(*g, "text first"));
  auto single = BuildGrammar(ToolSpecFor(ToolFormat::kHermes, false));
  ASSERT_TRUE(single.ok());
  EXPECT_TRUE(FullMatch(*single, now));
  EXPECT_FALSE(FullMatch(*single, now + "\n" + now));
}

TEST(ToolCallGrammar, Llama3CallIsTheWholeTurn) {
  auto g = BuildGrammar(ToolSpecFor(ToolFormat::kLlama3Json, true));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(FullMatch(*g, "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Oslo\"}}"));
  EXPECT_FALSE(FullMatch(*g,
                         "{\"name\": \"now\", \"parameters\": {}}{\"name\": \"now\", "
                         "\"parameters\": {}}"));
}

TEST(ToolCallGrammar, BadToolsAreErrorsNamingTheTool) {
  ConstraintSpec spec = ToolSpecFor(ToolFormat::kHermes, true);
  spec.tools[1].parameters =
      R"({"type":"object","properties":{"a":{"type":"object","propertyNames":{"maxLength":2}}}})";
  auto g = BuildGrammar(spec);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("tool 'now'"), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("propertyNames"), std::string::npos) << g.status().message();
  spec.tools.clear();
  EXPECT_FALSE(BuildGrammar(spec).ok());
  spec = ToolSpecFor(ToolFormat::kNone, true);
  EXPECT_FALSE(BuildGrammar(spec).ok());
}

TEST(ToolCallGrammar, TheKeyTellsFormatsModesAndToolsApart) {
  const ConstraintSpec a = ToolSpecFor(ToolFormat::kHermes, true);
  ConstraintSpec b = a;
  b.tool_lazy = true;
  ConstraintSpec c = a;
  c.tool_format = ToolFormat::kLlama3Json;
  ConstraintSpec d = a;
  d.tools[0].parameters += " ";
  ConstraintSpec e = a;
  e.parallel_tool_calls = false;
  for (const ConstraintSpec* other : {&b, &c, &d, &e}) EXPECT_NE(a.Key(), other->Key());
}

// A vocabulary of single bytes, a few multi-byte pieces and one end-of-generation token.
class LazyProcessor : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
    pieces.push_back("<tool_call>");  // 256
    pieces.push_back("Sure <tool");   // 257: the trigger starts inside a token
    pieces.push_back("");             // 258: end of generation
    vocab_ = TokenVocab::FromPieces(pieces, {258}, {});
    compiler_ = std::make_unique<ConstraintCompiler>(vocab_, ConstraintCompilerOptions{});
  }

  std::shared_ptr<TokenMasker> Lazy(ToolFormat format) {
    ConstraintSpec spec = ToolSpecFor(format, true);
    spec.tool_lazy = true;
    auto m = compiler_->Compile(spec);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return *m;
  }

  // The tokens the processor allows after `generated`.
  std::vector<TokenId> AllowedAfter(ConstraintProcessor& p, TokenHistory& h,
                                    const std::vector<TokenId>& generated) {
    for (TokenId t : generated) h.Append(t);
    std::vector<float> logits(static_cast<size_t>(vocab_->size()), 0.f);
    p.Process(logits, h);
    std::vector<TokenId> allowed;
    for (size_t t = 0; t < logits.size(); ++t) {
      if (!std::isinf(logits[t])) allowed.push_back(static_cast<TokenId>(t));
    }
    return allowed;
  }

  std::shared_ptr<const TokenVocab> vocab_;
  std::unique_ptr<ConstraintCompiler> compiler_;
};

std::vector<TokenId> Bytes(std::string_view s) {
  std::vector<TokenId> out;
  for (unsigned char c : s) out.push_back(c);
  return out;
}

TEST_F(LazyProcessor, HermesTextIsFreeUntilTheTriggerThenTheCallIsConstrained) {
  ConstraintProcessor p(Lazy(ToolFormat::kHermes));
  TokenHistory h(vocab_->size());
  EXPECT_FALSE(p.active());
  // Free text: everything allowed, the end of generation included.
  EXPECT_EQ(AllowedAfter(p, h, Bytes("I think <tool")).size(), static_cast<size_t>(vocab_->size()));
  EXPECT_FALSE(p.active());
  // "_call>" completes the trigger across tokens: from its '<' on the grammar holds.
  std::vector<TokenId> allowed = AllowedAfter(p, h, Bytes("_call>"));
  EXPECT_TRUE(p.active());
  EXPECT_EQ(allowed, std::vector<TokenId>{'\n'});
  allowed = AllowedAfter(p, h, Bytes("\n{\"name\": \""));
  EXPECT_EQ(allowed, (std::vector<TokenId>{'g', 'n'}));
}

TEST_F(LazyProcessor, HermesTriggerInsideOneToken) {
  ConstraintProcessor p(Lazy(ToolFormat::kHermes));
  TokenHistory h(vocab_->size());
  EXPECT_EQ(AllowedAfter(p, h, {257}).size(), static_cast<size_t>(vocab_->size()));  // "Sure <tool"
  EXPECT_EQ(AllowedAfter(p, h, Bytes("_call>\n")), std::vector<TokenId>{'{'});
  EXPECT_TRUE(p.active());
  ConstraintProcessor q(Lazy(ToolFormat::kHermes));
  TokenHistory h2(vocab_->size());
  EXPECT_EQ(AllowedAfter(q, h2, {256}), std::vector<TokenId>{'\n'});  // the "<tool_call>" token
}

TEST_F(LazyProcessor, Llama3TriggersOnlyAtTheStart) {
  ConstraintProcessor p(Lazy(ToolFormat::kLlama3Json));
  TokenHistory h(vocab_->size());
  EXPECT_EQ(AllowedAfter(p, h, Bytes("{")), std::vector<TokenId>{'"'});
  EXPECT_TRUE(p.active());
  ConstraintProcessor q(Lazy(ToolFormat::kLlama3Json));
  TokenHistory h2(vocab_->size());
  EXPECT_EQ(AllowedAfter(q, h2, Bytes("The answer {")).size(), static_cast<size_t>(vocab_->size()));
  EXPECT_FALSE(q.active());
}

TEST_F(LazyProcessor, AWrongCallAfterTheTriggerLeavesOnlyTheEnd) {
  ConstraintProcessor p(Lazy(ToolFormat::kHermes));
  TokenHistory h(vocab_->size());
  // Something outside the mask chose "x" after the trigger: only the end of generation remains.
  EXPECT_EQ(AllowedAfter(p, h, Bytes("<tool_call>x")), std::vector<TokenId>{258});
}

}  // namespace
}  // namespace kvserve::structured
