// Prompt text of a target token length.
//
// TextBuilder draws seeded random English words and adjusts how many it keeps until the
// TokenCounter (the server's /tokenize, or an estimate) says the text has the target number of
// tokens, or as close as whole words allow. It learns the tokens-per-word ratio as it goes, so
// after the first text most targets take one or two counter calls.
//
// Not thread-safe; build the workload before the run starts.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "kvserve/status.h"
#include "loadgen/random.h"

namespace kvserve::loadgen {

// Number of tokens in `text` without special tokens (no BOS), or an error.
using TokenCounter = std::function<Result<int>(std::string_view text)>;

// The estimate used when the server has no /tokenize: one token per 4 bytes, rounded up.
int EstimateTokens(std::string_view text);

struct BuiltText {
  std::string text;
  int num_tokens = 0;  // as the counter measured it
};

class TextBuilder {
 public:
  explicit TextBuilder(TokenCounter counter) : counter_(std::move(counter)) {}

  // Random words from `rng` whose token count is the closest to target_tokens the counter
  // allows (at or under it on a tie). target_tokens <= 0 gives the empty text.
  Result<BuiltText> Build(Rng& rng, int target_tokens);

  int num_counter_calls() const { return num_counter_calls_; }

 private:
  TokenCounter counter_;
  double tokens_per_word_ = 1.3;
  int num_counter_calls_ = 0;
};

}  // namespace kvserve::loadgen
