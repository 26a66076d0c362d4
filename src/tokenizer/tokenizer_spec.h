// TokenizerSpec: a tokenizer's vocabulary and settings, exactly what GGUF tokenizer metadata
// (tokenizer.ggml.*, tokenizer.chat_template) holds. A plain value type: build one from a GGUF
// file, from a HuggingFace tokenizer.json, or by hand (tests, synthetic models), then hand it to
// Tokenizer::Create, which validates it.
//
// Contract: the loaders never throw; malformed input yields a Status that names the key or
// field at fault. Thread-compatible (a plain struct).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/status.h"
#include "util/strong_id.h"

namespace kvserve {

class GgufFile;
class GgufWriter;

enum class TokenizerModel {
  kSpm,  // GGUF tokenizer.ggml.model "llama": SentencePiece-style BPE driven by scores
  kBpe,  // GGUF tokenizer.ggml.model "gpt2": byte-level BPE driven by merge ranks
};

// Values as GGUF's tokenizer.ggml.token_type stores them (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct TokenizerSpec {
  TokenizerModel model = TokenizerModel::kSpm;
  // tokenizer.ggml.pre: selects the pre-tokenizer ("default", "llama-bpe", "qwen2", "gpt2", ...).
  std::string pre = "default";
  std::vector<std::string> tokens;  // [vocab_size]
  std::vector<float> scores;        // [vocab_size] or empty (all 0)
  std::vector<TokenType> types;     // [vocab_size] or empty (all kNormal)
  std::vector<std::string> merges;  // BPE only: "left right", highest priority first
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1, eot_id = -1, eom_id = -1;
  // End-of-generation tokens (eos, eot, <|im_end|>, <|eot_id|>, ...). Not stored in GGUF:
  // derived from the ids above and well-known token texts by DeriveEogIds().
  std::vector<int32_t> eog_ids;
  bool add_bos = false, add_eos = false, add_space_prefix = true;
  std::string chat_template;  // tokenizer.chat_template, may be empty
};

std::string_view TokenizerModelName(TokenizerModel model);  // "llama" or "gpt2"

// Fills spec->eog_ids (sorted, unique) from eos/eot/eom ids and control tokens whose text is a
// well-known end-of-turn marker; in a harmony (gpt-oss) vocabulary, one with <|return|> and
// <|call|> among them, <|end|> ends a message, not the reply, and is left out.
void DeriveEogIds(TokenizerSpec* spec);

// Missing optional keys take llama.cpp's defaults: add_bos and add_space_prefix are true for
// SPM and false for BPE, add_eos false, pre "default".
Result<TokenizerSpec> TokenizerSpecFromGguf(const GgufFile& file);
// Sets the tokenizer.ggml.* keys (and tokenizer.chat_template when non-empty).
void WriteTokenizerSpec(const TokenizerSpec& spec, GgufWriter& writer);

// From a HuggingFace tokenizer.json (+ optional tokenizer_config.json text for add_bos/eos,
// chat_template and special token names). Supports BPE models: byte-level ones (gpt2 style) and
// SentencePiece-converted ones (byte_fallback, "▁" metaspace).
Result<TokenizerSpec> TokenizerSpecFromHfJson(std::string_view tokenizer_json,
                                              std::string_view tokenizer_config_json = {});
// Loads a spec from a GGUF file (recognized by its magic, any name) or a tokenizer.json
// (tokenizer_config.json next to it is read if present).
Result<TokenizerSpec> LoadTokenizerSpec(const std::string& path);

// A small SPM vocabulary for synthetic models: <unk>, <s>, </s>, the 256 <0xXX> byte tokens,
// then common English pieces/words with scores, padded to vocab_size (>= 259) with unused tokens.
TokenizerSpec MakeSyntheticSpec(int vocab_size);

}  // namespace kvserve
