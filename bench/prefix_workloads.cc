#include "prefix_workloads.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "util/check.h"

namespace kvserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

// What an unbounded prefix cache would hold: every computed full block, keyed by its prefix.
class IdealCache {
 public:
  explicit IdealCache(int block_size) : bs_(block_size) {}
  int Match(const std::vector<TokenId>& tokens) const {
    const int max_blocks = (static_cast<int>(tokens.size()) - 1) / bs_;
    uint64_t h = kSeed;
    int hit = 0;
    for (int b = 0; b < max_blocks; ++b) {
      h = Extend(h, tokens, b);
      if (!seen_.count(h)) break;
      hit = (b + 1) * bs_;
    }
    return hit;
  }
  void Insert(const std::vector<TokenId>& tokens, int num_computed) {
    uint64_t h = kSeed;
    for (int b = 0; b < num_computed / bs_; ++b) seen_.insert(h = Extend(h, tokens, b));
  }

 private:
  static constexpr uint64_t kSeed = 1469598103934665603ull;
  uint64_t Extend(uint64_t h, const std::vector<TokenId>& t, int block) const {
    for (int i = block * bs_; i < (block + 1) * bs_; ++i) {
      h = (h ^ static_cast<uint32_t>(t[static_cast<size_t>(i)])) * 1099511628211ull;
    }
    return h;
  }
  int bs_;
  std::unordered_set<uint64_t> seen_;
};

std::vector<TokenId> RandomTokens(std::mt19937_64& rng, int n, int vocab) {
  std::uniform_int_distribution<int> d(3, vocab - 1);
  std::vector<TokenId> v(static_cast<size_t>(n));
  for (TokenId& t : v) t = d(rng);
  return v;
}

EngineRequest MakeRequest(std::vector<TokenId> prompt, int output_tokens) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0.f;
  r.max_tokens = output_tokens;
  r.ignore_eos = true;
  return r;
}

struct KvUse {
  int64_t allocated_slots = 0;  // slots of in-use blocks
  int64_t filled_slots = 0;     // of which hold a computed token (a shared block counts once)
  double waste() const {
    return allocated_slots > 0
               ? static_cast<double>(allocated_slots - filled_slots) / allocated_slots
               : 0.0;
  }
};

KvUse MeasureKv(const EngineCore& core) {
  const int bs = core.kv_manager().block_size();
  std::unordered_map<int32_t, int> fill;
  for (SeqId s : core.scheduler().running()) {
    const std::span<const BlockId> table = core.kv_manager().block_table(s);
    const int computed = core.scheduler().num_computed(s);
    for (size_t i = 0; i < table.size(); ++i) {
      const int f = std::clamp(computed - static_cast<int>(i) * bs, 0, bs);
      int& x = fill[table[i].value()];
      x = std::max(x, f);
    }
  }
  KvUse use;
  use.allocated_slots = static_cast<int64_t>(core.kv_manager().stats().num_in_use) * bs;
  for (const auto& [b, f] : fill) use.filled_slots += f;
  return use;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

// Steps the core until nothing is left; `on_finish(id, output tokens)` may add requests.
struct Driver {
  EngineCore& core;
  std::vector<double> ttft_s;
  int64_t output_tokens = 0;
  int num_requests = 0;
  KvUse peak;              // at the step with the most allocated slots
  double max_waste = 0;    // the largest ratio seen after any step
  std::map<int64_t, std::vector<TokenId>> tokens;

  void Run(const std::function<void(RequestId, const std::vector<TokenId>&)>& on_finish) {
    std::vector<RequestOutput> events;
    while (core.HasWork()) {
      const Status st = core.Step(&events);
      KV_CHECK(st.ok(), "step failed: {}", st.ToString());
      const KvUse use = MeasureKv(core);
      if (use.allocated_slots > peak.allocated_slots) peak = use;
      max_waste = std::max(max_waste, use.waste());
      for (RequestOutput& e : events) {
        auto& ids = tokens[e.id.value()];
        ids.insert(ids.end(), e.new_tokens.begin(), e.new_tokens.end());
        if (!e.request_finished) continue;
        KV_CHECK(e.finish_reason != FinishReason::kError, "request failed: {}",
                 e.error.ToString());
        ttft_s.push_back(e.metrics.ttft_seconds);
        output_tokens += e.metrics.generated_tokens;
        ++num_requests;
        const std::vector<TokenId> out = std::move(ids);
        tokens.erase(e.id.value());
        if (on_finish) on_finish(e.id, out);
      }
      events.clear();
    }
  }
};

RunResult Finish(const char* name, EngineCore& core, const Driver& d, Clock::time_point t0,
                 int64_t ideal_hit, int64_t prompt_tokens) {
  RunResult r;
  r.workload = name;
  r.prefix_caching = core.config().enable_prefix_caching;
  r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  r.num_requests = d.num_requests;
  r.ttft_p50_ms = 1e3 * Percentile(d.ttft_s, 0.5);
  r.ttft_p90_ms = 1e3 * Percentile(d.ttft_s, 0.9);
  r.requests_per_s = d.num_requests / r.wall_s;
  r.output_tokens_per_s = static_cast<double>(d.output_tokens) / r.wall_s;
  const EngineStats st = core.stats();
  r.hit_rate = st.kv.query_tokens > 0
                   ? static_cast<double>(st.kv.hit_tokens) / static_cast<double>(st.kv.query_tokens)
                   : 0.0;
  r.ideal_hit_rate = static_cast<double>(ideal_hit) / static_cast<double>(prompt_tokens);
  r.peak_waste = d.peak.waste();
  r.max_waste = d.max_waste;
  r.preemptions = st.num_preemptions;
  r.evicted_blocks = st.kv.evicted_blocks;
  return r;
}

}  // namespace

