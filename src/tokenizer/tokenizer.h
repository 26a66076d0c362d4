// Tokenizer: text ↔ token ids for one vocabulary (SentencePiece-style or byte-level BPE).
//
// Contract: Create() validates the spec and builds every table; the Tokenizer is immutable
// afterwards and all const methods are thread-safe. Move-only (the tables are large); share one
// through a pointer.
//
// Encode(text, add_special, parse_special):
//  - Invalid UTF-8 in `text` never crashes: each invalid byte is encoded as U+FFFD.
//  - Special tokens are matched in the raw text first, leftmost then longest: control and
//    unknown tokens (<s>, <|im_start|>, ...) only when parse_special; user-defined (added,
//    non-special) tokens always, as HF tokenizers and llama.cpp do.
//  - The text between special tokens is normalized (NFC when the pre-tokenizer asks for it),
//    split by the pre-tokenizer and encoded by the model. SPM with add_space_prefix puts a space
//    before each such fragment that starts the text or follows a special token (byte-level BPE
//    ignores add_space_prefix, as llama.cpp does).
//  - add_special adds BOS / EOS when the spec's add_bos / add_eos say so.
// Decode returns valid UTF-8 (invalid byte sequences become U+FFFD); SPM with add_space_prefix
// drops the one leading space of the result, like HF's decoder.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/status.h"
#include "tokenizer/tokenizer_spec.h"

namespace kvserve {

class Tokenizer {
 public:
  static Result<Tokenizer> Create(TokenizerSpec spec);
  static Result<Tokenizer> FromGguf(const GgufFile& file);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<TokenId> Encode(std::string_view text, bool add_special, bool parse_special) const;
  std::string Decode(std::span<const TokenId> ids, bool skip_special = false) const;
  // The bytes this token decodes to (as llama.cpp's token_to_piece with special=true): spaces
  // for "▁", raw bytes for <0xXX> and byte-level characters, control tokens as their text.
  // May be incomplete UTF-8. Empty for an out-of-range id.
  std::string TokenToPiece(TokenId id) const;
  // Raw vocabulary entry. REQUIRES: 0 <= id < vocab_size().
  const std::string& TokenText(TokenId id) const;

  int vocab_size() const;
  TokenId bos_id() const { return spec().bos_id; }
  TokenId eos_id() const { return spec().eos_id; }
  bool IsEog(TokenId id) const;
  bool IsControl(TokenId id) const;
  // Control or unknown: what Decode(skip_special = true) leaves out.
  bool IsSpecial(TokenId id) const;
  TokenType Type(TokenId id) const;
  // Whether Decode strips one leading space (SPM with add_space_prefix).
  bool strips_leading_space() const;
  const TokenizerSpec& spec() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve
