// The speculative decoding pieces that need no model: the config parser, n-gram lookup, the
// draft-length policy and the verification walk.
#include <gtest/gtest.h>

#include "spec/draft_policy.h"
#include "spec/ngram.h"
#include "spec/spec_config.h"
#include "spec/verify.h"

namespace kvserve {
namespace {

TEST(SpecConfig, ParsesVllmShapes) {
  auto ngram = ParseSpecConfig(R"({"method": "ngram", "num_speculative_tokens": 5,
                                   "prompt_lookup_max": 4, "prompt_lookup_min": 2})");
  ASSERT_TRUE(ngram.ok()) << ngram.status().ToString();
  EXPECT_EQ(ngram->method, SpecMethod::kNgram);
  EXPECT_EQ(ngram->num_speculative_tokens, 5);
  EXPECT_EQ(ngram->prompt_lookup_max, 4);
  EXPECT_EQ(ngram->prompt_lookup_min, 2);
  EXPECT_TRUE(ngram->adaptive);
  auto draft = ParseSpecConfig(
      R"({"method": "draft_model", "model": "d.gguf", "num_speculative_tokens": 3, "adaptive": false})");
  ASSERT_TRUE(draft.ok()) << draft.status().ToString();
  EXPECT_EQ(draft->method, SpecMethod::kDraftModel);
  EXPECT_EQ(draft->draft_model, "d.gguf");
  EXPECT_EQ(draft->num_speculative_tokens, 3);
  EXPECT_FALSE(draft->adaptive);
}

TEST(SpecConfig, EveryMistakeIsAnErrorNamingIt) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "JSON object"},
      {"[1]", "JSON object"},
      {R"({"num_speculative_tokens": 3})", "'method'"},
      {R"({"method": "eagle"})", "eagle"},
      {R"({"method": "ngram", "num_speculative_tokens": 0})", "num_speculative_tokens"},
      {R"({"method": "ngram", "num_speculative_tokens": 99})", "num_speculative_tokens"},
      {R"({"method": "ngram", "num_speculative_tokens": "5"})", "integer"},
      {R"({"method": "ngram", "prompt_lookup_min": 5, "prompt_lookup_max": 2})", "exceeds"},
      {R"({"method": "ngram", "speculative_model": "x"})", "speculative_model"},
      {R"({"method": "draft_model"})", "'model'"},
      {R"({"method": "ngram", "model": "x.gguf"})", "only for"},
      {R"({"method": "ngram", "adaptive": 1})", "adaptive"},
  };
  for (const auto& [text, needle] : cases) {
    auto r = ParseSpecConfig(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(needle), std::string::npos)
        << text << " -> " << r.status().message();
  }
}

TEST(Ngram, ProposesWhatFollowedTheLongestMostRecentMatch) {
  std::vector<TokenId> out;
  // ... 1 2 3 [7 8 9] ... 5 2 3 [4 4] ... 2 3 -> longest n = 2 ("2 3"): most recent is "5 2 3 4 4".
  const std::vector<TokenId> t = {1, 2, 3, 7, 8, 9, 5, 2, 3, 4, 4, 6, 2, 3};
  EXPECT_EQ(ProposeNgram(t, 1, 4, 3, &out), 3);
  EXPECT_EQ(out, (std::vector<TokenId>{4, 4, 6}));
  // A longer suffix wins over a more recent shorter match: "1 2 3" occurs once at the start.
  out.clear();
  const std::vector<TokenId> u = {1, 2, 3, 7, 8, 0, 2, 3, 5, 1, 2, 3};
  EXPECT_EQ(ProposeNgram(u, 2, 3, 2, &out), 2);
  EXPECT_EQ(out, (std::vector<TokenId>{7, 8}));
  // Where the text runs out the proposal repeats the pattern; nothing when nothing matches.
  out.clear();
  const std::vector<TokenId> v = {9, 9, 9};
  EXPECT_EQ(ProposeNgram(v, 1, 2, 5, &out), 5);  // "9 9" at 0 is followed by 9, and so on
  EXPECT_EQ(out, (std::vector<TokenId>{9, 9, 9, 9, 9}));
  out.clear();
  const std::vector<TokenId> cyc = {1, 2, 3, 1, 2, 3, 1};  // "3 1" at 2: then 2 3 1 2 3 ...
  EXPECT_EQ(ProposeNgram(cyc, 2, 2, 5, &out), 5);
  EXPECT_EQ(out, (std::vector<TokenId>{2, 3, 1, 2, 3}));
  out.clear();
  const std::vector<TokenId> w = {1, 2, 3, 4};
  EXPECT_EQ(ProposeNgram(w, 1, 3, 5, &out), 0);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(ProposeNgram(std::vector<TokenId>{}, 1, 3, 5, &out), 0);
  EXPECT_EQ(ProposeNgram(t, 2, 2, 0, &out), 0);
  // min_n is respected: "3" alone matches, "x 3" does not.
  const std::vector<TokenId> x = {3, 5, 8, 3};
  EXPECT_EQ(ProposeNgram(x, 2, 4, 2, &out), 0);
  EXPECT_EQ(ProposeNgram(x, 1, 4, 2, &out), 2);
  EXPECT_EQ(out, (std::vector<TokenId>{5, 8}));
  out.clear();
  EXPECT_EQ(ProposeNgram(x, 1, 4, 5, &out), 5);  // 5 8 3, then 5 8 again
  EXPECT_EQ(out, (std::vector<TokenId>{5, 8, 3, 5, 8}));
}

