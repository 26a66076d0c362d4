// Scheduler as a specification: blocks of 4 tokens; a fake engine step appends token 7 to every
// sequence whose chunk reached its end. KV invariants are checked after every step.
#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace kvserve {
namespace {

constexpr CacheNamespace kNs{1};

std::vector<TokenId> Range(int begin, int n) {
  std::vector<TokenId> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), begin);
  return v;
}

struct Planned {
  int64_t seq;
  int num_new;
  bool logits;
  bool operator==(const Planned&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Planned& p) {
  return os << "{seq " << p.seq << ", " << p.num_new << (p.logits ? ", logits}" : "}");
}

class SchedulerTest : public ::testing::Test {
 protected:
  void Init(int num_blocks, int budget, int max_seqs = 8, bool caching = true,
            int max_model_len = 256) {
    kv_ = std::make_unique<KvCacheManager>(KvCacheConfig{num_blocks, 4, caching});
    sched_ = std::make_unique<Scheduler>(SchedulerConfig{max_seqs, budget, max_model_len},
                                         kv_.get());
  }
  void Add(int64_t id, std::vector<TokenId> prompt, int priority = 0, int max_tokens = 8) {
    ASSERT_TRUE(sched_->Add(SeqSpec{SeqId(id), kNs, std::move(prompt), max_tokens, priority})
                    .ok());
  }
  // One step; returns what ran.
  std::vector<Planned> Step() {
    last_ = sched_->Schedule();
    sched_->OnStepDone(last_);
    std::vector<Planned> ran;
    for (const ScheduledSeq& s : last_.seqs) {
      ran.push_back({s.seq.value(), s.num_new_tokens, s.wants_logits});
      if (s.wants_logits) sched_->AppendToken(s.seq, 7);
    }
    kv_->CheckInvariants();
    return ran;
  }

  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> sched_;
  ScheduleOutput last_;
};

TEST_F(SchedulerTest, ChunksALongPromptWithinTheTokenBudget) {
  Init(16, 8);
  Add(1, Range(0, 20));
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 8, false}}));
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 8, false}}));
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 4, true}}));
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 1, true}}));  // then decodes one at a time
  EXPECT_EQ(sched_->num_computed(SeqId(1)), 21);
}

TEST_F(SchedulerTest, DecodesAndAPrefillChunkShareOneStep) {
  Init(16, 8);
  Add(1, Range(0, 4));
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 4, true}}));
  Add(2, Range(100, 20));
  // Running sequences first (a decode), then the waiting one gets the rest of the budget.
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 1, true}, {2, 7, false}}));
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 1, true}, {2, 7, false}}));
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 1, true}, {2, 6, true}}));
}

TEST_F(SchedulerTest, AtMostMaxNumSeqsRun) {
  Init(32, 64, /*max_seqs=*/2);
  Add(1, Range(0, 3));
  Add(2, Range(10, 3));
  Add(3, Range(20, 3));
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 3, true}, {2, 3, true}}));
  EXPECT_EQ(sched_->num_waiting(), 1);
  sched_->Remove(SeqId(1));  // finished
  EXPECT_EQ(Step(), (std::vector<Planned>{{2, 1, true}, {3, 3, true}}));
}

