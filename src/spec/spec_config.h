// SpecConfig: speculative decoding's settings, parsed from the JSON object of
// --speculative-config (vLLM's shape):
//   {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
//   {"method": "draft_model", "model": "draft.gguf", "num_speculative_tokens": 5}
// Keys of ours: "adaptive" (default true: the engine picks each step's draft lengths from the
// acceptance it measures and the step cost model, up to num_speculative_tokens; false always
// drafts num_speculative_tokens when a proposal exists).
// An unknown key or method is an error that names it, never ignored.
#pragma once

#include <string>
#include <string_view>

#include "kvserve/status.h"

namespace kvserve {

enum class SpecMethod { kNone, kNgram, kDraftModel };

struct SpecConfig {
  SpecMethod method = SpecMethod::kNone;
  int num_speculative_tokens = 5;  // most drafts verified per sequence per step, 1..16
  int prompt_lookup_max = 4;       // n-gram: longest suffix matched
  int prompt_lookup_min = 2;       // n-gram: shortest suffix matched
  std::string draft_model;         // draft_model: GGUF path, same vocabulary as the target
  bool adaptive = true;

  bool enabled() const { return method != SpecMethod::kNone; }
};

inline constexpr int kMaxSpeculativeTokens = 16;

const char* SpecMethodName(SpecMethod m);  // "none", "ngram", "draft_model"
Result<SpecConfig> ParseSpecConfig(std::string_view json_text);

}  // namespace kvserve
