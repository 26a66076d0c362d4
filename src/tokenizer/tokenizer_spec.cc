#include "tokenizer/tokenizer_spec.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_set>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"

namespace kvserve {
namespace {

constexpr std::string_view kKeyModel = "tokenizer.ggml.model";
constexpr std::string_view kKeyPre = "tokenizer.ggml.pre";
constexpr std::string_view kKeyTokens = "tokenizer.ggml.tokens";
constexpr std::string_view kKeyScores = "tokenizer.ggml.scores";
constexpr std::string_view kKeyTypes = "tokenizer.ggml.token_type";
constexpr std::string_view kKeyMerges = "tokenizer.ggml.merges";
constexpr std::string_view kKeyAddBos = "tokenizer.ggml.add_bos_token";
constexpr std::string_view kKeyAddEos = "tokenizer.ggml.add_eos_token";
constexpr std::string_view kKeyAddSpacePrefix = "tokenizer.ggml.add_space_prefix";
constexpr std::string_view kKeyChatTemplate = "tokenizer.chat_template";

struct IdKey {
  std::string_view key;
  int32_t TokenizerSpec::*field;
};
constexpr IdKey kIdKeys[] = {
    {"tokenizer.ggml.bos_token_id", &TokenizerSpec::bos_id},
    {"tokenizer.ggml.eos_token_id", &TokenizerSpec::eos_id},
    {"tokenizer.ggml.unknown_token_id", &TokenizerSpec::unk_id},
    {"tokenizer.ggml.padding_token_id", &TokenizerSpec::pad_id},
    {"tokenizer.ggml.eot_token_id", &TokenizerSpec::eot_id},
    {"tokenizer.ggml.eom_token_id", &TokenizerSpec::eom_id},
};

// Control-token texts that end a turn in well-known chat formats.
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>",    "<|im_end|>",    "<|end|>",         "<|eom_id|>",
    "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "</s>",
    "<|return|>",    "<|call|>",      "<EOT>",           "<｜end▁of▁sentence｜>",
};

Result<bool> OptionalBool(const GgufFile& file, std::string_view key, bool fallback) {
  if (file.Find(key) == nullptr) return fallback;
  return file.GetBool(key);
}

Status ReadIds(const GgufFile& file, TokenizerSpec* spec) {
  for (const IdKey& k : kIdKeys) {
    if (file.Find(k.key) == nullptr) continue;
    KV_ASSIGN_OR_RETURN(const int64_t id, file.GetInt(k.key));
    if (id < 0 || id >= static_cast<int64_t>(spec->tokens.size())) {
      // llama.cpp files sometimes carry ids past the vocabulary; treat them as absent.
      continue;
    }
    spec->*k.field = static_cast<int32_t>(id);
  }
  return Status::Ok();
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return IoError("cannot read '" + path + "'");
  return ss.str();
}

}  // namespace

std::string_view TokenizerModelName(TokenizerModel model) {
  return model == TokenizerModel::kSpm ? "llama" : "gpt2";
}

void DeriveEogIds(TokenizerSpec* spec) {
  std::set<int32_t> ids(spec->eog_ids.begin(), spec->eog_ids.end());
  for (int32_t id : {spec->eos_id, spec->eot_id, spec->eom_id}) {
    if (id >= 0) ids.insert(id);
  }
  for (size_t i = 0; i < spec->tokens.size(); ++i) {
    const bool control = i < spec->types.size() && spec->types[i] == TokenType::kControl;
    if (!control) continue;
    for (std::string_view text : kEogTexts) {
      if (spec->tokens[i] == text) ids.insert(static_cast<int32_t>(i));
    }
  }
  // NOTE: gpt-oss's harmony format closes every message of a reply with <|end|> and the reply
  // itself with <|return|> (or <|call|> for a tool call): there <|end|> must not stop generation
  // after the reasoning (analysis) message. A vocabulary with both reply ends is harmony's, and
  // drops <|end|>, however it became an end (Hugging Face files name it the eot token).
  const auto text_of = [&](int32_t id) -> std::string_view {
    return static_cast<size_t>(id) < spec->tokens.size() ? spec->tokens[static_cast<size_t>(id)]
                                                         : std::string_view();
  };
  const auto has = [&](std::string_view text) {
    return std::any_of(ids.begin(), ids.end(), [&](int32_t id) { return text_of(id) == text; });
  };
  if (has("<|return|>") && has("<|call|>")) {
    std::erase_if(ids, [&](int32_t id) { return text_of(id) == "<|end|>"; });
  }
  spec->eog_ids.assign(ids.begin(), ids.end());
}

