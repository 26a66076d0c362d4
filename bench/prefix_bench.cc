// kvserve_prefix_bench: how much the radix prefix cache saves on prefix-heavy workloads, in
// process, with prefix caching on and off. See prefix_workloads.h for the workloads and what
// each column means.
//
//   kvserve_prefix_bench --model m.gguf --threads 2 [--groups 4 --prompts 8 --system 1024
//     --question 32 --output 32 --conversations 4 --rounds 4 --opening 512
//     --kv-cache-memory 2GiB --workload all]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "engine/synthetic_model.h"
#include "prefix_workloads.h"
#include "util/byte_size.h"

namespace kvserve::bench {
namespace {

struct Options {
  std::string model;  // empty = the embedded default synthetic model
  std::string workload = "all";
  int threads = 2;
  std::string kv_cache_memory = "2GiB";
  int num_blocks = 0;
  int block_size = 16;
  int max_num_seqs = 32;
  int max_num_batched_tokens = 512;
  std::string eviction_policy = "lru";
  int max_model_len = 0;           // 0 = the model's context length
  bool only_caching_on = false;    // --enable-prefix-caching: run the caching-on side only
  bool only_caching_off = false;   // --no-prefix-caching: run the caching-off side only
  WorkloadSpec spec;
};

Result<std::unique_ptr<EngineCore>> MakeCore(const Options& o, bool caching) {
  KV_ASSIGN_OR_RETURN(GgufFile file, OpenModelOrDefault(o.model));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                      Model::Load(std::move(file), ModelOptions{o.max_num_batched_tokens, 0}));
  EngineConfig c;
  c.num_threads = o.threads;
  c.block_size = o.block_size;
  KV_ASSIGN_OR_RETURN(c.kv_cache_memory_bytes, ParseByteSize(o.kv_cache_memory));
  c.num_blocks = o.num_blocks;
  c.enable_prefix_caching = caching;
  c.max_num_seqs = o.max_num_seqs;
  c.max_num_batched_tokens = o.max_num_batched_tokens;
  c.max_model_len = o.max_model_len;
  KV_ASSIGN_OR_RETURN(c.eviction_policy, ParseEvictionPolicy(o.eviction_policy));
  return EngineCore::Create(std::move(model), c);
}

void PrintRow(const RunResult& r, const std::string& label) {
  std::printf("%-26s %-4s %5d %10.1f %10.1f %8.2f %9.1f %6.1f %7.1f %6.2f %6.2f %8lld %8lld\n",
              label.c_str(), r.prefix_caching ? "on" : "off", r.num_requests, r.ttft_p50_ms,
              r.ttft_p90_ms, r.requests_per_s, r.output_tokens_per_s, 100 * r.hit_rate,
              100 * r.ideal_hit_rate, 100 * r.peak_waste, 100 * r.max_waste,
              static_cast<long long>(r.preemptions),
              static_cast<long long>(r.evicted_blocks));
  std::fflush(stdout);
}

void PrintGains(const RunResult& on, const RunResult& off) {
  std::printf("  %s: caching on vs off: median TTFT %.2fx lower, requests/s %.2fx, "
              "hit rate %.1f%% vs ideal %.1f%%\n",
              on.workload.c_str(), off.ttft_p50_ms / std::max(on.ttft_p50_ms, 1e-9),
              on.requests_per_s / std::max(off.requests_per_s, 1e-9), 100 * on.hit_rate,
              100 * on.ideal_hit_rate);
}

int Run(const Options& o) {
  const WorkloadSpec& s = o.spec;
  if (auto probe = MakeCore(o, true); !probe.ok()) {  // bad options fail before any output
    std::fprintf(stderr, "error: %s\n", probe.status().ToString().c_str());
    return 1;
  }
  std::printf("%-26s %-4s %5s %10s %10s %8s %9s %6s %7s %6s %6s %8s %8s\n", "workload", "pc",
              "reqs", "ttft50_ms", "ttft90_ms", "req/s", "out_tok/s", "hit%", "ideal%", "waste%",
              "maxw%", "preempt", "evicted");
  std::vector<std::pair<RunResult, RunResult>> gains;
  for (const char* w : {"groups", "multiturn"}) {
    if (o.workload != "all" && o.workload != w) continue;
    const bool groups = std::string(w) == "groups";
    const std::string label =
        groups ? fmt::format("groups {}x{} S{} Q{} O{}", s.groups, s.prompts, s.system_tokens,
                             s.question_tokens, s.output_tokens)
               : fmt::format("multiturn {}x{} T{} Q{} O{}", s.conversations, s.rounds,
                             s.opening_tokens, s.question_tokens, s.output_tokens);
    RunResult results[2];
    for (int caching = 1; caching >= 0; --caching) {
      if ((caching == 1 && o.only_caching_off) || (caching == 0 && o.only_caching_on)) continue;
      auto core = MakeCore(o, caching == 1);
      if (!core.ok()) {
        std::fprintf(stderr, "error: %s\n", core.status().ToString().c_str());
        return 1;
      }
      results[caching] = groups ? RunGroups(**core, s) : RunMultiTurn(**core, s);
      PrintRow(results[caching], label);
    }
    if (!o.only_caching_on && !o.only_caching_off) gains.emplace_back(results[1], results[0]);
  }
  for (const auto& [on, off] : gains) PrintGains(on, off);
  return 0;
}

}  // namespace
}  // namespace kvserve::bench

