#include "spec/spec_config.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace kvserve {

const char* SpecMethodName(SpecMethod m) {
  switch (m) {
    case SpecMethod::kNone: return "none";
    case SpecMethod::kNgram: return "ngram";
    case SpecMethod::kDraftModel: return "draft_model";
  }
  return "?";
}

namespace {

Status IntField(const nlohmann::json& j, const char* key, int lo, int hi, int* out) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Ok();
  if (!it->is_number_integer()) {
    return InvalidArgument(fmt::format("speculative config: '{}' must be an integer", key));
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return InvalidArgument(
        fmt::format("speculative config: '{}' = {} must be in [{}, {}]", key, v, lo, hi));
  }
  *out = static_cast<int>(v);
  return Status::Ok();
}

}  // namespace

Result<SpecConfig> ParseSpecConfig(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("speculative config must be a JSON object, e.g. "
                           "{\"method\": \"ngram\", \"num_speculative_tokens\": 5}");
  }
  static constexpr std::string_view kKeys[] = {"method", "num_speculative_tokens",
                                               "prompt_lookup_max", "prompt_lookup_min", "model",
                                               "adaptive"};
  for (const auto& [key, value] : j.items()) {
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys)) {
      return InvalidArgument(fmt::format(
          "speculative config: unknown key '{}' (known: method, num_speculative_tokens, "
          "prompt_lookup_max, prompt_lookup_min, model, adaptive)",
          key));
    }
  }
  SpecConfig c;
  auto method = j.find("method");
  if (method == j.end() || !method->is_string()) {
    return InvalidArgument("speculative config: 'method' (\"ngram\" or \"draft_model\") is required");
  }
  const std::string m = method->get<std::string>();
  if (m == "ngram") {
    c.method = SpecMethod::kNgram;
  } else if (m == "draft_model") {
    c.method = SpecMethod::kDraftModel;
  } else {
    return InvalidArgument(fmt::format(
        "speculative config: method '{}' is not supported (use \"ngram\" or \"draft_model\")", m));
  }
  KV_RETURN_IF_ERROR(IntField(j, "num_speculative_tokens", 1, kMaxSpeculativeTokens,
                              &c.num_speculative_tokens));
  KV_RETURN_IF_ERROR(IntField(j, "prompt_lookup_max", 1, 64, &c.prompt_lookup_max));
  KV_RETURN_IF_ERROR(IntField(j, "prompt_lookup_min", 1, 64, &c.prompt_lookup_min));
  if (c.prompt_lookup_min > c.prompt_lookup_max) {
    return InvalidArgument(fmt::format(
        "speculative config: prompt_lookup_min {} exceeds prompt_lookup_max {}",
        c.prompt_lookup_min, c.prompt_lookup_max));
  }
  if (auto it = j.find("model"); it != j.end()) {
    if (!it->is_string() || it->get<std::string>().empty()) {
      return InvalidArgument("speculative config: 'model' must be a GGUF path");
    }
    c.draft_model = it->get<std::string>();
  }
  if (auto it = j.find("adaptive"); it != j.end()) {
    if (!it->is_boolean()) {
      return InvalidArgument("speculative config: 'adaptive' must be true or false");
    }
    c.adaptive = it->get<bool>();
  }
  if (c.method == SpecMethod::kDraftModel && c.draft_model.empty()) {
    return InvalidArgument("speculative config: method \"draft_model\" needs 'model' (a GGUF path)");
  }
  if (c.method == SpecMethod::kNgram && !c.draft_model.empty()) {
    return InvalidArgument("speculative config: 'model' is only for method \"draft_model\"");
  }
  return c;
}

}  // namespace kvserve