TEST_F(SchedulerTest, PreemptsTheLowestPriorityNewestRequestWhenBlocksRunOut) {
  Init(6, 64, 8, /*caching=*/false);
  Add(1, Range(0, 7), /*priority=*/0);
  Add(2, Range(10, 7), /*priority=*/1);
  Add(3, Range(20, 7), /*priority=*/0);
  // Waiting order: higher priority first, then arrival.
  EXPECT_EQ(Step(), (std::vector<Planned>{{2, 7, true}, {1, 7, true}, {3, 7, true}}));
  EXPECT_EQ(kv_->stats().num_free, 0);
  EXPECT_EQ(Step(), (std::vector<Planned>{{2, 1, true}, {1, 1, true}, {3, 1, true}}));
  // Slot 8 needs a third block each. Sequence 3 (priority 0, newest) is preempted for it.
  EXPECT_EQ(Step(), (std::vector<Planned>{{2, 1, true}, {1, 1, true}}));
  EXPECT_EQ(last_.preempted, (std::vector<SeqId>{SeqId(3)}));
  EXPECT_EQ(sched_->state(SeqId(3)), SeqState::kPreempted);
  EXPECT_EQ(sched_->num_computed(SeqId(3)), 0);
  EXPECT_EQ(sched_->tokens(SeqId(3)).size(), 9u);  // kept: it resumes by recompute
  EXPECT_EQ(sched_->num_preemptions(), 1);
  // When a running sequence leaves, the preempted one recomputes all its 9 tokens.
  sched_->Remove(SeqId(2));
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 1, true}, {3, 9, true}}));
}

TEST_F(SchedulerTest, APreemptedRequestResumesFromItsCommittedBlocks) {
  Init(5, 64, 8, /*caching=*/true);
  Add(1, Range(0, 7), 1);
  Add(2, Range(50, 7), 0);
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 7, true}, {2, 7, true}}));
  Step();  // 8 tokens computed each: blocks 0..3 full and committed
  // Slot 8: sequence 1 takes the last free block; sequence 2 finds none and preempts itself.
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 1, true}}));
  EXPECT_EQ(last_.preempted, (std::vector<SeqId>{SeqId(2)}));
  sched_->Remove(SeqId(1));
  // 9 tokens known; its two committed blocks are still cached: only the last one is computed.
  EXPECT_EQ(Step(), (std::vector<Planned>{{2, 1, true}}));
  EXPECT_EQ(sched_->num_cached_tokens(SeqId(2)), 0);  // accounting keeps the first admission
}

TEST_F(SchedulerTest, RefusesRequestsThatCouldNeverFit) {
  Init(4, 64, 8, true, /*max_model_len=*/32);
  const Status too_long = sched_->CheckAdmission(30, 5);
  EXPECT_EQ(too_long.code(), StatusCode::kOutOfRange);
  EXPECT_NE(too_long.message().find("32"), std::string::npos);
  const Status too_big = sched_->CheckAdmission(10, 10);  // 5 blocks > 4
  EXPECT_EQ(too_big.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.message().find("--kv-cache-memory"), std::string::npos);
  EXPECT_EQ(sched_->CheckAdmission(0, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(sched_->CheckAdmission(10, 6).ok());
}

TEST_F(SchedulerTest, AWaitingRequestWaitsForARunningOneComputingTheSamePrefix) {
  Init(16, 8);
  std::vector<TokenId> a = Range(0, 16), b = Range(0, 16);
  a.insert(a.end(), {100, 101});
  b.insert(b.end(), {200, 201});
  Add(1, a);
  Add(2, b);
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 8, false}}));  // 2 waits: 1 computes the prefix
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 8, false}}));
  // 2 now hits the 16 cached tokens; with 2 tokens left it is a short prefill and goes first.
  EXPECT_EQ(Step(), (std::vector<Planned>{{2, 2, true}, {1, 2, true}}));
  EXPECT_EQ(sched_->num_cached_tokens(SeqId(2)), 16);
  EXPECT_EQ(kv_->stats().hit_tokens, 16);
}

TEST_F(SchedulerTest, ACacheHitIsAdmittedBeforeAnotherRequestsLongPrefillContinues) {
  Init(32, 16);
  const std::vector<TokenId> shared = Range(0, 16);
  Add(1, shared);
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 16, true}}));
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 1, true}}));  // its 4 full blocks are committed
  sched_->Remove(SeqId(1));
  Add(3, Range(1000, 40));  // 40 tokens, nothing cached
  EXPECT_EQ(Step(), (std::vector<Planned>{{3, 16, false}}));
  std::vector<TokenId> hit = shared;  // 16 cached tokens + 3 new ones
  hit.insert(hit.end(), {7, 8, 9});
  Add(4, hit);
  // 4 has 3 tokens left to compute: it is admitted first, within half the budget, and the long
  // prefill takes what remains.
  EXPECT_EQ(Step(), (std::vector<Planned>{{4, 3, true}, {3, 13, false}}));
  EXPECT_EQ(sched_->num_cached_tokens(SeqId(4)), 16);
}

