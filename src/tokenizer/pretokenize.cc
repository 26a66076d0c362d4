#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

namespace kvserve {

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

Result<PreTokenizer> PreTokenizer::Create(const PreTokenizerConfig& config) {
  PreTokenizer pt;
  pt.config_ = config;
  for (const std::string& pattern : config.regexes) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    auto regex = std::make_unique<Regex>();
    regex->code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
    if (regex->code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(error, msg, sizeof(msg));
      return InvalidArgument("pre-tokenizer regex '" + pattern + "' does not compile at offset " +
                             std::to_string(offset) + ": " + reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);  // optional: falls back to interpreter
    pt.regexes_.push_back(std::move(regex));
  }
  return pt;
}

namespace {

// Appends the Isolated split of `text` by `code` to `out`.
void SplitOne(pcre2_code* code, pcre2_match_data* md, std::string_view text,
              std::vector<std::string_view>* out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t gap_start = 0;
  while (pos < text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) break;  // no match (or a matcher limit): the rest is one gap
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t start = ov[0], end = ov[1];
    if (end == start) {  // empty match: a split point (HF's Split), then step over one code point
      if (start > gap_start) out->push_back(text.substr(gap_start, start - gap_start));
      gap_start = start;
      ++end;
      while (end < text.size() && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) ++end;
      pos = end;
      continue;
    }
    if (start > gap_start) out->push_back(text.substr(gap_start, start - gap_start));
    out->push_back(text.substr(start, end - start));
    pos = gap_start = end;
  }
  if (gap_start < text.size()) out->push_back(text.substr(gap_start));
}

}  // namespace

std::vector<std::string_view> PreTokenizer::Split(std::string_view text) const {
  std::vector<std::string_view> pieces = {text};
  if (text.empty()) return {};
  for (const auto& regex : regexes_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(regex->code, nullptr);
    std::vector<std::string_view> next;
    next.reserve(pieces.size() * 2);
    for (std::string_view piece : pieces) SplitOne(regex->code, md, piece, &next);
    pcre2_match_data_free(md);
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace kvserve
