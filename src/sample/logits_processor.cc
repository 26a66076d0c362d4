#include "sample/logits_processor.h"

#include <algorithm>

#include "util/check.h"

namespace kvserve {

RepetitionPenaltyProcessor::RepetitionPenaltyProcessor(float penalty, int last_n)
    : penalty_(penalty), last_n_(last_n) {
  KV_CHECK_GT(penalty, 0.0f);
  KV_CHECK_GE(last_n, -1);
  if (last_n > 0) window_.reserve(static_cast<size_t>(last_n));
}

void RepetitionPenaltyProcessor::Process(std::span<float> logits, const TokenHistory& history) {
  const int64_t total = history.size();
  const int64_t begin = last_n_ < 0 ? 0 : std::max<int64_t>(0, total - last_n_);
  window_.clear();
  for (int64_t i = begin; i < total; ++i) window_.push_back(history.at(i));
  std::sort(window_.begin(), window_.end());
  const auto end = std::unique(window_.begin(), window_.end());
  for (auto it = window_.begin(); it != end; ++it) {
    float& logit = logits[static_cast<size_t>(*it)];
    logit = logit > 0.0f ? logit / penalty_ : logit * penalty_;
  }
}

FrequencyPresencePenaltyProcessor::FrequencyPresencePenaltyProcessor(float frequency,
                                                                     float presence)
    : frequency_(frequency), presence_(presence) {}

void FrequencyPresencePenaltyProcessor::Process(std::span<float> logits,
                                                const TokenHistory& history) {
  for (TokenId t : history.distinct_generated()) {
    const auto count = static_cast<float>(history.generated_count(t));
    logits[static_cast<size_t>(t)] -= count * frequency_ + presence_;
  }
}

TemperatureProcessor::TemperatureProcessor(float temperature) : temperature_(temperature) {
  KV_CHECK_GT(temperature, 0.0f);
}

void TemperatureProcessor::Process(std::span<float> logits, const TokenHistory& /*history*/) {
  for (float& x : logits) x /= temperature_;  // divide, not multiply: exact for x / T
}

}  // namespace kvserve
