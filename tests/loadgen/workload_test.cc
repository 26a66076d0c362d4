#include "loadgen/workload.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "loadgen/text_gen.h"

namespace kvserve::loadgen {
namespace {

// A tokenizer where every word is one token.
Result<int> CountWords(std::string_view text) {
  int n = 0;
  bool in_word = false;
  for (char c : text) {
    const bool space = c == ' ' || c == '\n';
    if (!space && !in_word) ++n;
    in_word = !space;
  }
  return n;
}

Workload Build(const WorkloadConfig& c) {
  TextBuilder builder(CountWords);
  auto w = BuildWorkload(c, builder);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  return std::move(w).value();
}

// (group, turn) of each request, in the order the workload sends them.
std::vector<std::pair<int, int>> GroupTurnOrder(const WorkloadConfig& c) {
  std::vector<std::pair<int, int>> out;
  for (const RequestSpec& r : Build(c).requests) out.emplace_back(r.group, r.turn);
  return out;
}

TEST(TextBuilderTest, HitsTheTargetExactlyWithAWordTokenizer) {
  TextBuilder builder(CountWords);
  Rng rng(1);
  for (int target : {1, 7, 100, 1000}) {
    auto t = builder.Build(rng, target);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->num_tokens, target);
    EXPECT_EQ(*CountWords(t->text), target);
  }
  EXPECT_EQ(builder.Build(rng, 0)->text, "");
}

TEST(TextBuilderTest, ComesWithinOneTokenOfTheTargetWithAByteEstimate) {
  TextBuilder builder([](std::string_view t) -> Result<int> { return EstimateTokens(t); });
  Rng rng(2);
  for (int target : {16, 64, 500}) {
    auto t = builder.Build(rng, target);
    ASSERT_TRUE(t.ok());
    EXPECT_NEAR(t->num_tokens, target, 2) << target;
    EXPECT_EQ(t->num_tokens, EstimateTokens(t->text));
  }
}

TEST(TextBuilderTest, CounterErrorsPropagate) {
  TextBuilder builder([](std::string_view) -> Result<int> { return IoError("down"); });
  Rng rng(3);
  EXPECT_FALSE(builder.Build(rng, 10).ok());
}

TEST(WorkloadTest, SharedPrefixGroupsShareByteIdenticalSystemPrompts) {
  WorkloadConfig c;
  c.kind = WorkloadKind::kSharedPrefix;
  c.groups = 3;
  c.prompts_per_group = 4;
  c.system_prompt_len = 50;
  c.question_len = 10;
  c.output_len = 5;
  const Workload w = Build(c);
  ASSERT_EQ(w.requests.size(), 12u);
  std::set<std::string> systems, questions;
  for (const RequestSpec& r : w.requests) {
    EXPECT_EQ(r.id, r.group * 4 + r.turn);  // sent group by group
    ASSERT_EQ(r.segments.size(), 2u);
    EXPECT_EQ(r.segments[0].role, Role::kSystem);
    EXPECT_EQ(r.segments[0].num_tokens, 50);
    EXPECT_EQ(r.segments[1].num_tokens, 10);
    EXPECT_EQ(r.segments[0].content, w.requests[static_cast<size_t>(r.group * 4)].segments[0].content);
    EXPECT_EQ(r.max_tokens, 5);
    systems.insert(r.segments[0].content);
    questions.insert(r.segments[1].content);
  }
  EXPECT_EQ(systems.size(), 3u);
  EXPECT_EQ(questions.size(), 12u);
}

TEST(WorkloadTest, SameSeedSameWorkload) {
  WorkloadConfig c;
  c.kind = WorkloadKind::kRepeatPrefix;
  c.num_prompts = 10;
  c.prefix_len = 20;
  c.suffix_len = 5;
  c.seed = 9;
  const Workload a = Build(c), b = Build(c);
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_EQ(RenderCompletionPrompt(a.requests[i].segments, false),
              RenderCompletionPrompt(b.requests[i].segments, false));
  }
  c.seed = 10;
  const Workload other = Build(c);
  EXPECT_NE(RenderCompletionPrompt(a.requests[0].segments, false),
            RenderCompletionPrompt(other.requests[0].segments, false));
}

TEST(WorkloadTest, RepeatPrefixUsesEachPrefixEquallyInShuffledOrder) {
  WorkloadConfig c;
  c.kind = WorkloadKind::kRepeatPrefix;
  c.num_prompts = 12;
  c.num_prefixes = 3;
  c.prefix_len = 30;
  c.suffix_len = 6;
  const Workload w = Build(c);
  ASSERT_EQ(w.requests.size(), 12u);
  std::map<std::string, int> uses;
  std::vector<int> groups;
  for (const RequestSpec& r : w.requests) {
    ++uses[r.segments[0].content];
    groups.push_back(r.group);
    EXPECT_EQ(r.segments[0].num_tokens, 30);
    EXPECT_EQ(r.segments[1].num_tokens, 6);
  }
  ASSERT_EQ(uses.size(), 3u);
  for (const auto& [prefix, n] : uses) EXPECT_EQ(n, 4);
  EXPECT_FALSE(std::is_sorted(groups.begin(), groups.end()));
}

