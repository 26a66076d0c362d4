// kvserve_retention_bench: prompt-caching holds under pressure, in process. A few "agents" send,
// round after round, a long system prompt and a new question, and hold the system prompt (as a
// cache_control breakpoint does); between their rounds, unheld traffic from many reused prefix
// groups (Zipf popularity) competes for a cache too small for both. Run with holds off and on,
// alternating, on the same request sequence:
//   held hit %:    prompt tokens of the agents' requests found cached (rounds after the first);
//   unheld hit %:  the same for the unheld traffic: what it pays for the holds;
//   computed:      prompt tokens each class ran through the model;
//   ms/request:    mean wall time of one request of the class, run alone (TTFT + a few tokens;
//                  the mean, as hits and misses make two populations); ratios are of the
//                  medians over the runs.
//
//   kvserve_retention_bench [--num-blocks 256 --agents 4 --agent-system 448 --groups 48
//     --group-prefix 192 --rounds 12 --unheld-per-round 24 --runs 3]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_stats.h"
#include "engine/engine_core.h"
#include "engine/synthetic_model.h"

namespace kvserve::bench {
namespace {

struct Options {
  std::string model;  // empty = the embedded synthetic model
  int threads = 2;
  int num_blocks = 256;
  int block_size = 16;
  int agents = 4, agent_system = 448;
  int groups = 48, group_prefix = 192;
  double zipf = 1.0;
  int question = 16, output = 4;
  int rounds = 12, unheld_per_round = 24;
  double max_retained_fraction = 0.5;
  int runs = 3;
  uint64_t seed = 7;
};

struct Item {
  std::vector<TokenId> prompt;
  bool held = false;
  int held_tokens = 0;  // the agent's system prompt
  bool warm = false;    // an agent's request after its first round
};

struct ClassStats {
  int64_t prompt = 0, hit = 0, computed = 0;
  std::vector<double> ms;
  double hit_rate() const { return prompt > 0 ? 100.0 * hit / prompt : 0; }
};

struct RunStats {
  ClassStats held, unheld;
  int64_t evicted = 0;
  int max_held = 0;
};

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

std::vector<TokenId> RandomTokens(std::mt19937_64& rng, int n, int vocab) {
  std::uniform_int_distribution<int> d(3, vocab - 1);
  std::vector<TokenId> v(static_cast<size_t>(n));
  for (TokenId& t : v) t = d(rng);
  return v;
}

std::vector<Item> MakeWorkload(const Options& o, int vocab) {
  std::mt19937_64 rng(o.seed);
  std::vector<std::vector<TokenId>> systems, prefixes;
  for (int a = 0; a < o.agents; ++a) systems.push_back(RandomTokens(rng, o.agent_system, vocab));
  for (int g = 0; g < o.groups; ++g) prefixes.push_back(RandomTokens(rng, o.group_prefix, vocab));
  std::vector<double> weights;
  for (int g = 0; g < o.groups; ++g) weights.push_back(1.0 / std::pow(g + 1, o.zipf));
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  std::vector<Item> items;
  for (int r = 0; r < o.rounds; ++r) {
    for (int a = 0; a < o.agents; ++a) {
      Item it;
      it.prompt = systems[static_cast<size_t>(a)];
      const auto q = RandomTokens(rng, o.question, vocab);
      it.prompt.insert(it.prompt.end(), q.begin(), q.end());
      it.held = true;
      it.held_tokens = o.agent_system;
      it.warm = r > 0;
      items.push_back(std::move(it));
    }
    for (int u = 0; u < o.unheld_per_round; ++u) {
      Item it;
      it.prompt = prefixes[static_cast<size_t>(pick(rng))];
      const auto q = RandomTokens(rng, o.question, vocab);
      it.prompt.insert(it.prompt.end(), q.begin(), q.end());
      items.push_back(std::move(it));
    }
  }
  return items;
}

Result<RunStats> Run(const Options& o, const std::vector<Item>& items, bool holds) {
  KV_ASSIGN_OR_RETURN(GgufFile file, OpenModelOrDefault(o.model));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                      Model::Load(std::move(file), ModelOptions{512, 0}));
  EngineConfig c;
  c.num_threads = o.threads;
  c.block_size = o.block_size;
  c.num_blocks = o.num_blocks;
  c.max_num_batched_tokens = 512;
  c.max_retained_fraction = o.max_retained_fraction;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core, EngineCore::Create(std::move(model), c));
  RunStats st;
  int64_t id = 1;
  std::vector<RequestOutput> events;
  for (const Item& it : items) {
    EngineRequest r;
    r.prompt = it.prompt;
    r.sampling.temperature = 0.f;
    r.max_tokens = o.output;
    r.ignore_eos = true;
    if (holds && it.held) r.holds.push_back(KvHold{it.held_tokens, 3'600'000});
    const auto t0 = std::chrono::steady_clock::now();
    KV_RETURN_IF_ERROR(core->Add(RequestId(id++), std::move(r)));
    RequestMetrics m;
    while (core->HasWork()) {
      KV_RETURN_IF_ERROR(core->Step(&events));
      for (const RequestOutput& e : events) {
        if (e.request_finished) m = e.metrics;
      }
      events.clear();
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    st.max_held = std::max(st.max_held, core->stats().kv.num_held);
    if (it.held && !it.warm) continue;  // an agent's first round is cold either way
    ClassStats& cs = it.held ? st.held : st.unheld;
    cs.prompt += m.prompt_tokens;
    cs.hit += m.cached_tokens;
    cs.computed += m.prompt_tokens - m.cached_tokens;
    cs.ms.push_back(ms);
  }
  st.evicted = core->stats().kv.evicted_blocks;
  return st;
}

int Main(const Options& o) {
  auto file = OpenModelOrDefault(o.model);
  if (!file.ok()) {
    std::fprintf(stderr, "error: %s\n", file.status().ToString().c_str());
    return 1;
  }
  auto probe = Model::Load(std::move(file).value(), ModelOptions{512, 0});
  if (!probe.ok()) {
    std::fprintf(stderr, "error: %s\n", probe.status().ToString().c_str());
    return 1;
  }
  const std::vector<Item> items = MakeWorkload(o, (*probe)->config().vocab);
  fmt::print(
      "cache {} blocks of {} tokens; {} agents x {} system tokens held ({} blocks, "
      "retained share {:.0f}%); {} unheld groups x {} tokens, Zipf {}; {} rounds of {} + "
      "{} requests\n",
      o.num_blocks, o.block_size, o.agents, o.agent_system,
      o.agents * o.agent_system / o.block_size, 100 * o.max_retained_fraction, o.groups,
      o.group_prefix, o.zipf, o.rounds, o.agents, o.unheld_per_round);
  fmt::print("{:<6} {:>10} {:>12} {:>12} {:>14} {:>9} {:>9} {:>8} {:>8}\n", "holds", "held hit%",
             "unheld hit%", "held comp.", "unheld comp.", "held ms", "unheld ms", "evicted",
             "max held");
  std::vector<double> held_ms[2], unheld_ms[2];
  RunStats last[2];
  for (int run = 0; run < o.runs; ++run) {
    for (int holds : {0, 1}) {  // alternating sides
      auto st = Run(o, items, holds == 1);
      if (!st.ok()) {
        std::fprintf(stderr, "error: %s\n", st.status().ToString().c_str());
        return 1;
      }
      const double hm = Mean(st->held.ms), um = Mean(st->unheld.ms);
      held_ms[holds].push_back(hm);
      unheld_ms[holds].push_back(um);
      fmt::print("{:<6} {:>10.1f} {:>12.1f} {:>12} {:>14} {:>9.2f} {:>9.2f} {:>8} {:>8}\n",
                 holds ? "on" : "off", st->held.hit_rate(), st->unheld.hit_rate(),
                 st->held.computed, st->unheld.computed, hm, um, st->evicted, st->max_held);
      last[holds] = *st;
    }
  }
  fmt::print(
      "holds on vs off: held hit rate {:.1f}% -> {:.1f}%, held requests {:.2f}x the time; "
      "unheld hit rate {:.1f}% -> {:.1f}%, unheld prompt tokens computed {:.2f}x, unheld "
      "requests {:.2f}x the time (medians of {} runs)\n",
      last[0].held.hit_rate(), last[1].held.hit_rate(), Median(held_ms[1]) / Median(held_ms[0]),
      last[0].unheld.hit_rate(), last[1].unheld.hit_rate(),
      static_cast<double>(last[1].unheld.computed) / std::max<int64_t>(1, last[0].unheld.computed),
      Median(unheld_ms[1]) / Median(unheld_ms[0]), o.runs);
  return 0;
}

}  // namespace
}  // namespace kvserve::bench