TEST_F(SchedulerTest, ForkedChildrenShareTheParentsBlocks) {
  Init(16, 64);
  Add(1, Range(0, 6));
  // The engine forks right after the prompt's logits, before appending the sampled tokens.
  const ScheduleOutput out = sched_->Schedule();
  sched_->OnStepDone(out);
  const std::optional<BlockCopy> copy = sched_->Fork(SeqId(1), SeqId(2));
  ASSERT_TRUE(copy.has_value());  // slot 5 is in a partial block
  EXPECT_EQ(sched_->num_computed(SeqId(2)), 6);
  EXPECT_EQ(kv_->block_table(SeqId(2))[0], kv_->block_table(SeqId(1))[0]);
  EXPECT_EQ(kv_->block_table(SeqId(2))[1], copy->dst);
  sched_->AppendToken(SeqId(1), 8);
  sched_->AppendToken(SeqId(2), 9);
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 1, true}, {2, 1, true}}));
  sched_->Remove(SeqId(1));
  sched_->Remove(SeqId(2));
  EXPECT_EQ(kv_->stats().num_in_use, 0);
}

// --max-itl-ms: with a sequence decoding, a long prompt gets only the prefill the cost model says
// fits in the target; with nobody decoding it gets the whole budget.
TEST_F(SchedulerTest, ALatencyTargetHoldsPrefillToWhatTheCostModelFits) {
  StepCostModel model;  // a machine of 20 ms per step, 1 ms per decode row, 4 ms per token
  for (int i = 1; i <= 20; ++i) {
    model.Observe(StepShape{i % 5 + 1, 0, 10 * i}, 0.020 + 0.001 * (i % 5 + 1));
    model.Observe(StepShape{0, 8 * i, 0}, 0.020 + 0.004 * 8 * i);
  }
  ASSERT_TRUE(model.fit().ready);
  kv_ = std::make_unique<KvCacheManager>(KvCacheConfig{64, 4, true});
  SchedulerConfig config{8, 64, 256};
  config.max_itl_seconds = 0.100;
  config.min_prefill_chunk = 4;
  sched_ = std::make_unique<Scheduler>(config, kv_.get());
  sched_->set_cost_model(&model);
  // Before the model is ready, a decoding step carries min_prefill_chunk of prefill.
  StepCostModel untrained;
  sched_->set_cost_model(&untrained);
  Add(10, Range(500, 4), 0, 2);
  EXPECT_EQ(Step(), (std::vector<Planned>{{10, 4, true}}));
  Add(11, Range(600, 20), 0, 2);
  EXPECT_EQ(Step(), (std::vector<Planned>{{10, 1, true}, {11, 4, false}}));
  EXPECT_EQ(last_.prefill_cap, 4);
  sched_->Remove(SeqId(10));
  sched_->Remove(SeqId(11));
  sched_->set_cost_model(&model);
  Add(1, Range(0, 60), 0, 4);
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 60, true}}));  // nobody decodes: the whole budget
  EXPECT_EQ(last_.prefill_cap, -1);
  Add(2, Range(100, 60), 0, 4);
  // Sequence 1 decodes (one row over 61 tokens): 0.1 s leaves 0.079 s, 19 tokens of prefill.
  const int fits = *model.PrefillBudget(1, 61, 0.100);
  EXPECT_EQ(fits, 19);
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 1, true}, {2, fits, false}}));
  EXPECT_EQ(last_.prefill_cap, fits);
  // A tighter target than the decodes alone: prefill still moves by min_prefill_chunk.
  config.max_itl_seconds = 0.010;
  sched_ = std::make_unique<Scheduler>(config, kv_.get());
  sched_->set_cost_model(&model);
  kv_->EndSequence(SeqId(1));
  kv_->EndSequence(SeqId(2));
  Add(3, Range(200, 8), 0, 4);
  Step();
  Add(4, Range(300, 40), 0, 4);
  EXPECT_EQ(Step(), (std::vector<Planned>{{3, 1, true}, {4, 4, false}}));
  EXPECT_EQ(last_.prefill_cap, 4);
}

