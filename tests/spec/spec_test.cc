// The speculative decoding pieces that need no model: the config parser, n-gram lookup, the
// draft-length policy and the verification walk.
#include <gtest/gtest.h>

#include "spec/draft_policy.h"
#include "spec/verify_cost.h"
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

// A step of one unit whose every draft costs `per_draft` more.
DraftCosts Linear(double per_draft, double draft_step = 0.0, int rows = 1) {
  DraftCosts c;
  c.step_seconds = [per_draft](int n) { return 1.0 + per_draft * n; };
  c.draft_step_seconds = draft_step;
  c.num_decode_rows = rows;
  return c;
}

TEST(DraftPolicy, BandwidthBoundStepsDraftDeepWhereAcceptanceIsHigh) {
  // One decode row, a verified token costs 5% of the step.
  const DraftCosts costs = Linear(0.05);
  const DraftCandidate high{0.9, 8}, low{0.03, 8};
  EXPECT_EQ(ChooseDraftLengths(std::vector<DraftCandidate>{high}, costs, 8)[0], 8);
  EXPECT_EQ(ChooseDraftLengths(std::vector<DraftCandidate>{low}, costs, 8)[0], 0);
  // The cap and the proposal length bound it.
  EXPECT_EQ(ChooseDraftLengths(std::vector<DraftCandidate>{high}, costs, 3)[0], 3);
  EXPECT_EQ(ChooseDraftLengths(std::vector<DraftCandidate>{{0.9, 2}}, costs, 8)[0], 2);
  // Middling acceptance: stops where a^j no longer beats the step's average rate. With a = 0.5
  // the best is 3 drafts: (1 + .5 + .25 + .125) / 1.15 = 1.63 tokens per unit, and a fourth
  // (0.0625 tokens for 0.05) lowers it.
  EXPECT_EQ(ChooseDraftLengths(std::vector<DraftCandidate>{{0.5, 8}}, costs, 8)[0], 3);
}

TEST(DraftPolicy, ComputeBoundBatchesDraftLessOrNothing) {
  // 16 decode rows where a row costs 1/32 of the step: a draft pays only when it is accepted
  // more often than 16/32, so drafts that would double a batch-1 decode do nothing here.
  std::vector<DraftCandidate> c(16, DraftCandidate{0.45, 8});
  const auto lens = ChooseDraftLengths(c, Linear(1.0 / 32, 0.0, 16), 8);
  for (int l : lens) EXPECT_EQ(l, 0);
  EXPECT_GE(ChooseDraftLengths(std::vector<DraftCandidate>{{0.45, 8}}, Linear(1.0 / 32), 8)[0], 2);
  c[3].rate = 0.95;
  const auto some = ChooseDraftLengths(c, Linear(1.0 / 32, 0.0, 16), 8);
  EXPECT_GT(some[3], 0);
  EXPECT_EQ(some[0], 0);
  // Fully compute-bound (a row costs 1/16 of a 16-row step): nothing pays.
  for (int l : ChooseDraftLengths(c, Linear(1.0 / 16, 0.0, 16), 8)) EXPECT_EQ(l, 0);
}

TEST(DraftPolicy, DraftModelDepthCostsAreWeighed) {
  const std::vector<DraftCandidate> c{{0.8, 8}};
  // A cheap draft (10% of a step per depth) pays for several; an expensive one for none.
  const int cheap = ChooseDraftLengths(c, Linear(0.03, 0.1), 8)[0];
  EXPECT_GE(cheap, 3);
  EXPECT_EQ(ChooseDraftLengths(c, Linear(0.03, 0.9), 8)[0], 0);
}

