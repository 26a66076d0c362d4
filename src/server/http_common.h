// What the server's generation routes (OpenAI's and Anthropic's) share: reading a JSON body,
// how often a waiting worker checks its client and keeps a stream alive, and the error for a
// response over --max-response-bytes. Stateless; any thread.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/openai_codec.h"

namespace kvserve {

inline constexpr std::chrono::milliseconds kKeepAliveEvery{250};  // while a stream is idle
inline constexpr std::chrono::milliseconds kPollEvery{20};  // client liveness check while idle

// Parses the body as JSON; nlohmann rejects malformed JSON, invalid UTF-8 in strings (parse
// errors) and numbers beyond a double such as 1e400 (an out_of_range error).
inline std::optional<ApiError> ParseBody(const std::string& body, nlohmann::json* out) {
  try {
    *out = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    return BadRequest(fmt::format("the body is not valid JSON: {}", e.what()));
  }
  return std::nullopt;
}

inline ApiError ResponseTooLarge(uint64_t limit) {
  ApiError e;
  e.status = 400;
  e.message = fmt::format(
      "the response reached the server's limit of {} bytes (--max-response-bytes); ask for "
      "fewer tokens, choices or top_logprobs",
      limit);
  e.code = "response_too_large";
  return e;
}

}  // namespace kvserve