Result<TokenizerSpec> TokenizerSpecFromGguf(const GgufFile& file) {
  TokenizerSpec spec;
  KV_ASSIGN_OR_RETURN(const std::string model, file.GetString(kKeyModel));
  if (model == "llama") {
    spec.model = TokenizerModel::kSpm;
  } else if (model == "gpt2") {
    spec.model = TokenizerModel::kBpe;
  } else {
    return Unimplemented("tokenizer model '" + model + "' (" + std::string(kKeyModel) +
                         ") is not supported; supported: llama (SPM), gpt2 (BPE)");
  }
  if (file.Find(kKeyPre) != nullptr) {
    KV_ASSIGN_OR_RETURN(spec.pre, file.GetString(kKeyPre));
  }
  KV_ASSIGN_OR_RETURN(spec.tokens, file.GetStringArray(kKeyTokens));
  const size_t n = spec.tokens.size();
  if (file.Find(kKeyScores) != nullptr) {
    KV_ASSIGN_OR_RETURN(const std::vector<double> scores, file.GetFloatArray(kKeyScores));
    spec.scores.assign(scores.begin(), scores.end());
  }
  if (file.Find(kKeyTypes) != nullptr) {
    KV_ASSIGN_OR_RETURN(const std::vector<int64_t> types, file.GetIntArray(kKeyTypes));
    for (int64_t t : types) {
      if (t < 1 || t > 6) t = static_cast<int64_t>(TokenType::kNormal);
      spec.types.push_back(static_cast<TokenType>(t));
    }
  }
  if ((!spec.scores.empty() && spec.scores.size() != n) ||
      (!spec.types.empty() && spec.types.size() != n)) {
    return DataLoss("tokenizer arrays disagree: " + std::to_string(n) + " tokens, " +
                    std::to_string(spec.scores.size()) + " scores, " +
                    std::to_string(spec.types.size()) + " token types");
  }
  if (file.Find(kKeyMerges) != nullptr) {
    KV_ASSIGN_OR_RETURN(spec.merges, file.GetStringArray(kKeyMerges));
  }
  KV_RETURN_IF_ERROR(ReadIds(file, &spec));
  KV_ASSIGN_OR_RETURN(spec.add_bos,
                      OptionalBool(file, kKeyAddBos, spec.model == TokenizerModel::kSpm));
  KV_ASSIGN_OR_RETURN(spec.add_eos, OptionalBool(file, kKeyAddEos, false));
  KV_ASSIGN_OR_RETURN(spec.add_space_prefix,
                      OptionalBool(file, kKeyAddSpacePrefix, spec.model == TokenizerModel::kSpm));
  if (file.Find(kKeyChatTemplate) != nullptr) {
    KV_ASSIGN_OR_RETURN(spec.chat_template, file.GetString(kKeyChatTemplate));
  }
  DeriveEogIds(&spec);
  return spec;
}

void WriteTokenizerSpec(const TokenizerSpec& spec, GgufWriter& writer) {
  writer.SetString(std::string(kKeyModel), std::string(TokenizerModelName(spec.model)));
  writer.SetString(std::string(kKeyPre), spec.pre);
  writer.SetStringArray(std::string(kKeyTokens), spec.tokens);
  std::vector<float> scores = spec.scores;
  scores.resize(spec.tokens.size(), 0.0f);
  writer.SetFloat32Array(std::string(kKeyScores), scores);
  std::vector<int32_t> types(spec.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
  for (size_t i = 0; i < spec.types.size() && i < types.size(); ++i) {
    types[i] = static_cast<int32_t>(spec.types[i]);
  }
  writer.SetInt32Array(std::string(kKeyTypes), types);
  if (spec.model == TokenizerModel::kBpe)
    writer.SetStringArray(std::string(kKeyMerges), spec.merges);
  for (const IdKey& k : kIdKeys) {
    if (spec.*k.field >= 0)
      writer.SetUint32(std::string(k.key), static_cast<uint32_t>(spec.*k.field));
  }
  writer.SetBool(std::string(kKeyAddBos), spec.add_bos);
  writer.SetBool(std::string(kKeyAddEos), spec.add_eos);
  writer.SetBool(std::string(kKeyAddSpacePrefix), spec.add_space_prefix);
  if (!spec.chat_template.empty()) {
    writer.SetString(std::string(kKeyChatTemplate), spec.chat_template);
  }
}

Result<TokenizerSpec> LoadTokenizerSpec(const std::string& path) {
  char magic[4] = {};
  std::ifstream probe(path, std::ios::binary);
  if (!probe) return NotFound("cannot open '" + path + "'");
  probe.read(magic, sizeof(magic));
  if (probe.gcount() == 4 && std::string_view(magic, 4) == "GGUF") {
    KV_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(path));
    return TokenizerSpecFromGguf(file);
  }
  KV_ASSIGN_OR_RETURN(const std::string json, ReadFile(path));
  std::string config;
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  if (auto cfg = ReadFile(dir + "tokenizer_config.json"); cfg.ok()) config = std::move(cfg).value();
  return TokenizerSpecFromHfJson(json, config);
}

