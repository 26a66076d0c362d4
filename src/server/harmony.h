// Harmony replies (gpt-oss): splitting what the model generates into its reasoning (the
// "analysis" channel, sent as reasoning_content) and its answer (the "final" channel, content).
//
// A reply continues the prompt's "<|start|>assistant" (ChatTemplate "harmony"), for example
//   <|channel|>analysis<|message|>THOUGHTS<|end|>
//   <|start|>assistant<|channel|>final<|message|>ANSWER<|return|>
// Each message is a header (the role after <|start|>, a recipient " to=...", <|channel|> NAME,
// <|constrain|> TYPE) and, after <|message|>, a body closed by <|end|> (another message follows)
// or by <|return|> / <|call|> (the reply is over; generation stops there).
//
// NOTE (tokens, not text): the markers are control tokens, which the engine's detokenizer leaves
// out of a choice's text ("analysisTHOUGHTSassistantfinalANSWER"), so the parser reads token
// ids and renders the other tokens itself with the same StreamingDetokenizer: the text it routes
// is, byte for byte, the engine's text before stop strings. The engine gives that text out late
// (held while it may still become a stop string) and cut at a stop string; Push() and Finish()
// take how many bytes of it the engine has given out so far, and the parser gives out no more.
//
// Routing: body text on the analysis channel is reasoning; on any other channel (final,
// commentary) or without a channel, content. Header text is dropped. Text before the first
// marker is held: it is the rest of the first header when a marker follows, and content when
// none ever comes (a model that does not write harmony).
//
// Contract: one parser per choice; not thread-safe; the Tokenizer must outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>

#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "util/strong_id.h"

namespace kvserve {

// harmony's marker tokens in a vocabulary.
struct HarmonyTokens {
  TokenId start = -1;      // <|start|>: a message header begins (the role)
  TokenId channel = -1;    // <|channel|>: the channel name follows
  TokenId message = -1;    // <|message|>: the body follows
  TokenId end = -1;        // <|end|>: the message is over, the reply goes on
  TokenId ret = -1;        // <|return|>: the reply is over
  TokenId call = -1;       // <|call|>: the reply is over with a tool call
  TokenId constrain = -1;  // <|constrain|>: the body's type follows; -1 when absent

  // nullopt unless each of <|start|>, <|channel|>, <|message|>, <|end|>, <|return|> and
  // <|call|> is one token of `tok`.
  static std::optional<HarmonyTokens> Find(const Tokenizer& tok);
  bool IsMarker(TokenId id) const;
};

struct HarmonyDelta {
  std::string reasoning;
  std::string content;
};

class HarmonyParser {
 public:
  static constexpr size_t kAllText = SIZE_MAX;

  HarmonyParser(const Tokenizer& tok, const HarmonyTokens& markers);

  // Appends generated tokens; returns the reasoning and content that became complete, of the
  // reply's text up to byte `released_bytes` (the engine's text so far: see the NOTE).
  // REQUIRES: released_bytes does not decrease from call to call.
  HarmonyDelta Push(std::span<const TokenId> tokens, size_t released_bytes = kAllText);
  // At the end of the choice: the rest up to `released_bytes` (an incomplete UTF-8 tail as
  // U+FFFD; text before a first marker that never came as content). Text past it is dropped.
  HarmonyDelta Finish(size_t released_bytes = kAllText);

 private:
  enum class State { kHeader, kChannel, kBody };
  enum class Sink { kUndecided, kDropped, kReasoning, kContent };
  struct Piece {
    Sink sink;
    std::string text;
  };

  void TakePlain(std::string text);  // text of a non-marker token, where the state sends it
  void Take(Sink sink, std::string text);
  void OnMarker(TokenId id);
  HarmonyDelta Release(size_t released_bytes);

  HarmonyTokens markers_;
  const Tokenizer* tok_;
  StreamingDetokenizer detok_;  // as the engine's: control tokens skipped
  State state_ = State::kHeader;
  bool seen_marker_ = false;
  std::string channel_;              // the current header's channel text so far
  Sink body_sink_ = Sink::kContent;  // where the current body goes
  std::deque<Piece> queue_;          // text not given out yet, in order; adjacent sinks differ
  size_t taken_bytes_ = 0;           // bytes taken off the queue (given out or dropped)
};

}  // namespace kvserve
