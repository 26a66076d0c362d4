// LogitsProcessor: one step of the chain that turns a model's logits row into the logits that
// are sampled from. Penalties and temperature live here; grammar masks (structured/) will too.
//
// Contract: Process() modifies logits over the whole vocabulary in place and must not allocate
// after the first call (keep scratch in the object). A processor belongs to one Sampler and is
// called from one thread. Logits entering the chain never contain NaN (the Sampler maps NaN to
// -inf first); a processor may produce -inf (masked) but never NaN.
#pragma once

#include <span>
#include <vector>

#include "sample/token_history.h"

namespace kvserve {

class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  // logits: [vocab_size]. REQUIRES: logits.size() == history.vocab_size().
  virtual void Process(std::span<float> logits, const TokenHistory& history) = 0;
};

// CTRL repetition penalty (Keskar et al. 2019): for each distinct token among the last
// last_n tokens of prompt + generated (-1 = all), logit > 0 ? logit / penalty : logit * penalty.
// Each token is penalised once however often it occurs. Cost O(last_n log last_n) per step.
class RepetitionPenaltyProcessor final : public LogitsProcessor {
 public:
  RepetitionPenaltyProcessor(float penalty, int last_n);
  void Process(std::span<float> logits, const TokenHistory& history) override;

 private:
  float penalty_;
  int last_n_;
  std::vector<TokenId> window_;  // scratch: distinct ids of the window
};

// OpenAI frequency/presence penalties over generated tokens only:
// logit[t] -= count[t] * frequency + (count[t] > 0) * presence. O(distinct generated) per step.
class FrequencyPresencePenaltyProcessor final : public LogitsProcessor {
 public:
  FrequencyPresencePenaltyProcessor(float frequency, float presence);
  void Process(std::span<float> logits, const TokenHistory& history) override;

 private:
  float frequency_;
  float presence_;
};

// logit /= temperature. REQUIRES: temperature > 0.
class TemperatureProcessor final : public LogitsProcessor {
 public:
  explicit TemperatureProcessor(float temperature);
  void Process(std::span<float> logits, const TokenHistory& history) override;

 private:
  float temperature_;
};

}  // namespace kvserve