// Eviction inside a sequence: blocks of 4; a budget of 16 tokens keeping one sink block and
// dropping two blocks at a time.
class SchedulerEvictionTest : public SchedulerTest {
 protected:
  static KvEvictionPlan Sinks() {
    KvEvictionConfig c{.policy = KvEvictionPolicy::kSinks, .budget_tokens = 16, .sink_tokens = 4,
                       .evict_batch_tokens = 8};
    return *PlanKvEviction(c, 4, 1024);
  }
  void AddEvicting(int64_t id, std::vector<TokenId> prompt, int max_tokens) {
    ASSERT_TRUE(sched_->Add(SeqSpec{SeqId(id), kNs, std::move(prompt), max_tokens, 0, Sinks()})
                    .ok());
  }
  // (evicted tokens, moved block count) of the last step's evictions.
  std::vector<std::pair<int, int>> Evictions() const {
    std::vector<std::pair<int, int>> out;
    for (const KvEvictionEdit& e : last_.evictions) {
      out.push_back({e.blocks.evicted_tokens, static_cast<int>(e.blocks.moved.size())});
    }
    return out;
  }
};

TEST_F(SchedulerEvictionTest, PlanRoundsToBlocksAndRefusesBudgetsWithoutRoom) {
  const KvEvictionPlan p = Sinks();
  EXPECT_EQ(p.budget_blocks, 4);
  EXPECT_EQ(p.keep_blocks, 1);
  EXPECT_EQ(p.drop_blocks, 2);
  KvEvictionConfig window{.policy = KvEvictionPolicy::kWindow, .budget_tokens = 64};
  EXPECT_EQ(PlanKvEviction(window, 16, 1024)->keep_blocks, 0);
  EXPECT_EQ(PlanKvEviction(window, 16, 1024)->drop_blocks, 1);  // budget / 8, one block at least
  KvEvictionConfig none_left{.policy = KvEvictionPolicy::kSinks, .budget_tokens = 16,
                             .sink_tokens = 16};
  EXPECT_FALSE(PlanKvEviction(none_left, 16, 1024).ok());
  EXPECT_FALSE(PlanKvEviction(KvEvictionConfig{.policy = KvEvictionPolicy::kWindow}, 16, 1024).ok());
  EXPECT_FALSE(PlanKvEviction(window, 16, 32).ok());  // more than a sequence may hold
  EXPECT_FALSE(ParseKvEvictionPolicy("fifo", "--kv-eviction").ok());
  EXPECT_EQ(*ParseKvEvictionPolicy("H2O", "--kv-eviction"), KvEvictionPolicy::kH2O);
  EXPECT_EQ(*ParseKvEvictionPolicy("Sinks", "--kv-eviction"), KvEvictionPolicy::kSinks);
}

