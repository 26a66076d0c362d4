// Prefix-cache workloads for kvserve_prefix_bench, driven in process on an EngineCore (one
// thread steps it; requests arrive as the workload says, times are wall-clock).
//
//   groups:    G groups x P prompts; a prompt = the group's S-token system prompt + a Q-token
//              question; all G*P requests arrive at once; O output tokens each.
//   multiturn: C conversations x R rounds; round 1 sends a T-token opening + Q-token message,
//              round r sends the whole history (every earlier prompt and answer) + a new Q-token
//              message; a conversation sends its next round as soon as its answer is complete.
//
// Reported per run: time to first token (median, p90), requests/s and output tokens/s over the
// run's wall time, the prefix cache's measured hit rate (hit / query tokens) beside the ideal
// one (what an unbounded cache of every earlier request's computed tokens would give, in full
// blocks, at least the last prompt token computed), and KV waste = (slots in allocated blocks -
// slots holding a computed token) / slots in allocated blocks, a shared block counted once:
// "peak" at the step where the most slots were allocated, "max" the largest ratio after any
// step (a few short sequences alone can make that ratio large while little memory is in use).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_core.h"

namespace kvserve::bench {

struct WorkloadSpec {
  int groups = 4, prompts = 8, system_tokens = 1024, question_tokens = 32;
  int conversations = 4, rounds = 4, opening_tokens = 512;
  int output_tokens = 32;
  uint64_t seed = 1;
};

struct RunResult {
  std::string workload;
  bool prefix_caching = false;
  int num_requests = 0;
  double ttft_p50_ms = 0, ttft_p90_ms = 0;
  double requests_per_s = 0, output_tokens_per_s = 0;
  double hit_rate = 0, ideal_hit_rate = 0;
  double peak_waste = 0, max_waste = 0;
  int64_t preemptions = 0, evicted_blocks = 0;
  double wall_s = 0;
};

RunResult RunGroups(EngineCore& core, const WorkloadSpec& spec);
RunResult RunMultiTurn(EngineCore& core, const WorkloadSpec& spec);

}  // namespace kvserve::bench
