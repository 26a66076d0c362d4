// Sampler: turns one logits row per step into one token for one sequence.
//
// Contract: one Sampler per sequence, used from one thread (the engine thread); move-only.
// It owns the sequence's TokenHistory, its processor chain and its RNG (std::mt19937_64, whose
// output the C++ standard fixes, so a seeded Sampler is reproducible across platforms and
// standard libraries). All scratch buffers are sized at Create; Sample() does not allocate,
// except the returned SampleOutput::top in the by-value overload (use the out-parameter
// overload to reuse it) and whatever an added processor does.
//
// One step, in order:
//   1. NaN -> -inf, +inf -> largest finite float (so no inf - inf appears later).
//   2. Chain: processors added with AddProcessorFirst (grammar masks), repetition penalty,
//      frequency/presence penalty, temperature, then processors added with AddProcessor, each
//      only when active. Step 1 is repeated after.
//   3. Greedy (temperature 0): argmax, ties -> lowest id. Otherwise:
//      candidates = tokens with logit > -inf; top-k (then sorted descending), top-p (sorts
//      descending first if needed), min-p (order kept); with neither top-k nor top-p the
//      candidates stay in ascending id order.
//      Draw: w_i = exp(l_i - max l) in double, in candidate order; u = (rng() >> 11) * 2^-53
//      (uniform in [0, 1) with 53 bits); the token is the first candidate whose running sum of
//      w exceeds u * sum(w).
//   4. If every logit is -inf after the chain, the result is the argmax of that row, which is
//      token 0 (ties -> lowest id): deterministic, never a crash.
//   5. Logprobs (only when params.wants_logprobs(), else logprob = 0 and top empty) are
//      log_softmax of the raw row from step 1, before penalties/temperature/truncation. `top`
//      holds the top_logprobs most likely raw tokens, descending, ties by lower id. When the
//      whole raw row is -inf every logprob is -inf.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "kvserve/status.h"
#include "sample/logits_processor.h"
#include "sample/sampling_params.h"
#include "sample/token_history.h"
#include "sample/truncation.h"

namespace kvserve {

struct TokenLogprob {
  TokenId id;
  float logprob;
};

struct SampleOutput {
  TokenId token = 0;
  float logprob = 0.0f;           // raw log_softmax of `token` (see header comment)
  std::vector<TokenLogprob> top;  // [top_logprobs] descending
};

class Sampler {
 public:
  // InvalidArgument if params fail Validate() or vocab_size <= 0.
  static Result<Sampler> Create(const SamplingParams& params, int vocab_size);

  Sampler(Sampler&&) noexcept = default;
  Sampler& operator=(Sampler&&) noexcept = default;
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Sets the prompt (for the repetition penalty window) and clears generated tokens.
  // REQUIRES: ids in [0, vocab_size).
  void SetPrompt(std::span<const TokenId> prompt);
  // logits: [vocab_size], modified in place. REQUIRES: logits.size() == vocab_size.
  SampleOutput Sample(std::span<float> logits);
  void Sample(std::span<float> logits, SampleOutput* out);
  // Appends a generated token (the sampled one, or a verified draft token) to the history.
  void Accept(TokenId token);
  // Appends a processor that runs after the built-in ones.
  void AddProcessor(std::unique_ptr<LogitsProcessor> processor);
  // Puts a processor before every other (a grammar mask: what it removes no penalty or
  // truncation may bring back, and the rest of the chain sees only allowed tokens).
  void AddProcessorFirst(std::unique_ptr<LogitsProcessor> processor);

  const SamplingParams& params() const { return params_; }
  const TokenHistory& history() const { return history_; }
  int vocab_size() const { return history_.vocab_size(); }

 private:
  Sampler(const SamplingParams& params, int vocab_size, uint64_t seed);
  TokenId SampleRandom(std::span<const float> logits);
  size_t Truncate(size_t num_candidates);
  TokenId Draw(size_t num_candidates);
  void FillLogprobs(TokenId token, SampleOutput* out) const;

  SamplingParams params_;
  TokenHistory history_;
  std::vector<std::unique_ptr<LogitsProcessor>> chain_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;  // [vocab_size] scratch
  std::vector<float> raw_logits_;      // [vocab_size] raw row copy; empty unless logprobs wanted
};

// log(sum(exp(x))) over the row, in double; -inf for an all -inf row. REQUIRES: no NaN,
// non-empty.
double LogSumExp(std::span<const float> logits);

// Index of the largest value, ties -> lowest index; 0 for an all -inf row. REQUIRES: no NaN,
// non-empty.
TokenId Argmax(std::span<const float> logits);

}  // namespace kvserve
