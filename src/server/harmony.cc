#include "server/harmony.h"

#include <algorithm>
#include <string_view>
#include <utility>

namespace kvserve {
namespace {

// The id of `text` when it is one token of `tok` (a control token, or a user-defined one).
std::optional<TokenId> SingleToken(const Tokenizer& tok, std::string_view text) {
  const std::vector<TokenId> ids = tok.Encode(text, /*add_special=*/false, /*parse_special=*/true);
  if (ids.size() != 1 || tok.TokenText(ids[0]) != text) return std::nullopt;
  return ids[0];
}

// "analysis" of "analysis", " analysis to=x" or "commentary json": the first word.
std::string_view FirstWord(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  s.remove_prefix(begin);
  return s.substr(0, s.find_first_of(kSpace));
}

}  // namespace

std::optional<HarmonyTokens> HarmonyTokens::Find(const Tokenizer& tok) {
  HarmonyTokens t;
  const std::pair<std::string_view, TokenId*> required[] = {
      {"<|start|>", &t.start}, {"<|channel|>", &t.channel}, {"<|message|>", &t.message},
      {"<|end|>", &t.end},     {"<|return|>", &t.ret},      {"<|call|>", &t.call}};
  for (const auto& [text, id] : required) {
    const std::optional<TokenId> found = SingleToken(tok, text);
    if (!found) return std::nullopt;
    *id = *found;
  }
  t.constrain = SingleToken(tok, "<|constrain|>").value_or(-1);
  return t;
}

bool HarmonyTokens::IsMarker(TokenId id) const {
  return id >= 0 && (id == start || id == channel || id == message || id == end || id == ret ||
                     id == call || id == constrain);
}

HarmonyParser::HarmonyParser(const Tokenizer& tok, const HarmonyTokens& markers)
    : markers_(markers), tok_(&tok), detok_(tok) {}

void HarmonyParser::TakePlain(std::string text) {
  switch (state_) {
    case State::kHeader:
      return Take(seen_marker_ ? Sink::kDropped : Sink::kUndecided, std::move(text));
    case State::kChannel:
      channel_ += text;
      return Take(Sink::kDropped, std::move(text));
    case State::kBody:
      return Take(body_sink_, std::move(text));
  }
}

void HarmonyParser::Take(Sink sink, std::string text) {
  if (text.empty()) return;
  if (!queue_.empty() && queue_.back().sink == sink) {
    queue_.back().text += text;
  } else {
    queue_.push_back(Piece{sink, std::move(text)});
  }
}

void HarmonyParser::OnMarker(TokenId id) {
  if (!seen_marker_) {
    seen_marker_ = true;
    // What came before the first marker was the rest of the prompt's "<|start|>assistant"
    // header (a recipient such as " to=functions.f"), not content.
    for (Piece& p : queue_) {
      if (p.sink == Sink::kUndecided) p.sink = Sink::kDropped;
    }
  }
  if (id == markers_.channel) {
    state_ = State::kChannel;
    channel_.clear();
  } else if (id == markers_.message) {
    state_ = State::kBody;
    body_sink_ = FirstWord(channel_) == "analysis" ? Sink::kReasoning : Sink::kContent;
  } else if (id == markers_.constrain) {
    state_ = State::kHeader;  // the body's type ("json"): header text; the channel stays
  } else {
    // <|start|> opens the next header; after <|end|>, <|return|> or <|call|> only a header
    // can follow (the engine stops at the last two unless told to ignore them).
    state_ = State::kHeader;
    channel_.clear();
  }
}

HarmonyDelta HarmonyParser::Push(std::span<const TokenId> tokens, size_t released_bytes) {
  for (const TokenId id : tokens) {
    std::string text = detok_.Push(id);
    if (!markers_.IsMarker(id)) {
      TakePlain(std::move(text));
      continue;
    }
    // A marker the vocabulary makes user-defined rather than control is rendered: its own text
    // is header, what precedes it (a completed UTF-8 tail) belongs where it was going.
    const std::string piece = tok_->TokenToPiece(id);
    if (std::string_view(text).ends_with(piece)) {
      TakePlain(text.substr(0, text.size() - piece.size()));
      Take(Sink::kDropped, piece);
    } else {
      TakePlain(std::move(text));
    }
    OnMarker(id);
  }
  return Release(released_bytes);
}

HarmonyDelta HarmonyParser::Finish(size_t released_bytes) {
  TakePlain(detok_.Flush());
  for (Piece& p : queue_) {
    if (p.sink == Sink::kUndecided) p.sink = Sink::kContent;  // no marker ever came
  }
  HarmonyDelta out = Release(released_bytes);
  queue_.clear();  // past the engine's text: cut by a stop string
  return out;
}

HarmonyDelta HarmonyParser::Release(size_t released_bytes) {
  HarmonyDelta out;
  while (!queue_.empty() && taken_bytes_ < released_bytes) {
    Piece& p = queue_.front();
    if (p.sink == Sink::kUndecided) break;
    const size_t n = std::min(p.text.size(), released_bytes - taken_bytes_);
    const std::string_view given = std::string_view(p.text).substr(0, n);
    if (p.sink == Sink::kReasoning) out.reasoning += given;
    if (p.sink == Sink::kContent) out.content += given;
    taken_bytes_ += n;
    if (n == p.text.size()) {
      queue_.pop_front();
    } else {
      p.text.erase(0, n);
    }
  }
  return out;
}

}  // namespace kvserve
