// The pre-tokenizer table: every tokenizer.ggml.pre value that llama.cpp accepts for byte-level
// BPE vocabularies, grouped into rows that share one regex list and one set of flags.
//
// NOTE: one row per distinct behaviour, never one branch per name. The regexes say what the
// model's tokenizer.json (HF) says, written in the dialect PCRE2 reads (UTF + UCP):
//  - Contractions are spelled case by case, (?:'[sS]|'[tT]|...): with UCP a caseless 's would
//    also match U+017F (long s), which HF's tokenizers, its JS port and llama.cpp do not.
//  - Case classes ([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], o200k/tekken) are kept as HF writes them.
//    llama.cpp cannot express them with std::regex and approximates "upper" as a letter that is
//    not a-z and "lower" as a letter that is not A-Z, so for non-ASCII letters its split can
//    differ from HF's (for example "aΒ": HF "a" "Β", llama.cpp "aΒ"); we follow HF.
//  - Character-class intersection (Kimi K2's [\p{L...}&&[^\p{Han}]]) becomes a lookahead,
//    (?:(?!\p{sc:Han})[...]); llama.cpp hand-codes this regex with its own, narrower list of Han
//    ranges. \p{sc:Han} is the Unicode script, as tiktoken's regex engine reads \p{Han}; PCRE2's
//    plain \p{Han} means Script_Extensions and would also take CJK punctuation such as U+3001.
//  - Digit groupings that llama.cpp hand-codes (AFMoE's "leading 1-2 digits, then threes") are
//    written as regexes with a lookahead.
//  - Possessive quantifiers (BailingMoE's ?+ and ++) are replaced by greedy ones, as llama.cpp
//    does: in that regex no alternative can give a character back, so the split is the same.
//  - GPT-2's list ends with |\s+ here; llama.cpp's drops it. Under Isolated splitting the lone
//    whitespace that only \s+ would match is left as a gap of the same extent, so the pieces are
//    the same.
// Names whose vocabularies are not byte-level (gemma4, sarvam-moe, whitespace) are refused with
// the reason: their tokenizer is SentencePiece-style BPE on raw UTF-8, which kvserve lacks.
#include <algorithm>

#include "tokenizer/pretokenize.h"

namespace kvserve {
namespace {

// Case-by-case contractions and HF's spelling of them.
constexpr char kPreContractions[] = R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))";
constexpr char kHfContractions[] = R"((?i:'s|'t|'re|'ve|'m|'ll|'d))";