TEST(Verify, AcceptsUntilTheFirstDifferentSample) {
  const std::vector<TokenId> drafts = {5, 6, 7};
  std::vector<int> rows;
  // The target samples 5, 6, 9: two drafts accepted, 9 is the step's own token.
  const TokenId target[] = {5, 6, 9, 1};
  EXPECT_EQ(VerifyDrafts(drafts, [&](int j) {
              rows.push_back(j);
              return Emitted{target[j], false};
            }),
            2);
  EXPECT_EQ(rows, (std::vector<int>{0, 1, 2}));
  // All accepted: the row after the last draft is sampled too.
  rows.clear();
  const TokenId all[] = {5, 6, 7, 8};
  EXPECT_EQ(VerifyDrafts(drafts, [&](int j) {
              rows.push_back(j);
              return Emitted{all[j], false};
            }),
            3);
  EXPECT_EQ(rows, (std::vector<int>{0, 1, 2, 3}));
  // The sequence ends on an accepted draft: nothing after it is sampled.
  rows.clear();
  EXPECT_EQ(VerifyDrafts(drafts, [&](int j) {
              rows.push_back(j);
              return Emitted{all[j], j == 1};
            }),
            2);
  EXPECT_EQ(rows, (std::vector<int>{0, 1}));
}

TEST(DraftPolicy, AcceptanceRateFollowsObservations) {
  AcceptanceStats a;
  EXPECT_DOUBLE_EQ(a.rate(), 0.5);
  for (int i = 0; i < 30; ++i) a.Observe(4, 4);
  EXPECT_GT(a.rate(), 0.9);
  for (int i = 0; i < 30; ++i) a.Observe(4, 0);
  EXPECT_LT(a.rate(), 0.15);
  AcceptanceStats b;
  b.Observe(4, 1);  // one hit then the miss: two decisions (the first already faded once)
  EXPECT_NEAR(b.trials(), 1.9, 1e-9);
}

TEST(DraftPolicy, BandwidthBoundStepsDraftDeepWhereAcceptanceIsHigh) {
  // One decode row, a verified token costs 5% of the step.
  const DraftCosts costs{1.0, 0.05, 0.0, 1};
  const DraftCandidate high{0.9, 8}, low{0.03, 8};
  EXPECT_EQ(ChooseDraftLengths(std::vector<DraftCandidate>{high}, costs, 8)[0], 8);
  EXPECT_EQ(ChooseDraftLengths(std::vector<DraftCandidate>{low}, costs, 8)[0], 0);
  // The cap and the proposal length bound it.
  EXPECT_EQ(ChooseDraftLengths(std::vector<DraftCandidate>{high}, costs, 3)[0], 3);
  EXPECT_EQ(ChooseDraftLengths(std::vector<DraftCandidate>{{0.9, 2}}, costs, 8)[0], 2);
  // Middling acceptance: stops where a^j no longer beats the step's average rate.
  const int mid = ChooseDraftLengths(std::vector<DraftCandidate>{{0.5, 8}}, costs, 8)[0];
  EXPECT_GE(mid, 2);
  EXPECT_LE(mid, 5);
}

TEST(DraftPolicy, ComputeBoundBatchesDraftLessOrNothing) {
  // 16 decode rows where a row costs 1/32 of the step: a draft pays only when it is accepted
  // more often than 16/32, so drafts that would double a batch-1 decode do nothing here.
  std::vector<DraftCandidate> c(16, DraftCandidate{0.45, 8});
  const auto lens = ChooseDraftLengths(c, DraftCosts{1.0, 1.0 / 32, 0.0, 16}, 8);
  for (int l : lens) EXPECT_EQ(l, 0);
  EXPECT_GE(ChooseDraftLengths(std::vector<DraftCandidate>{{0.45, 8}}, DraftCosts{1.0, 1.0 / 32, 0.0, 1}, 8)[0], 2);
  c[3].rate = 0.95;
  const auto some = ChooseDraftLengths(c, DraftCosts{1.0, 1.0 / 32, 0.0, 16}, 8);
  EXPECT_GT(some[3], 0);
  EXPECT_EQ(some[0], 0);
  // Fully compute-bound (a row costs 1/16 of a 16-row step): nothing pays.
  for (int l : ChooseDraftLengths(c, DraftCosts{1.0, 1.0 / 16, 0.0, 16}, 8)) EXPECT_EQ(l, 0);
}

TEST(DraftPolicy, DraftModelDepthCostsAreWeighed) {
  const std::vector<DraftCandidate> c{{0.8, 8}};
  // A cheap draft (10% of a step per depth) pays for several; an expensive one for none.
  const int cheap = ChooseDraftLengths(c, DraftCosts{1.0, 0.03, 0.1, 1}, 8)[0];
  EXPECT_GE(cheap, 3);
  EXPECT_EQ(ChooseDraftLengths(c, DraftCosts{1.0, 0.03, 0.9, 1}, 8)[0], 0);
}

}  // namespace
}  // namespace kvserve