TEST(DraftPolicy, AMeasuredVerifyCostTurnsADraftModelOffWhereItDoesNotPay) {
  // The 1B F16 target with its Q4_K self-draft: a depth costs 0.45 of a target step, and
  // verifying k drafts costs 1.15, 1.45, 1.81, ... steps (the measured verify table). At 2/3
  // acceptance one draft is a wash, (1 + 2/3) / (1.15 + 0.45) = 1.04, and more lose; at 40% none
  // pays, so the sequence decodes alone.
  const std::vector<double> verify{1.0, 1.15, 1.45, 1.81, 2.36, 2.38, 2.88};
  DraftCosts costs;
  costs.step_seconds = [&verify](int n) { return verify[static_cast<size_t>(std::min(n, 6))]; };
  costs.draft_step_seconds = 0.45;
  EXPECT_EQ(ChooseDraftLengths(std::vector<DraftCandidate>{{0.4, 5}}, costs, 5)[0], 0);
  EXPECT_EQ(ChooseDraftLengths(std::vector<DraftCandidate>{{0.667, 5}}, costs, 5)[0], 1);
  // A cheap, well-matched draft goes deep on the same curve.
  costs.draft_step_seconds = 0.05;
  EXPECT_GE(ChooseDraftLengths(std::vector<DraftCandidate>{{0.95, 5}}, costs, 5)[0], 4);
}

TEST(DraftPolicy, ACostCurveThatDipsIsSearchedPastItsBump) {
  // Verifying is dear at 1 draft and cheap per draft after it (a kernel tile that fills at 4
  // rows): stopping at the first draft that does not pay would miss the better allocation.
  DraftCosts costs;
  costs.step_seconds = [](int n) { return n == 0 ? 1.0 : n < 3 ? 1.6 : 1.6 + 0.01 * (n - 2); };
  EXPECT_EQ(ChooseDraftLengths(std::vector<DraftCandidate>{{0.9, 6}}, costs, 6)[0], 6);
}

TEST(VerifyCostTable, InterpolatesBetweenAndExtrapolatesPastWhatWasMeasured) {
  VerifyCostTable t(16);
  EXPECT_FALSE(t.Seconds(1).has_value());
  EXPECT_DOUBLE_EQ(*t.Seconds(0), 0.0);
  t.Observe(2, 4.0);
  EXPECT_DOUBLE_EQ(*t.Seconds(1), 4.0);  // below the smallest: its value
  EXPECT_DOUBLE_EQ(*t.Seconds(4), 8.0);  // one point: in proportion to the rows
  t.Observe(1, 3.0);
  t.Observe(6, 6.0);
  EXPECT_DOUBLE_EQ(*t.Seconds(4), 5.0);   // halfway between 2 (4.0) and 6 (6.0)
  EXPECT_DOUBLE_EQ(*t.Seconds(10), 8.0);  // past 6: the slope from 2 to 6, 0.5 a row
  EXPECT_DOUBLE_EQ(*t.Seconds(40), 23.0);  // and past the table's end
  t.Observe(17, 1.0);                      // outside the table: ignored
  t.Observe(3, -1.0);                      // not a time: ignored
  EXPECT_FALSE(t.measured(3));
}

TEST(VerifyCostTable, ARealStepReplacesAStartUpPrior) {
  VerifyCostTable t(4);
  t.SetPrior(2, 1.0);
  t.Observe(2, 5.0);  // beyond the 2x clamp: a prior is replaced, not averaged
  EXPECT_DOUBLE_EQ(*t.Seconds(2), 5.0);
  t.Observe(2, 6.0);  // then averaged
  EXPECT_DOUBLE_EQ(*t.Seconds(2), 5.2);
}

TEST(VerifyCostTable, AveragesItsStepsAndAStallMovesItLittle) {
  VerifyCostTable t(4);
  t.Observe(1, 1.0);
  for (int i = 0; i < 50; ++i) t.Observe(1, 2.0);
  EXPECT_NEAR(*t.Seconds(1), 2.0, 1e-3);  // follows a lasting change
  t.Observe(1, 1000.0);                   // one stall: clamped to 2x before averaging
  EXPECT_NEAR(*t.Seconds(1), 2.4, 1e-3);
}

}  // namespace
}  // namespace kvserve