TEST(KvEvictionPlanTest, ScoredPoliciesProtectTheirNewestSlotsAndCheckTheirRoom) {
  KvEvictionConfig h2o{.policy = KvEvictionPolicy::kH2O, .budget_tokens = 128};
  const KvEvictionPlan p = *PlanKvEviction(h2o, 16, 1024);
  EXPECT_TRUE(p.by_score);
  EXPECT_EQ(p.keep_blocks, 0);
  EXPECT_EQ(p.drop_blocks, 1);
  EXPECT_EQ(p.protect_slots, 64);  // half the budget is the recent part
  EXPECT_EQ(p.window_slots, 0);    // every query scores
  h2o.h2o_recent_fraction = 0.9;   // 116 recent + 16 dropped > 128
  EXPECT_FALSE(PlanKvEviction(h2o, 16, 1024).ok());
  h2o.h2o_recent_fraction = 1.0;
  EXPECT_FALSE(PlanKvEviction(h2o, 16, 1024).ok());
  KvEvictionConfig snap{.policy = KvEvictionPolicy::kSnapKV, .budget_tokens = 128};
  const KvEvictionPlan q = *PlanKvEviction(snap, 16, 1024);
  EXPECT_EQ(q.drop_blocks, 2);  // the default batch grows to the window (32)
  EXPECT_EQ(q.protect_slots, 32);
  EXPECT_EQ(q.window_slots, 32);
  EXPECT_EQ(q.pool_kernel, 5);
  snap.evict_batch_tokens = 16;  // a window longer than the batch would mix two windows
  EXPECT_FALSE(PlanKvEviction(snap, 16, 1024).ok());
  snap.evict_batch_tokens = 0;
  snap.snapkv_window = 0;
  EXPECT_FALSE(PlanKvEviction(snap, 16, 1024).ok());
}

// Exact slot lists: budget 8 slots in blocks of 2, dropping one block (2 tokens) at a time.
TEST(KvEvictionPlanTest, SelectKeptSlotsDropsTheLowestScoresOutsideTheProtectedSlots) {
  KvEvictionPlan h2o{.budget_blocks = 4, .drop_blocks = 1, .by_score = true, .protect_slots = 3};
  std::vector<int32_t> kept;
  // Candidates are slots 0-4; the two lowest (slots 1 and 3) go even though slot 7 is lower.
  SelectKeptSlots(h2o, 2, std::vector<int64_t>{9, 1, 5, 2, 8, 7, 6, 0}, &kept);
  EXPECT_EQ(kept, (std::vector<int32_t>{0, 2, 4, 5, 6, 7}));
  // Ties: the older goes first.
  SelectKeptSlots(h2o, 2, std::vector<int64_t>{4, 4, 4, 4, 4, 0, 0, 0}, &kept);
  EXPECT_EQ(kept, (std::vector<int32_t>{2, 3, 4, 5, 6, 7}));
  // SnapKV: max-pooled over 3 neighbours, a low slot next to a high one survives.
  KvEvictionPlan snap = h2o;
  snap.pool_kernel = 3;
  snap.window_slots = 3;
  SelectKeptSlots(snap, 2, std::vector<int64_t>{1, 9, 1, 2, 3, 0, 0, 0}, &kept);
  // pooled candidates: {9, 9, 9, 3, 3}: slots 3 and 4 go.
  EXPECT_EQ(kept, (std::vector<int32_t>{0, 1, 2, 5, 6, 7}));
}

TEST_F(SchedulerEvictionTest, APromptLongerThanTheBudgetIsChunkedAtTheBudgetAndEvictsBetween) {
  Init(16, 64, 8, true, /*max_model_len=*/32);
  AddEvicting(1, Range(0, 30), 40);  // 70 tokens past a model length of 32: allowed
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 16, false}}));  // up to the budget
  EXPECT_TRUE(Evictions().empty());
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 8, false}}));   // blocks 1-2 go, 8 slots free
  EXPECT_EQ(Evictions(), (std::vector<std::pair<int, int>>{{8, 1}}));
  EXPECT_EQ(last_.seqs[0].num_evicted, 8);
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 6, true}}));    // evicts again, then the rest
  EXPECT_EQ(Evictions(), (std::vector<std::pair<int, int>>{{8, 1}}));
  EXPECT_EQ(last_.seqs[0].num_evicted, 16);
  EXPECT_EQ(kv_->evicted_tokens(SeqId(1)), 16);
  // Decodes: 14 slots held, two more fit, then the next eviction.
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 1, true}}));
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 1, true}}));
  EXPECT_TRUE(Evictions().empty());
  EXPECT_EQ(Step(), (std::vector<Planned>{{1, 1, true}}));
  EXPECT_EQ(Evictions(), (std::vector<std::pair<int, int>>{{8, 1}}));
  EXPECT_LE(kv_->block_table(SeqId(1)).size(), 4u);
}