TokenizerSpec MakeSyntheticSpec(int vocab_size) {
  TokenizerSpec spec;
  spec.model = TokenizerModel::kSpm;
  spec.pre = "default";
  auto add = [&spec](std::string text, float score, TokenType type) {
    spec.tokens.push_back(std::move(text));
    spec.scores.push_back(score);
    spec.types.push_back(type);
  };
  add("<unk>", 0.0f, TokenType::kUnknown);
  add("<s>", 0.0f, TokenType::kControl);
  add("</s>", 0.0f, TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    add(buf, 0.0f, TokenType::kByte);
  }
  spec.unk_id = 0, spec.bos_id = 1, spec.eos_id = 2;
  spec.add_bos = true;
  // Pieces: characters first, then every prefix of common words (so each word is reachable by
  // merges), in decreasing score order.
  static constexpr std::string_view kWords[] = {
      "hello", "world", "model",  "token",  "the",  "of",   "and",   "to",     "in",    "is",
      "that",  "it",    "was",    "for",    "on",   "are",  "with",  "as",     "be",    "at",
      "this",  "have",  "from",   "or",     "one",  "had",  "by",    "word",   "but",   "not",
      "what",  "all",   "were",   "we",     "when", "your", "can",   "said",   "there", "use",
      "an",    "each",  "which",  "she",    "do",   "how",  "their", "if",     "will",  "up",
      "other", "about", "out",    "many",   "then", "them", "these", "so",     "some",  "her",
      "would", "make",  "like",   "him",    "into", "time", "has",   "look",   "two",   "more",
      "write", "go",    "see",    "number", "no",   "way",  "could", "people", "my",    "than",
      "first", "water", "been",   "call",   "who",  "oil",  "its",   "now",    "find",  "long",
      "down",  "day",   "did",    "get",    "come", "made", "may",   "part",   "cache", "once",
      "upon",  "story", "little", "girl",   "boy"};
  std::vector<std::string> pieces = {"\xE2\x96\x81"};  // "▁"
  for (char c = 'a'; c <= 'z'; ++c) pieces.emplace_back(1, c);
  for (char c = 'A'; c <= 'Z'; ++c) pieces.emplace_back(1, c);
  for (char c = '0'; c <= '9'; ++c) pieces.emplace_back(1, c);
  for (char c : std::string_view(".,!?;:'\"-()")) pieces.emplace_back(1, c);
  std::unordered_set<std::string> seen(pieces.begin(), pieces.end());
  for (std::string_view w : kWords) {
    const std::string word = "\xE2\x96\x81" + std::string(w);
    for (size_t len = 4; len <= word.size(); ++len) {  // "▁" is 3 bytes
      std::string prefix = word.substr(0, len);
      if (seen.insert(prefix).second) pieces.push_back(std::move(prefix));
    }
  }
  for (const std::string& p : pieces) {
    if (static_cast<int>(spec.tokens.size()) >= vocab_size) break;
    add(p, -static_cast<float>(spec.tokens.size()), TokenType::kNormal);
  }
  while (static_cast<int>(spec.tokens.size()) < vocab_size) {
    add("<unused" + std::to_string(spec.tokens.size()) + ">", -1e9f, TokenType::kUnused);
  }
  DeriveEogIds(&spec);
  return spec;
}

}  // namespace kvserve
