// SamplingParams: the per-request knobs of token sampling (OpenAI / vLLM / llama.cpp names).
//
// Contract: a plain value type; Validate() says which field is out of range and what range is
// allowed. Sampler::Create validates, so a Sampler never sees invalid params.
//
// Decisions worth knowing:
// - temperature must be >= 0 (negative is rejected, not treated as greedy); below
//   kGreedyTemperature (1e-5, vLLM's threshold too) it means greedy: argmax of the penalised
//   logits, ties broken by the lowest token id, no randomness, and top_k/top_p/min_p are ignored
//   (they cannot change an argmax). Dividing logits by a tinier temperature overflows them to
//   infinity, and sampling from that is noise, where a user expects the limit: greedy.
// - Penalties apply in greedy mode too (as in vLLM and llama.cpp).
// - Logprobs (logprobs / top_logprobs) are always those of the model's raw distribution:
//   log_softmax of the logits as they arrived, before penalties, temperature and truncation.
//   This is what the OpenAI API and vLLM report by default.
#pragma once

#include <cstdint>

#include "kvserve/status.h"

namespace kvserve {

struct SamplingParams {
  float temperature = 1.0f;  // >= 0; below kGreedyTemperature = greedy
  int32_t top_k = 0;         // >= 0; 0 = off
  float top_p = 1.0f;        // (0, 1]; 1 = off
  float min_p = 0.0f;        // [0, 1]; 0 = off; keeps p >= min_p * max p
  // CTRL-style: for each distinct token among the last penalty_last_n tokens of prompt+output,
  // a positive logit is divided by it and a negative one multiplied. > 0; 1 = off.
  float repetition_penalty = 1.0f;
  // OpenAI semantics over generated tokens only:
  // logit -= count * frequency_penalty + (count > 0) * presence_penalty. Both in [-2, 2].
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t penalty_last_n = 64;  // repetition-penalty window in tokens; -1 = whole history; 0 = off
  uint64_t seed = 0;            // used when has_seed; otherwise the RNG is seeded from the OS
  bool has_seed = false;
  int32_t top_logprobs = 0;  // 0..20 most likely alternatives (raw distribution) per step
  bool logprobs = false;     // report the chosen token's raw logprob

  static constexpr int32_t kMaxTopLogprobs = 20;
  static constexpr float kGreedyTemperature = 1e-5f;

  bool greedy() const { return temperature < kGreedyTemperature; }
  bool wants_logprobs() const { return logprobs || top_logprobs > 0; }

  // InvalidArgument naming the first bad field, its value and the allowed range.
  Status Validate() const;
};

}  // namespace kvserve
