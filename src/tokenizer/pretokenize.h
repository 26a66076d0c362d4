// PreTokenizer: splits text into the pieces ("words") that byte-level BPE encodes one by one,
// using the regular expressions that a GGUF tokenizer.ggml.pre value declares.
//
// Contract: Create() compiles the regexes (PCRE2, UTF + UCP, so \p{L}, \p{N} and \s follow
// Unicode); afterwards Split() is const and thread-safe (each call owns its match data).
// Input must be valid UTF-8 (Tokenizer sanitizes first). Splitting behaves like HF's
// Split(behavior=Isolated): every match is a piece and so is every gap between matches (an empty
// match, as SuperBPE's digit lookahead makes, only marks a split point), so the concatenation of
// the pieces is always the input.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/status.h"
#include "tokenizer/tokenizer_spec.h"

namespace kvserve {

// What one tokenizer.ggml.pre value means.
struct PreTokenizerConfig {
  std::vector<std::string> regexes;  // applied in order, each splitting the previous pieces
  bool nfc = false;                  // apply Unicode NFC before splitting (Qwen2's normalizer)
  bool ignore_merges = false;        // a word already in the vocabulary is one token (Llama 3)
};

// Looks up `pre` for `model` in the pre-tokenizer table (pretokenize_table.cc: every name
// llama.cpp accepts for byte-level BPE, one row per regex list and flags); Unimplemented, listing
// the known values, for an unknown one.
Result<PreTokenizerConfig> LookupPreTokenizer(std::string_view pre, TokenizerModel model);

// Every pre value LookupPreTokenizer accepts for BPE, in table order.
std::vector<std::string> SupportedPreNames();

// The pre value whose single regex equals `regex` (HF tokenizer.json → GGUF; HF's spelling,
// e.g. (?i:'s|...), or ours); empty if none. The first row with that regex wins.
std::string PreNameForRegex(std::string_view regex);
// The same for a Sequence of Split regexes (DeepSeek's), in order.
std::string PreNameForRegexes(const std::vector<std::string>& regexes);
// The same, preferring the row whose nfc and ignore_merges equal `from_json`'s (tokenizer.json's
// NFC normalizer and model.ignore_merges); else the first row with those regexes.
std::string PreNameForConfig(const PreTokenizerConfig& from_json);

class PreTokenizer {
 public:
  static Result<PreTokenizer> Create(const PreTokenizerConfig& config);

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  std::vector<std::string_view> Split(std::string_view text) const;
  const PreTokenizerConfig& config() const { return config_; }

 private:
  PreTokenizer() = default;
  struct Regex;
  PreTokenizerConfig config_;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace kvserve
