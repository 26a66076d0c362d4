#include "tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

namespace kvserve {
namespace {

// NOTE: regexes are written once here, in the dialect PCRE2 reads. HF's Llama 3 / Qwen2 regexes
// start with (?i:'s|'t|...); with UCP a case-insensitive 's would also match U+017F (long s),
// which HF's JS port and llama.cpp do not, so the contractions are spelled out case by case.
// PCRE2's \s with UCP is Unicode White_Space plus U+180E.
constexpr char kGpt2Regex[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr char kContractions[] = R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))";
constexpr char kLlama3Tail[] =
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kQwen2Tail[] =
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// The same regexes as HF tokenizer.json spells them.
constexpr char kHfLlama3Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kHfQwen2Regex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string Llama3Regex() { return std::string(kContractions) + kLlama3Tail; }
std::string Qwen2Regex() { return std::string(kContractions) + kQwen2Tail; }

// DeepSeek's pre-tokenizers: sequences of Split(Isolated) regexes, as their tokenizer.json files
// spell them (deepseek-llm: DeepSeek-LLM and V2; deepseek-v3: V3 and R1).
const std::vector<std::string>& DeepseekLlmRegexes() {
  static const std::vector<std::string> r = {
      "[\r\n]",
      "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
      "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
      "\\s+$",
      "[一-龥ࠀ-一가-퟿]+",
      "\\p{N}+",
  };
  return r;
}

const std::vector<std::string>& DeepseekV3Regexes() {
  static const std::vector<std::string> r = {
      "\\p{N}{1,3}",
      "[一-龥぀-ゟ゠-ヿ]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
  };
  return r;
}

}  // namespace

Result<PreTokenizerConfig> LookupPreTokenizer(std::string_view pre, TokenizerModel model) {
  PreTokenizerConfig config;
  if (model == TokenizerModel::kSpm) return config;  // SPM splits nothing
  if (pre == "default" || pre == "gpt2" || pre.empty()) {
    config.regexes = {kGpt2Regex};
  } else if (pre == "llama-bpe" || pre == "llama3") {
    config.regexes = {Llama3Regex()};
    config.ignore_merges = true;
  } else if (pre == "qwen2") {
    config.regexes = {Qwen2Regex()};
    config.nfc = true;
  } else if (pre == "smollm" || pre == "starcoder" || pre == "refact") {
    config.regexes = {R"(\p{N})", kGpt2Regex};
  } else if (pre == "deepseek-llm") {
    config.regexes = DeepseekLlmRegexes();
  } else if (pre == "deepseek-v3") {
    config.regexes = DeepseekV3Regexes();
  } else {
    return Unimplemented("tokenizer.ggml.pre '" + std::string(pre) +
                         "' is not supported; supported: default, gpt2, llama-bpe, llama3, "
                         "qwen2, smollm, starcoder, refact, deepseek-llm, deepseek-v3");
  }
  return config;
}

std::string PreNameForRegex(std::string_view regex) {
  if (regex == kHfLlama3Regex || regex == Llama3Regex()) return "llama-bpe";
  if (regex == kHfQwen2Regex || regex == Qwen2Regex()) return "qwen2";
  if (regex == kGpt2Regex) return "gpt2";
  return "";
}

std::string PreNameForRegexes(const std::vector<std::string>& regexes) {
  if (regexes.size() == 1) return PreNameForRegex(regexes[0]);
  if (regexes == DeepseekLlmRegexes()) return "deepseek-llm";
  if (regexes == DeepseekV3Regexes()) return "deepseek-v3";
  return "";
}

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
    if (end == start) {  // empty match: step over one code point
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