TEST(WorkloadTest, LongDocOrdersTileAndInterleave) {
  WorkloadConfig c;
  c.kind = WorkloadKind::kLongDoc;
  c.num_docs = 2;
  c.questions_per_doc = 3;
  c.doc_len = 40;
  c.question_len = 4;
  auto order = [&](DocOrder o) {
    c.order = o;
    return GroupTurnOrder(c);
  };
  EXPECT_EQ(order(DocOrder::kTile),
            (std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}}));
  EXPECT_EQ(order(DocOrder::kInterleave),
            (std::vector<std::pair<int, int>>{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 2}, {1, 2}}));
}

TEST(WorkloadTest, RepeatPrefixOrdersInterleaveAndTile) {
  WorkloadConfig c;
  c.kind = WorkloadKind::kRepeatPrefix;
  c.num_prompts = 6;
  c.num_prefixes = 3;
  c.prefix_len = 8;
  c.suffix_len = 2;
  auto order = [&](DocOrder o) {
    c.repeat_order = o;
    return GroupTurnOrder(c);
  };
  EXPECT_EQ(order(DocOrder::kInterleave),
            (std::vector<std::pair<int, int>>{{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}, {2, 1}}));
  EXPECT_EQ(order(DocOrder::kTile),
            (std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {2, 0}, {2, 1}}));
}

TEST(WorkloadTest, MultiTurnRoundsWaitOnTheirPreviousRound) {
  WorkloadConfig c;
  c.kind = WorkloadKind::kMultiTurn;
  c.conversations = 2;
  c.rounds = 3;
  c.user_len = 8;
  const Workload w = Build(c);
  ASSERT_EQ(w.requests.size(), 6u);
  EXPECT_TRUE(w.conversational);
  for (const RequestSpec& r : w.requests) {
    EXPECT_EQ(r.id, r.turn * 2 + r.group);
    EXPECT_EQ(r.prev_id, r.turn == 0 ? -1 : r.id - 2);
    ASSERT_EQ(r.segments.size(), 1u);
    EXPECT_EQ(r.segments[0].role, Role::kUser);
  }
  // The second round's prompt is the first round's, its answer, then the new user turn.
  const auto history = WithHistory(w.requests[0].segments, "an answer", 2, w.requests[2]);
  ASSERT_EQ(history.size(), 3u);
  EXPECT_EQ(history[1].role, Role::kAssistant);
  EXPECT_EQ(history[1].num_tokens, 2);
  const auto msgs = RenderChatMessages(history);
  ASSERT_EQ(msgs.size(), 3u);
  EXPECT_EQ(msgs[1].content, "an answer");
  const std::string prompt = RenderCompletionPrompt(history, true);
  EXPECT_EQ(prompt.rfind("User: ", 0), 0u);
  EXPECT_NE(prompt.find("\n\nAssistant: an answer\n\nUser: "), std::string::npos);
  EXPECT_EQ(prompt.substr(prompt.size() - 12), "\n\nAssistant:");
}

TEST(WorkloadTest, RandomLengthsStayInTheRange) {
  WorkloadConfig c;
  c.kind = WorkloadKind::kRandom;
  c.num_prompts = 50;
  c.input_len = 100;
  c.range_ratio = 0.2;
  std::set<int> lengths;
  for (const RequestSpec& r : Build(c).requests) {
    ASSERT_EQ(r.segments.size(), 1u);
    EXPECT_GE(r.segments[0].num_tokens, 80);
    EXPECT_LE(r.segments[0].num_tokens, 120);
    lengths.insert(r.segments[0].num_tokens);
  }
  EXPECT_GT(lengths.size(), 5u);
}

TEST(WorkloadTest, ChatMessagesMergeConsecutiveTurnsOfOneRole) {
  const std::vector<Segment> s = {{Role::kUser, "doc", 1}, {Role::kUser, "question", 1}};
  const auto msgs = RenderChatMessages(s);
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].content, "doc\n\nquestion");
  EXPECT_EQ(RenderCompletionPrompt(s, false), "doc\n\nquestion");
}

TEST(WorkloadTest, BadParametersNameTheFlag) {
  WorkloadConfig c;
  c.kind = WorkloadKind::kSharedPrefix;
  c.groups = 0;
  EXPECT_NE(ValidateWorkloadConfig(c).message().find("--groups"), std::string::npos);
  c = WorkloadConfig{};
  c.kind = WorkloadKind::kRandom;
  c.range_ratio = 1.5;
  EXPECT_NE(ValidateWorkloadConfig(c).message().find("--range-ratio"), std::string::npos);
  EXPECT_FALSE(ParseWorkloadKind("sharegpt").ok());
  EXPECT_EQ(*ParseWorkloadKind("long-doc"), WorkloadKind::kLongDoc);
}

}  // namespace
}  // namespace kvserve::loadgen
