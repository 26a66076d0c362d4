#include "sample/sampling_params.h"

#include <fmt/format.h>

#include <cmath>

namespace kvserve {
namespace {

Status Bad(const char* field, float value, const char* allowed) {
  return InvalidArgument(
      fmt::format("sampling parameter {} = {} is out of range: {}", field, value, allowed));
}

}  // namespace

Status SamplingParams::Validate() const {
  // Comparisons are written so that NaN fails them.
  if (!(temperature >= 0.0f) || std::isinf(temperature)) {
    return Bad("temperature", temperature, "must be a finite number >= 0 (0 = greedy)");
  }
  if (top_k < 0) return Bad("top_k", static_cast<float>(top_k), "must be >= 0 (0 = off)");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return Bad("top_p", top_p, "must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return Bad("min_p", min_p, "must be in [0, 1]");
  if (!(repetition_penalty > 0.0f) || std::isinf(repetition_penalty)) {
    return Bad("repetition_penalty", repetition_penalty, "must be a finite number > 0 (1 = off)");
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return Bad("frequency_penalty", frequency_penalty, "must be in [-2, 2]");
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return Bad("presence_penalty", presence_penalty, "must be in [-2, 2]");
  }
  if (penalty_last_n < -1) {
    return Bad("penalty_last_n", static_cast<float>(penalty_last_n),
               "must be >= -1 (-1 = whole history, 0 = off)");
  }
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs) {
    return Bad("top_logprobs", static_cast<float>(top_logprobs), "must be in [0, 20]");
  }
  return Status::Ok();
}

}  // namespace kvserve
