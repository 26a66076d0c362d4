// Engine and EngineCore as a specification: batched, chunked, prefix-cached greedy output equals
// the output of each request run alone; accounting is exact; every block comes back.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <numeric>
#include <thread>

#include "engine/engine_core.h"
#include "engine_test_util.h"
#include "util/byte_size.h"

namespace kvserve {
namespace {
// The test executables are unity builds: this file's helpers stay apart from its neighbours'.
namespace engine_test {

using testing_util::Greedy;
using testing_util::MakeCore;
using testing_util::Reference;
using testing_util::SmallConfig;
using testing_util::TinyModel;

std::vector<TokenId> Prompt(int seed, int n) {
  std::vector<TokenId> p;
  for (int i = 0; i < n; ++i) p.push_back(3 + (seed * 37 + i * 53) % 290);
  return p;
}


std::pair<int64_t, int> Key(int64_t id, int index) { return {id, index}; }

struct Collected {
  std::map<std::pair<int64_t, int>, std::vector<TokenId>> tokens;  // (request, index) -> ids
  std::map<std::pair<int64_t, int>, RequestOutput> finals;
};

void Collect(std::vector<RequestOutput>& events, Collected* c) {
  for (RequestOutput& e : events) {
    auto key = std::make_pair(e.id.value(), e.index);
    auto& ids = c->tokens[key];
    ids.insert(ids.end(), e.new_tokens.begin(), e.new_tokens.end());
    if (e.finished) c->finals[key] = e;
  }
  events.clear();
}

void RunToEnd(EngineCore& core, Collected* c) {
  std::vector<RequestOutput> events;
  while (core.HasWork()) {
    ASSERT_TRUE(core.Step(&events).ok());
    core.CheckInvariants();
  }
  Collect(events, c);
}

TEST(EngineCore, BatchedChunkedGreedyOutputEqualsEachRequestRunAlone) {
  auto core = MakeCore(SmallConfig());
  Reference ref;
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(core->Add(RequestId(i), Greedy(Prompt(i, 10 + 13 * i), 9)).ok());
  Collected c;
  RunToEnd(*core, &c);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(c.tokens[Key(i, 0)], ref.Greedy(Prompt(i, 10 + 13 * i), 9)) << "request " << i;
    EXPECT_EQ(c.finals[Key(i, 0)].finish_reason, FinishReason::kLength);
    EXPECT_TRUE(c.finals[Key(i, 0)].request_finished);
  }
  const EngineStats st = core->stats();
  EXPECT_EQ(st.kv.num_in_use, 0);
  EXPECT_EQ(st.kv.num_free + st.kv.num_cached, st.kv.num_blocks);
}

TEST(EngineCore, ASharedPrefixIsComputedOnceAndReportedAsCached) {
  auto core = MakeCore(SmallConfig());
  Reference ref;
  std::vector<TokenId> first = Prompt(1, 40);
  std::vector<TokenId> second(first.begin(), first.begin() + 35);
  second.push_back(7);
  ASSERT_TRUE(core->Add(RequestId(1), Greedy(first, 5)).ok());
  Collected c;
  RunToEnd(*core, &c);
  ASSERT_TRUE(core->Add(RequestId(2), Greedy(second, 5)).ok());
  RunToEnd(*core, &c);
  const RequestMetrics& m1 = c.finals[Key(1, 0)].metrics;
  const RequestMetrics& m2 = c.finals[Key(2, 0)].metrics;
  EXPECT_EQ(m1.prompt_tokens, 40);
  EXPECT_EQ(m1.cached_tokens, 0);
  EXPECT_EQ(m1.computed_tokens, 40 + 4);  // the last generated token is never run
  EXPECT_EQ(m2.prompt_tokens, 36);
  EXPECT_EQ(m2.cached_tokens, 32);        // two full blocks of 16
  EXPECT_EQ(m2.computed_tokens, 4 + 4);
  EXPECT_EQ(c.tokens[Key(2, 0)], ref.Greedy(second, 5));
  EXPECT_EQ(core->stats().kv.hit_tokens, 32);
  EXPECT_EQ(core->stats().kv.query_tokens, 76);
}

TEST(EngineCore, TheNextTurnOfAConversationHitsTheGeneratedTokens) {
  auto core = MakeCore(SmallConfig());
  Reference ref;
  const std::vector<TokenId> turn1 = Prompt(2, 20);
  ASSERT_TRUE(core->Add(RequestId(1), Greedy(turn1, 16)).ok());
  Collected c;
  RunToEnd(*core, &c);
  std::vector<TokenId> turn2 = turn1;
  turn2.insert(turn2.end(), c.tokens[Key(1, 0)].begin(), c.tokens[Key(1, 0)].end());
  turn2.insert(turn2.end(), {5, 6, 7});
  ASSERT_TRUE(core->Add(RequestId(2), Greedy(turn2, 4)).ok());
  RunToEnd(*core, &c);
  // 20 prompt + 15 computed generated tokens = 35 slots: two full blocks were committed.
  EXPECT_EQ(c.finals[Key(2, 0)].metrics.cached_tokens, 32);
  EXPECT_EQ(c.tokens[Key(2, 0)], ref.Greedy(turn2, 4));
}

TEST(EngineCore, ParallelSamplesShareThePromptAndAllMatchGreedy) {
  auto core = MakeCore(SmallConfig());
  Reference ref;
  const std::vector<TokenId> prompt = Prompt(3, 37);  // 2 full blocks + a partial one
  ASSERT_TRUE(core->Add(RequestId(1), Greedy(prompt, 6, /*n=*/3)).ok());
  std::vector<RequestOutput> events;
  ASSERT_TRUE(core->Step(&events).ok());  // 37 tokens need a chunk of 48: prompt + fork
  // Three samples, but the two full prompt blocks are held once (ref 3 each), and each sample
  // has its own copy of the partial block: 2 + 3 blocks.
  EXPECT_EQ(core->stats().kv.num_in_use, 5);
  Collected c;
  Collect(events, &c);
  RunToEnd(*core, &c);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.tokens[Key(1, i)], ref.Greedy(prompt, 6)) << i;
  EXPECT_EQ(core->stats().kv.num_in_use, 0);
  EXPECT_EQ(core->num_live_requests(), 0);
}

TEST(EngineCore, StopIdsEndARequestAndCancelReleasesEverything) {
  auto core = MakeCore(SmallConfig());
  Reference ref;
  const std::vector<TokenId> prompt = Prompt(4, 12);
  const std::vector<TokenId> free_run = ref.Greedy(prompt, 8);
  EngineRequest stopping = Greedy(prompt, 8);
  stopping.stop_ids = {free_run[3]};
  ASSERT_TRUE(core->Add(RequestId(1), stopping).ok());
  ASSERT_TRUE(core->Add(RequestId(2), Greedy(Prompt(5, 30), 50)).ok());
  std::vector<RequestOutput> events;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(core->Step(&events).ok());
  core->Cancel(RequestId(2), &events);
  core->CheckInvariants();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().finish_reason, FinishReason::kCancelled);
  EXPECT_TRUE(events.back().request_finished);
  Collected c;
  Collect(events, &c);
  RunToEnd(*core, &c);
  EXPECT_EQ(c.finals[Key(1, 0)].finish_reason, FinishReason::kStop);
  EXPECT_EQ(c.tokens[Key(1, 0)], ref.Greedy(prompt, 8, stopping.stop_ids));
  EXPECT_EQ(core->stats().kv.num_in_use, 0);
}

