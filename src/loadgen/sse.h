// Server-sent events as OpenAI-compatible servers stream them, and the fields the benchmark
// reads from each chunk.
//
// SseParser takes the body in whatever pieces the network delivers and emits the data of each
// complete event: the `data:` lines of one event (one optional space after the colon removed)
// joined by "\n"; comment lines (": keep-alive") and other fields are skipped; "\r\n" and "\n"
// both end lines. Not thread-safe.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "kvserve/status.h"

namespace kvserve::loadgen {

class SseParser {
 public:
  using EventFn = std::function<void(std::string_view data)>;

  // Feeds the next bytes of the body; calls on_event for each event they complete.
  void Feed(std::string_view bytes, const EventFn& on_event);
  // End of body: an event whose blank line never came is emitted too.
  void Finish(const EventFn& on_event);

 private:
  void Line(std::string_view line, const EventFn& on_event);

  std::string pending_;  // bytes of an incomplete line
  std::string data_;     // data lines of the current event
  bool has_data_ = false;
};

// What one streamed chunk says. Token counts come from OpenAI's `usage` (vLLM, kvserve, and
// llama.cpp with include_usage), else llama.cpp's `timings` (prompt_n excludes cache_n) or its
// native `tokens_cached` / `tokens_predicted`.
struct StreamChunk {
  bool done = false;     // "[DONE]"
  std::string text;      // choices[0].text or choices[0].delta.content (+ reasoning_content)
  std::optional<int> prompt_tokens;
  std::optional<int> completion_tokens;
  std::optional<int> cached_tokens;
  std::string error;     // a mid-stream {"error": ...}
};

// Parses one event's data. Malformed JSON is an error.
Result<StreamChunk> ParseStreamChunk(std::string_view data);

}  // namespace kvserve::loadgen