RunResult RunGroups(EngineCore& core, const WorkloadSpec& spec) {
  const int vocab = core.model().config().vocab;
  std::mt19937_64 rng(spec.seed);
  IdealCache ideal(core.kv_manager().block_size());
  int64_t ideal_hit = 0, prompt_tokens = 0;
  const Clock::time_point t0 = Clock::now();
  int64_t next_id = 0;
  for (int g = 0; g < spec.groups; ++g) {
    const std::vector<TokenId> system = RandomTokens(rng, spec.system_tokens, vocab);
    for (int p = 0; p < spec.prompts; ++p) {
      std::vector<TokenId> prompt = system;
      const std::vector<TokenId> q = RandomTokens(rng, spec.question_tokens, vocab);
      prompt.insert(prompt.end(), q.begin(), q.end());
      ideal_hit += ideal.Match(prompt);
      ideal.Insert(prompt, static_cast<int>(prompt.size()));
      prompt_tokens += static_cast<int64_t>(prompt.size());
      const Status st = core.Add(RequestId(next_id++), MakeRequest(prompt, spec.output_tokens), t0);
      KV_CHECK(st.ok(), "{}", st.ToString());
    }
  }
  Driver d{core};
  d.Run(nullptr);
  return Finish("groups", core, d, t0, ideal_hit, prompt_tokens);
}

RunResult RunMultiTurn(EngineCore& core, const WorkloadSpec& spec) {
  const int vocab = core.model().config().vocab;
  std::mt19937_64 rng(spec.seed + 1);
  IdealCache ideal(core.kv_manager().block_size());
  int64_t ideal_hit = 0, prompt_tokens = 0;
  struct Conversation {
    std::vector<TokenId> history, prompt;
    int round = 0;
  };
  std::vector<Conversation> convs(static_cast<size_t>(spec.conversations));
  std::map<int64_t, size_t> conv_of;
  int64_t next_id = 0;
  auto send = [&](size_t c) {
    Conversation& cv = convs[c];
    cv.prompt = cv.history;
    const std::vector<TokenId> msg = RandomTokens(rng, spec.question_tokens, vocab);
    cv.prompt.insert(cv.prompt.end(), msg.begin(), msg.end());
    ideal_hit += ideal.Match(cv.prompt);
    prompt_tokens += static_cast<int64_t>(cv.prompt.size());
    conv_of[next_id] = c;
    const Status st = core.Add(RequestId(next_id++), MakeRequest(cv.prompt, spec.output_tokens));
    KV_CHECK(st.ok(), "{}", st.ToString());
  };
  const Clock::time_point t0 = Clock::now();
  for (size_t c = 0; c < convs.size(); ++c) {
    convs[c].history = RandomTokens(rng, spec.opening_tokens, vocab);
    send(c);
  }
  Driver d{core};
  d.Run([&](RequestId id, const std::vector<TokenId>& out) {
    Conversation& cv = convs[conv_of.at(id.value())];
    cv.history = cv.prompt;
    cv.history.insert(cv.history.end(), out.begin(), out.end());
    // The answer's last token was never run through the model: it has no K/V.
    ideal.Insert(cv.history, static_cast<int>(cv.history.size()) - 1);
    if (++cv.round < spec.rounds) send(conv_of.at(id.value()));
  });
  return Finish("multiturn", core, d, t0, ideal_hit, prompt_tokens);
}

}  // namespace kvserve::bench