int main(int argc, char** argv) {
  kvserve::bench::Options o;
  CLI::App app{"Prefix-cache benchmark: shared-prefix groups and multi-turn conversations"};
  app.add_option("--model", o.model, "GGUF model (default: the embedded synthetic model)");
  app.add_option("--workload", o.workload, "groups, multiturn or all")
      ->check(CLI::IsMember({"groups", "multiturn", "all"}));
  app.add_option("--threads", o.threads, "Compute threads");
  app.add_option("--kv-cache-memory", o.kv_cache_memory, "KV cache budget, e.g. 2GiB, 512MiB");
  app.add_option("--num-blocks", o.num_blocks, "KV blocks (overrides --kv-cache-memory)");
  app.add_option("--block-size", o.block_size, "Tokens per KV block");
  app.add_option("--max-num-seqs", o.max_num_seqs, "Running sequences per step");
  app.add_option("--max-num-batched-tokens", o.max_num_batched_tokens, "Tokens per step");
  app.add_option("--eviction-policy", o.eviction_policy, "lru, lfu or priority");
  app.add_option("--max-model-len", o.max_model_len, "Most tokens per request (0: the model's)");
  auto* on = app.add_flag("--enable-prefix-caching", o.only_caching_on,
                          "Run only with prefix caching (default: both sides)");
  auto* off = app.add_flag("--no-prefix-caching", o.only_caching_off,
                           "Run only without prefix caching (default: both sides)");
  on->excludes(off);
  app.add_option("--groups,-G", o.spec.groups, "Shared-prefix groups");
  app.add_option("--prompts,-P", o.spec.prompts, "Prompts per group");
  app.add_option("--system,-S", o.spec.system_tokens, "Shared system prompt tokens");
  app.add_option("--question,-Q", o.spec.question_tokens, "Question / user message tokens");
  app.add_option("--output,-O", o.spec.output_tokens, "Output tokens per request");
  app.add_option("--conversations,-C", o.spec.conversations, "Conversations");
  app.add_option("--rounds,-R", o.spec.rounds, "Rounds per conversation");
  app.add_option("--opening,-T", o.spec.opening_tokens, "First-round context tokens");
  app.add_option("--seed", o.spec.seed, "Seed of the random prompts");
  CLI11_PARSE(app, argc, argv);
  return kvserve::bench::Run(o);
}