TEST(EngineCore, RefusesWhatCouldNeverRunWithClearErrors) {
  EngineConfig config = SmallConfig();
  config.max_model_len = 100;
  config.num_blocks = 4;  // 64 slots
  auto core = MakeCore(config);
  const Status too_long = core->Add(RequestId(1), Greedy(Prompt(1, 90), 20));
  EXPECT_EQ(too_long.code(), StatusCode::kOutOfRange);
  const Status too_big = core->Add(RequestId(2), Greedy(Prompt(1, 60), 20));
  EXPECT_EQ(too_big.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(core->Add(RequestId(3), Greedy({1, 5000}, 2)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core->Add(RequestId(4), Greedy({1, 2}, 2, 99)).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(core->HasWork());
}

TEST(EngineCore, StreamsTextThatDecodesToTheGeneratedTokens) {
  auto file = GgufFile::FromBytes(testing_util::TinyModelBytes());
  ASSERT_TRUE(file.ok());
  auto tok = Tokenizer::FromGguf(*file);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto core_or = EngineCore::Create(TinyModel(64), SmallConfig(), &*tok);
  ASSERT_TRUE(core_or.ok());
  EngineRequest r = Greedy(Prompt(6, 9), 12);
  r.ignore_eos = true;
  ASSERT_TRUE((*core_or)->Add(RequestId(1), r).ok());
  std::vector<RequestOutput> events;
  while ((*core_or)->HasWork()) ASSERT_TRUE((*core_or)->Step(&events).ok());
  std::vector<TokenId> ids;
  std::string text;
  for (const RequestOutput& e : events) {
    ids.insert(ids.end(), e.new_tokens.begin(), e.new_tokens.end());
    text += e.text;
  }
  ASSERT_EQ(ids.size(), 12u);
  std::string expected = tok->Decode(ids, /*skip_special=*/true);
  // Decode may drop the first piece's leading space; the stream keeps every piece whole.
  if (!text.empty() && text[0] == ' ' && (expected.empty() || expected[0] != ' ')) {
    text.erase(0, 1);
  }
  EXPECT_EQ(text, expected);
}

// Runs one request to its end on a core with the tiny model's tokenizer; returns its events.
std::vector<RequestOutput> RunWithText(const EngineRequest& r) {
  auto file = GgufFile::FromBytes(testing_util::TinyModelBytes());
  EXPECT_TRUE(file.ok());
  static auto tok = Tokenizer::FromGguf(*file);
  EXPECT_TRUE(tok.ok());
  auto core = EngineCore::Create(TinyModel(64), SmallConfig(), &*tok);
  EXPECT_TRUE(core.ok());
  EXPECT_TRUE((*core)->Add(RequestId(1), r).ok());
  std::vector<RequestOutput> events;
  while ((*core)->HasWork()) EXPECT_TRUE((*core)->Step(&events).ok());
  return events;
}

std::string Text(const std::vector<RequestOutput>& events) {
  std::string text;
  for (const RequestOutput& e : events) text += e.text;
  return text;
}

TEST(EngineCore, AStopStringEndsTheTextJustBeforeItAndNothingOfItIsStreamedEarly) {
  EngineRequest r = Greedy(Prompt(6, 9), 24);
  r.ignore_eos = true;
  const std::string full = Text(RunWithText(r));
  ASSERT_GT(full.size(), 12u);
  // A stop string from the middle of the greedy text: the same run must end right before it.
  const std::string stop = full.substr(full.size() / 2, 4);
  const size_t at = full.find(stop);
  r.stop_strings = {"never appears \x01", stop};
  std::vector<RequestOutput> events = RunWithText(r);
  EXPECT_EQ(Text(events), full.substr(0, at));
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(events.back().finished);
  EXPECT_EQ(events.back().finish_reason, FinishReason::kStop);
  // Streamed text never ran ahead of the stop: every prefix streamed is a prefix of the result.
  std::string so_far;
  for (const RequestOutput& e : events) {
    so_far += e.text;
    EXPECT_EQ(full.substr(0, so_far.size()), so_far);
  }

  r.include_stop_str_in_output = true;
  EXPECT_EQ(Text(RunWithText(r)), full.substr(0, at + stop.size()));
}

TEST(EngineCore, ReportsTheRawLogprobOfEachTokenWithItsTopAlternatives) {
  EngineRequest r = Greedy(Prompt(3, 7), 5);
  r.ignore_eos = true;
  r.sampling.logprobs = true;
  r.sampling.top_logprobs = 3;
  int tokens = 0;
  for (const RequestOutput& e : RunWithText(r)) {
    ASSERT_EQ(e.logprobs.size(), e.new_tokens.size());
    for (size_t i = 0; i < e.logprobs.size(); ++i) {
      const SampleOutput& lp = e.logprobs[i];
      EXPECT_EQ(lp.token, e.new_tokens[i]);
      ASSERT_EQ(lp.top.size(), 3u);
      // Greedy picks the most likely raw token: its logprob is the top one.
      EXPECT_EQ(lp.top[0].id, lp.token);
      EXPECT_FLOAT_EQ(lp.top[0].logprob, lp.logprob);
      EXPECT_LE(lp.logprob, 0.f);
      EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
      ++tokens;
    }
  }
  EXPECT_EQ(tokens, 5);
  r.sampling.logprobs = false;
  r.sampling.top_logprobs = 0;
  for (const RequestOutput& e : RunWithText(r)) EXPECT_TRUE(e.logprobs.empty());
}

TEST(Engine, StreamsFromManyThreadsAndCancelsFromAnother) {
  EngineConfig config = SmallConfig();
  auto engine = Engine::Create(TinyModel(64), config);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  Reference ref;
  std::vector<std::vector<TokenId>> expected;
  for (int i = 0; i < 4; ++i) expected.push_back(ref.Greedy(Prompt(10 + i, 20 + i), 6));
  std::vector<std::vector<TokenId>> got(4);
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&, i] {
      auto stream = (*engine)->AddRequest(Greedy(Prompt(10 + i, 20 + i), 6));
      ASSERT_TRUE(stream.ok());
      RequestOutput e;
      while ((*stream)->Next(&e)) got[i].insert(got[i].end(), e.new_tokens.begin(), e.new_tokens.end());
      EXPECT_EQ(e.finish_reason, FinishReason::kLength);
    });
  }
  for (auto& t : clients) t.join();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], expected[i]) << i;
  // A long request, cancelled from this thread after its first token.
  auto stream = (*engine)->AddRequest(Greedy(Prompt(20, 30), 400));
  ASSERT_TRUE(stream.ok());
  RequestOutput e;
  ASSERT_TRUE((*stream)->Next(&e));
  (*engine)->Cancel((*stream)->id());
  while ((*stream)->Next(&e)) {
  }
  EXPECT_EQ(e.finish_reason, FinishReason::kCancelled);
  EXPECT_EQ((*engine)->stats().kv.num_in_use, 0);
  // Errors come back at once.
  EXPECT_EQ((*engine)->AddRequest(Greedy({}, 3)).status().code(), StatusCode::kInvalidArgument);
}