int main(int argc, char** argv) {
  kvserve::bench::Options o;
  CLI::App app{"Prompt-caching holds under pressure: held agents against unheld traffic"};
  app.add_option("--model", o.model, "GGUF model (default: the embedded synthetic model)");
  app.add_option("--threads", o.threads, "Compute threads");
  app.add_option("--num-blocks", o.num_blocks, "KV blocks");
  app.add_option("--block-size", o.block_size, "Tokens per KV block");
  app.add_option("--agents", o.agents, "Agents whose system prompt is held");
  app.add_option("--agent-system", o.agent_system, "Tokens of each agent's system prompt");
  app.add_option("--groups", o.groups, "Unheld prefix groups");
  app.add_option("--group-prefix", o.group_prefix, "Tokens of each unheld group's prefix");
  app.add_option("--zipf", o.zipf, "Zipf exponent of the groups' popularity");
  app.add_option("--question", o.question, "Tokens of each request's own question");
  app.add_option("--output", o.output, "Output tokens per request");
  app.add_option("--rounds", o.rounds, "Rounds (each: every agent, then the unheld requests)");
  app.add_option("--unheld-per-round", o.unheld_per_round, "Unheld requests per round");
  app.add_option("--max-retained-fraction", o.max_retained_fraction, "Share holds may keep");
  app.add_option("--runs", o.runs, "Runs of each side, alternating");
  app.add_option("--seed", o.seed, "Seed of the random prompts");
  CLI11_PARSE(app, argc, argv);
  return kvserve::bench::Main(o);
}