constexpr char kGpt2[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3's tail after the contractions (cl100k): letters with one leading non-letter, digits
// by three, punctuation runs with their newlines, newline runs, whitespace runs.
constexpr char kLlama3Tail[] =
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2's: the same with single digits.
constexpr char kQwen2Tail[] =
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kUpper[] = R"([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])";
constexpr char kLower[] = R"([\p{Ll}\p{Lm}\p{Lo}\p{M}])";
constexpr char kLead[] = R"([^\r\n\p{L}\p{N}]?)";
constexpr char kPunctPrefix[] = R"([\p{P}\$\+<=>\^~\|]+)";
// Chinese, Japanese kana (DeepSeek-V3 and its relatives).
constexpr char kHanKana[] = "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+";
// DeepSeek-V3's last regex: ASCII punctuation glued to a Latin word, letters with marks,
// punctuation/symbol runs, newlines, whitespace.
constexpr char kDeepseekV3Main[] =
    "[!\"#$%&'()*+,\\-./"
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
// BLOOM's: everything up to whitespace or sentence punctuation, with one leading space.
constexpr char kBloom[] = " ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+";

std::string Cat(std::initializer_list<std::string_view> parts) {
  std::string s;
  for (std::string_view p : parts) s += p;
  return s;
}

std::string Llama3() { return Cat({kPreContractions, kLlama3Tail}); }
std::string Qwen2() { return Cat({kPreContractions, kQwen2Tail}); }

// o200k (GPT-4o): a word is upper* lower+ or upper+ lower*, each with an optional contraction.
std::string CasedWords(std::string_view upper, std::string_view lower, std::string_view digits,
                       std::string_view punct_tail, bool contractions) {
  const std::string_view c = contractions ? std::string_view(kPreContractions) : "";
  const std::string opt = contractions ? Cat({c, "?"}) : "";
  return Cat({kLead, upper, "*", lower, "+", opt, "|", kLead, upper, "+", lower, "*", opt, "|",
              digits, "| ?[^\\s\\p{L}\\p{N}]+", punct_tail, R"(|\s*[\r\n]+|\s+(?!\S)|\s+)"});
}
std::string O200k() { return CasedWords(kUpper, kLower, R"(\p{N}{1,3})", R"([\r\n/]*)", true); }

struct PreRow {
  std::vector<std::string> names;  // tokenizer.ggml.pre values (llama.cpp's, plus kvserve's)
  std::string llama_cpp_type;      // llama.cpp's LLAMA_VOCAB_PRE_TYPE_* for the first name
  PreTokenizerConfig config;
};

PreTokenizerConfig Regexes(std::vector<std::string> regexes, bool nfc = false,
                           bool ignore_merges = false) {
  PreTokenizerConfig c;
  c.regexes = std::move(regexes);
  c.nfc = nfc;
  c.ignore_merges = ignore_merges;
  return c;
}

std::vector<PreRow> BuildTable() {
  constexpr bool kNfc = true, kIgnoreMerges = true;
  std::vector<PreRow> t;
  t.push_back(
      {{"default", ""}, "DEFAULT", Regexes({kPunctPrefix, kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"})});
  t.push_back({{"gpt2",       "gpt-2",      "phi-2",           "mpt",          "olmo",
                "jais",       "trillion",   "granite-docling", "jina-es",      "jina-de",
                "jina-v2-es", "jina-v2-de", "jina-v1-en",      "jina-v2-code", "roberta-bpe",
                "gigachat",   "a.x-4.0",    "mellum",          "modern-bert",  "exaone4"},
               "GPT2",
               Regexes({kGpt2})});
  t.push_back({{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
                "mellum2"},
               "STARCODER",
               Regexes({R"(\p{N})", kGpt2})});
  t.push_back(
      {{"falcon"}, "FALCON", Regexes({R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"})});
  t.push_back({{"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                "lfm2", "jina-v5-nano"},
               "LLAMA3",
               Regexes({Llama3()}, !kNfc, kIgnoreMerges)});
  t.push_back({{"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"}, "DBRX", Regexes({Llama3()})});
  t.push_back({{"jais-2"},
               "JAIS2",
               Regexes({Cat({kPreContractions,
                             R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*)",
                             R"(|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S))",
                             R"(|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S))",
                             R"(|\s{1,2}(?!\S)|\s{1})"})})});
  t.push_back({{"qwen2"}, "QWEN2", Regexes({Qwen2()}, kNfc)});
  t.push_back({{"stablelm2", "hunyuan", "solar-open", "grok-2", "deepseek-r1-qwen", "kormo",
                "f2llmv2", "megrez"},
               "STABLELM2",
               Regexes({Qwen2()})});
  t.push_back({{"qwen35"},
               "QWEN35",
               Regexes({Cat({kPreContractions,
                             R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+)",
                             R"([\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"})})});
  t.push_back({{"ufakzeka"},
               "UFAKZEKA",
               Regexes({std::string(kQwen2Tail).substr(1)})});  // Qwen2's without contractions
  t.push_back({{"laguna"}, "LAGUNA", Regexes({R"([^\n]+|[\n]+)", Qwen2()})});
  t.push_back({{"seed-coder"},
               "SEED_CODER",
               Regexes({Cat({kPreContractions,
                             R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+)",
                             R"(|\s*[\r\n]+|\s+(?!\S)|\s+)"})})});
  t.push_back({{"minicpm5"},
               "MINICPM5",
               Regexes({R"(\p{N}{1,3})",
                        Cat({kPreContractions,
                             R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*)",
                             R"(|\s*[\r\n]+|\s+(?!\S)|\s+)"})},
                       !kNfc, kIgnoreMerges)});
  t.push_back({{"exaone-moe"},
               "EXAONE_MOE",
               Regexes({Cat({kPreContractions,
                             R"(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N})",
                             R"(| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)"})})});
  t.push_back({{"bailingmoe", "bailingmoe2", "llada-moe"},
               "BAILINGMOE",
               Regexes({R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+)"
                        R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)"})});
  t.push_back(
      {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, "GPT4O", Regexes({O200k()})});
  t.push_back(
      {{"granite-embed-multi-97m"}, "GRANITE_EMB_MULTI", Regexes({O200k()}, !kNfc, kIgnoreMerges)});
  t.push_back(
      {{"tiny_aya", "cohere2moe"}, "TINY_AYA", Regexes({R"(\d{1,3}(?=(?:\d{3})*\b))", O200k()})});
  t.push_back({{"tekken"},
               "TEKKEN",
               Regexes({CasedWords(kUpper, kLower, R"(\p{N})", R"([\r\n/]*)", false)}, !kNfc,
                       kIgnoreMerges)});
  t.push_back(
      {{"youtu"},
       "YOUTU",
       Regexes({"[\uAC00-\uD7A3\u3131-\u318E]+|["
                "\uFF01\u2026\u201C\u201D\u2018\u2019\u2014\uFF1A\uFF1B\uFF0C\u3001-\u303F\uFE30-"
                "\uFE4F]+|[\u3105-\u312F]+|[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+",
                CasedWords(kUpper, kLower, R"(\p{N})", R"([\r\n/]*)", true)},
               !kNfc, kIgnoreMerges)});
  t.push_back({{"kimi-k2"},
               "KIMI_K2",
               Regexes({Cat({R"(\p{sc:Han}+|)",
                             CasedWords(R"((?:(?!\p{sc:Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]))",
                                        R"((?:(?!\p{sc:Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}]))",
                                        R"(\p{N}{1,3})", R"([\r\n]*)", true)})})});
  t.push_back({{"bloom", "poro-chat", "gpt3-finnish"}, "BLOOM", Regexes({kBloom})});
  t.push_back({{"viking"}, "VIKING", Regexes({kBloom, R"(\p{N})"})});
  t.push_back({{"chameleon"},
               "CHAMELEON",
               Regexes({"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                        "([\\t\\n]|    |  )", R"(\p{N})", R"([\p{P}!-/:-@\[-`{-~])", kGpt2})});
  t.push_back({{"superbpe"}, "SUPERBPE", Regexes({R"(\p{N}+)", R"((?=(\d{3})+(?!\d)))"})});
  t.push_back(
      {{"deepseek-llm"},
       "DEEPSEEK_LLM",
       Regexes({
           // clang-format off
                   "[\r\n]",
      "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
      "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
      "\\s+$",
      "[一-龥ࠀ-一가-퟿]+",
      "\\p{N}+",
           // clang-format on
       })});
  t.push_back({{"deepseek-coder"},
               "DEEPSEEK_CODER",
               Regexes({"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)",
                        "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+", R"(\p{N})"})});
  t.push_back({{"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"},
               "DEEPSEEK3_LLM",
               Regexes({R"(\p{N}{1,3})", kHanKana, kDeepseekV3Main})});
  t.push_back({{"spark2_5"},
               "SPARK2_5",
               Regexes({R"(\p{N}{1,3})", kHanKana,
                        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}"
                        "\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+",
                        R"(\p{N})"})});
  t.push_back({{"afmoe"},
               "AFMOE",
               Regexes({R"(\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N})))",
                        "[\u4E00-\u9FFF\u3400-\u4DBF\uF900-\uFAFF\u3040-\u309F\u30A0-\u30FF\uFF65-"
                        "\uFF9F\u2F00-\u2FDF\u0E40-\u0E7F\u0E80-\u0EFF\u1780-\u17FF\u1000-"
                        "\u109F\uAA60-\uAA7F\uA9E0-\uA9FF\uAC00-\uD7AF\u1100-\u11FF]+",
                        kDeepseekV3Main})});
  return t;
}

const std::vector<PreRow>& Table() {
  static const std::vector<PreRow> table = BuildTable();
  return table;
}

// Names llama.cpp accepts whose vocabularies are not byte-level BPE.
constexpr std::string_view kRawUtf8Bpe[] = {"gemma4", "granite-embed-multi-311m", "sarvam-moe",
                                            "whitespace"};

const PreRow* FindRow(std::string_view pre) {
  for (const PreRow& row : Table()) {
    if (std::find(row.names.begin(), row.names.end(), pre) != row.names.end()) return &row;
  }
  return nullptr;
}

void ReplaceAll(std::string* s, std::string_view from, std::string_view to) {
  for (size_t at = s->find(from); at != std::string::npos; at = s->find(from, at + to.size())) {
    s->replace(at, from.size(), to);
  }
}

// HF's spelling of a regex -> ours: (?i:...) contractions, class intersection, possessives.
std::string FromHfSpelling(std::string r) {
  ReplaceAll(&r, kHfContractions, kPreContractions);
  ReplaceAll(&r, R"('(?i:[sdmt]|ll|ve|re))", R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE]))");
  ReplaceAll(&r, R"([^\r\n\p{L}\p{N}]?+)", kLead);
  ReplaceAll(&r, R"([^\s\p{L}\p{N}]++)", R"([^\s\p{L}\p{N}]+)");
  ReplaceAll(&r, R"([\p{Han}]+)", R"(\p{sc:Han}+)");
  ReplaceAll(&r, R"([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]])",
             R"((?:(?!\p{sc:Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]))");
  ReplaceAll(&r, R"([\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]])",
             R"((?:(?!\p{sc:Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}]))");
  return r;
}

}  // namespace

std::vector<std::string> SupportedPreNames() {
  std::vector<std::string> names;
  for (const PreRow& row : Table()) {
    for (const std::string& n : row.names) {
      if (!n.empty()) names.push_back(n);
    }
  }
  return names;
}

Result<PreTokenizerConfig> LookupPreTokenizer(std::string_view pre, TokenizerModel model) {
  if (model == TokenizerModel::kSpm) return PreTokenizerConfig{};  // SPM splits nothing
  if (const PreRow* row = FindRow(pre)) return row->config;
  if (std::find(std::begin(kRawUtf8Bpe), std::end(kRawUtf8Bpe), pre) != std::end(kRawUtf8Bpe)) {
    return Unimplemented("tokenizer.ggml.pre '" + std::string(pre) +
                         "' is BPE on raw UTF-8 (SentencePiece-style, no byte-level encoding), "
                         "which kvserve does not support");
  }
  std::string list;
  for (const std::string& n : SupportedPreNames()) list += (list.empty() ? "" : ", ") + n;
  return Unimplemented("tokenizer.ggml.pre '" + std::string(pre) +
                       "' is not supported; supported: " + list);
}

namespace {

// The first row with `regexes` (HF-spelled or ours); with `flags`, one whose flags match too if
// there is one.
std::string FindName(const std::vector<std::string>& regexes, const PreTokenizerConfig* flags) {
  std::vector<std::string> ours;
  for (const std::string& r : regexes) ours.push_back(FromHfSpelling(r));
  const PreRow* first = nullptr;
  for (const PreRow& row : Table()) {
    if (row.config.regexes != ours) continue;
    if (flags == nullptr ||
        (row.config.nfc == flags->nfc && row.config.ignore_merges == flags->ignore_merges)) {
      return row.names.front();
    }
    if (first == nullptr) first = &row;
  }
  return first != nullptr ? first->names.front() : "";
}

}  // namespace

std::string PreNameForConfig(const PreTokenizerConfig& from_json) {
  return FindName(from_json.regexes, &from_json);
}

std::string PreNameForRegexes(const std::vector<std::string>& regexes) {
  return FindName(regexes, nullptr);
}

std::string PreNameForRegex(std::string_view regex) {
  return PreNameForRegexes({std::string(regex)});
}

}  // namespace kvserve