// Retention through the engine: a request's holds apply to its prompt when it ends, an
// explicit hold and its release reach the KV manager from another thread, greedy output is the
// same with holds as without, and a held prefix outlives traffic that evicts the rest.
TEST(Engine, HoldsKeepAPromptCachedUnderPressureAndExplicitHoldsComeAndGo) {
  EngineConfig config = SmallConfig();
  config.num_blocks = 24;  // 384 tokens
  config.max_retained_fraction = 0.5;
  auto now = std::make_shared<std::atomic<int64_t>>(1'000'000);
  config.clock_ms = [now] { return now->load(); };
  auto engine = Engine::Create(TinyModel(64), config);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  Reference ref;
  const auto run = [&](EngineRequest r) {
    auto stream = (*engine)->AddRequest(std::move(r));
    EXPECT_TRUE(stream.ok());
    RequestOutput e, last;
    std::vector<TokenId> out;
    while ((*stream)->Next(&e)) {
      out.insert(out.end(), e.new_tokens.begin(), e.new_tokens.end());
      last = e;
    }
    return std::make_pair(out, last);
  };
  const std::vector<TokenId> held = Prompt(30, 70);  // 4 full blocks
  EngineRequest first = Greedy(held, 4);
  first.holds.push_back(KvHold{70, 3'600'000});
  const auto [tokens, final_event] = run(std::move(first));
  EXPECT_EQ(tokens, ref.Greedy(held, 4));
  EXPECT_EQ(final_event.metrics.held_tokens, std::vector<int>{64});
  EXPECT_EQ((*engine)->stats().kv.num_held, 4);
  // Traffic that needs every unheld block evicts all but the held prefix.
  for (int i = 0; i < 8; ++i) run(Greedy(Prompt(40 + i, 100), 2));
  const auto [again, again_event] = run(Greedy(held, 4));
  EXPECT_EQ(again, ref.Greedy(held, 4));
  EXPECT_EQ(again_event.metrics.cached_tokens, 64);
  EXPECT_EQ(run(Greedy(Prompt(40, 100), 2)).second.metrics.cached_tokens, 0);
  // An explicit hold from another thread: refused past the share (12 blocks, 4 taken).
  Result<int> big = 0;
  const std::vector<TokenId> other = Prompt(50, 150);
  run(Greedy(other, 1));
  (*engine)->RunOnStepThread(
      [&](EngineCore& core) { big = core.HoldExplicit(9, other, "", now->load() + 1000); });
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  const std::vector<TokenId> part(other.begin(), other.begin() + 80);
  (*engine)->RunOnStepThread(
      [&](EngineCore& core) { big = core.HoldExplicit(9, part, "", now->load() + 1000); });
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_EQ(*big, 80);
  EXPECT_EQ((*engine)->stats().kv.num_held, 9);
  (*engine)->RunOnStepThread([](EngineCore& core) { core.ReleaseExplicit(9); });
  EXPECT_EQ((*engine)->stats().kv.num_held, 4);
  // An hour later the hold is over, and the next pressure evicts the prompt too.
  now->fetch_add(3'600'000);
  for (int i = 0; i < 8; ++i) run(Greedy(Prompt(60 + i, 100), 2));
  EXPECT_EQ((*engine)->stats().kv.num_held, 0);
  EXPECT_EQ(run(Greedy(held, 1)).second.metrics.cached_tokens, 0);
}

TEST(ByteSize, ParsesUnitsAsWritten) {
  EXPECT_EQ(*ParseByteSize("2GiB"), 2ull << 30);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512ull << 20);
  EXPECT_EQ(*ParseByteSize("1e9"), 1000000000ull);
  EXPECT_EQ(*ParseByteSize("1.5GB"), 1500000000ull);
  EXPECT_EQ(*ParseByteSize("64k"), 65536ull);
  EXPECT_EQ(*ParseByteSize("4096"), 4096ull);
  EXPECT_FALSE(ParseByteSize("lots").ok());
  EXPECT_FALSE(ParseByteSize("-1GiB").ok());
  EXPECT_FALSE(ParseByteSize("3 parsecs").ok());
}

}  // namespace engine_test
}  // namespace
}  // namespace kvserve
