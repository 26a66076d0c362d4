// libFuzzer entry point for the OpenAI request codec: the input is a request body, parsed as
// JSON the way the server does and run through ParseGenerationParams for both endpoints and
// through ParseMessages (as /tokenize does); the raw bytes also go through the response
// builders as generated text. The codec's contract is that neither parsing nor building throws
// and that what it accepts is in range for the engine; a crash, an escaped exception or a
// broken invariant (a trap) means a body could reach the engine with values it does not expect.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/openai_codec.h"

namespace {

using kvserve::ApiError;
using kvserve::ChatMessage;
using kvserve::Endpoint;
using kvserve::GenerationParams;
using nlohmann::json;

void Require(bool ok) {
  if (!ok) __builtin_trap();
}

void CheckError(const ApiError& e) {
  Require(e.status >= 400 && e.status <= 499);
  Require(!e.message.empty());
  Require(!e.type.empty());
  // Building never throws, whatever text the message quotes from the body.
  Require(!kvserve::ErrorBody(e).empty());
}

void CheckMessages(const std::vector<ChatMessage>& messages) {
  Require(!messages.empty());
  for (const ChatMessage& m : messages) {
    // "developer" is folded into "system"; the chat templates know only these three.
    Require(m.role == "system" || m.role == "user" || m.role == "assistant");
  }
}

bool InRange(float v, float lo, float hi) { return std::isfinite(v) && v >= lo && v <= hi; }

void CheckParams(const GenerationParams& p, Endpoint endpoint) {
  Require(p.endpoint == endpoint);
  if (endpoint == Endpoint::kCompletions) {
    Require(!p.prompts.empty());
    for (const kvserve::PromptInput& prompt : p.prompts) {
      if (!prompt.is_ids) continue;
      Require(!prompt.ids.empty());
      for (int32_t id : prompt.ids) Require(id >= 0);
    }
  } else {
    CheckMessages(p.messages);
  }
  Require(!p.max_tokens || *p.max_tokens >= 1);
  Require(p.n >= 1 && p.n <= 128);
  const kvserve::SamplingParams& s = p.sampling;
  Require(InRange(s.temperature, 0, 2));
  Require(InRange(s.top_p, 0, 1) && s.top_p > 0);
  Require(InRange(s.min_p, 0, 1));
  Require(InRange(s.presence_penalty, -2, 2));
  Require(InRange(s.frequency_penalty, -2, 2));
  Require(InRange(s.repetition_penalty, 0, 100) && s.repetition_penalty > 0);
  Require(s.top_k >= 0);
  // The sampler validates again; a body the codec accepts must not fail there (a 500).
  Require(s.Validate().ok());
  Require(p.stop.size() <= 16);
  for (const std::string& stop : p.stop) Require(!stop.empty());
  for (int32_t id : p.stop_token_ids) Require(id >= 0);
  Require(!p.include_usage || p.stream);
  Require(p.logprobs >= -1 && p.logprobs <= kvserve::SamplingParams::kMaxTopLogprobs);
  Require(s.logprobs == (p.logprobs >= 0));
  if (p.logprobs >= 0) Require(s.top_logprobs == p.logprobs);
}

// Responses carry token text that may split a UTF-8 character; the raw input stands in for it.
void BuildResponses(const std::string& text) {
  for (Endpoint endpoint : {Endpoint::kCompletions, Endpoint::kChat}) {
    const kvserve::ResponseHeader h{endpoint, "id", 0, text};
    kvserve::ChoiceOut c;
    c.text = text;
    c.with_logprobs = true;
    c.logprobs.push_back({text, -INFINITY, {{text, NAN}}});
    Require(!kvserve::Dump(kvserve::Response(h, {c}, {})).empty());
    Require(!kvserve::Dump(kvserve::Chunk(h, c, true, true)).empty());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A short prefix covers the replacement of broken UTF-8; the whole input would spend most of
  // the time on per-byte logprob arrays.
  BuildResponses(std::string(reinterpret_cast<const char*>(data), std::min<size_t>(size, 64)));

  // As the server reads a body, but without exceptions: a body that is not JSON never gets here.
  const json body = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;

  for (Endpoint endpoint : {Endpoint::kCompletions, Endpoint::kChat}) {
    GenerationParams params;
    if (std::optional<ApiError> e = ParseGenerationParams(body, endpoint, &params)) {
      CheckError(*e);
    } else {
      CheckParams(params, endpoint);
    }
  }

  if (body.is_object()) {
    if (auto it = body.find("messages"); it != body.end()) {
      std::vector<ChatMessage> messages;
      if (std::optional<ApiError> e = kvserve::ParseMessages(*it, &messages)) {
        CheckError(*e);
      } else {
        CheckMessages(messages);
        Require(messages.size() == it->size());
      }
    }
  }
  return 0;
}