TEST_F(SchedulerEvictionTest, EvictionPointsDoNotDependOnTheChunkSize) {
  // The same sequence with token budgets of 3 and 64 per step evicts at the same token counts.
  std::vector<std::vector<int>> points;
  for (int budget : {3, 64}) {
    Init(16, budget, 8, false, 32);
    AddEvicting(1, Range(0, 40), 30);
    std::vector<int> at;
    while (sched_->HasWork() && sched_->num_computed(SeqId(1)) < 69) {
      const int before = sched_->num_computed(SeqId(1));
      Step();
      if (!last_.evictions.empty()) at.push_back(before);
      EXPECT_LE(static_cast<int>(kv_->block_table(SeqId(1)).size()), 4);
    }
    points.push_back(at);
  }
  EXPECT_EQ(points[0], points[1]);
  EXPECT_EQ(points[0], (std::vector<int>{16, 24, 32, 40, 48, 56, 64}));
}

TEST_F(SchedulerEvictionTest, APreemptedSequenceRecomputesThroughTheSameEvictions) {
  // Sequence 1 evicts (priority 0); sequence 2 (priority 5) grows until sequence 1 must go.
  Init(6, 64, 8, true, 32);
  AddEvicting(1, Range(0, 20), 30);
  Add(2, Range(500, 7), 5, 12);
  // Whenever sequence 1 holds KV, its evictions are those of its computed count alone:
  // none up to 16 tokens, then 8 more for every 8 tokens past 16.
  const auto expected_evicted = [](int n) { return n <= 16 ? 0 : 8 * ((n - 16 + 7) / 8); };
  bool resumed = false;
  for (int i = 0; i < 200 && sched_->HasWork(); ++i) {
    const int64_t preemptions = sched_->num_preemptions();
    Step();
    if (sched_->num_preemptions() > preemptions) resumed = true;
    if (kv_->is_live(SeqId(1))) {
      EXPECT_EQ(kv_->evicted_tokens(SeqId(1)), expected_evicted(sched_->num_computed(SeqId(1))));
      EXPECT_LE(kv_->block_table(SeqId(1)).size(), 4u);
    }
    for (auto [id, total] : {std::pair{1, 50}, std::pair{2, 19}}) {
      if (sched_->Contains(SeqId(id)) && static_cast<int>(sched_->tokens(SeqId(id)).size()) >= total) {
        sched_->Remove(SeqId(id));
      }
    }
  }
  EXPECT_TRUE(resumed);
  EXPECT_FALSE(sched_->HasWork());
  kv_->CheckInvariants();
  EXPECT_EQ(kv_->stats().num_in_use, 0);
}

TEST_F(SchedulerEvictionTest, DraftsStayWithinTheBudget) {
  Init(16, 64, 8, false, 32);
  AddEvicting(1, Range(0, 12), 20);
  Step();  // 12 slots computed, a token sampled: 13 tokens, 12 slots
  sched_->SetDraft(SeqId(1), {1, 2, 3, 4, 5});
  Step();
  // The decode token and 3 drafts fill slots 12..15; the other drafts are dropped.
  ASSERT_EQ(last_.seqs.size(), 1u);
  EXPECT_EQ(last_.seqs[0].num_draft, 3);
  sched_->FinishVerify(SeqId(1), 0);
  kv_->CheckInvariants();
}

}  // namespace
}  // namespace kvserve
