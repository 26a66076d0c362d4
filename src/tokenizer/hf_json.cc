// TokenizerSpecFromHfJson: HuggingFace tokenizer.json (+ tokenizer_config.json) → TokenizerSpec.
#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer_spec.h"

namespace kvserve {
namespace {

using Json = nlohmann::json;
using TokenIds = std::unordered_map<std::string, int32_t>;

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // "▁"

const Json& Field(const Json& j, const char* key) {
  static const Json kNull;
  if (!j.is_object()) return kNull;
  const auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

// Calls fn on `j` and, for "Sequence" components, on every member (depth first).
template <typename Fn>
void ForEachComponent(const Json& j, Fn&& fn) {
  if (!j.is_object()) return;
  fn(j);
  for (const char* list : {"normalizers", "pretokenizers", "processors", "decoders"}) {
    const Json& items = Field(j, list);
    if (items.is_array()) {
      for (const Json& item : items) ForEachComponent(item, fn);
    }
  }
}

bool HasComponent(const Json& j, std::string_view type) {
  bool found = false;
  ForEachComponent(j, [&](const Json& c) { found |= Field(c, "type") == type; });
  return found;
}

// A token name in tokenizer_config.json: "text" or {"content": "text", ...}.
std::string TokenName(const Json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && Field(j, "content").is_string())
    return Field(j, "content").get<std::string>();
  return {};
}

// Every token's text and type by id (an added token replaces a vocab entry of the same id; ids
// no entry names are unused), and text -> id (the lowest id of a text).
Status ReadVocab(const Json& root, TokenizerSpec* spec, TokenIds* ids) {
  const Json& vocab = Field(Field(root, "model"), "vocab");
  if (!vocab.is_object()) return InvalidArgument("tokenizer.json: model.vocab is not an object");
  const Json& added = Field(root, "added_tokens");
  struct Entry {
    int64_t id;
    const std::string* text;
    TokenType type;
  };
  std::vector<Entry> entries;  // in order: a later entry of an id replaces an earlier one
  entries.reserve(vocab.size() + (added.is_array() ? added.size() : 0));
  for (const auto& [text, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (1 << 24)) {
      return InvalidArgument("tokenizer.json: bad id for vocab entry '" + text + "'");
    }
    entries.push_back({id.get<int64_t>(), &text, TokenType::kNormal});
  }
  if (added.is_array()) {
    for (const Json& t : added) {
      const Json& id = Field(t, "id");
      if (!id.is_number_integer() || !Field(t, "content").is_string() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() > (1 << 24)) {
        return InvalidArgument("tokenizer.json: malformed entry in added_tokens");
      }
      const bool special = Field(t, "special").is_boolean() && Field(t, "special").get<bool>();
      entries.push_back({id.get<int64_t>(), Field(t, "content").get_ptr<const std::string*>(),
                         special ? TokenType::kControl : TokenType::kUserDefined});
    }
  }
  if (entries.empty()) return InvalidArgument("tokenizer.json: empty vocabulary");
  int64_t n = 0;
  for (const Entry& e : entries) n = std::max(n, e.id + 1);
  std::vector<const std::string*> text_of(n, nullptr);
  spec->types.assign(n, TokenType::kUnused);
  for (const Entry& e : entries) {
    text_of[e.id] = e.text;
    spec->types[e.id] = e.type;
  }
  spec->tokens.resize(n);
  ids->reserve(entries.size());
  for (int64_t i = 0; i < n; ++i) {
    if (text_of[i] == nullptr) {
      spec->tokens[i] = "[kvserve_unused_" + std::to_string(i) + "]";
      continue;
    }
    spec->tokens[i] = *text_of[i];
    ids->emplace(spec->tokens[i], static_cast<int32_t>(i));
  }
  return Status::Ok();
}

Status ReadMerges(const Json& model, std::vector<std::string>* merges) {
  const Json& list = Field(model, "merges");
  if (list.is_null()) return Status::Ok();
  if (!list.is_array()) return InvalidArgument("tokenizer.json: model.merges is not an array");
  merges->reserve(list.size());
  for (const Json& m : list) {
    if (m.is_string()) {
      merges->push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges->push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      return InvalidArgument("tokenizer.json: malformed merge entry " + m.dump());
    }
  }
  return Status::Ok();
}

// SPM vocabularies carry scores, HF's BPE conversion carries merges ordered by score: a piece's
// score is minus the rank of the first merge that produces it.
void SpmFromMerges(const std::vector<std::string>& merges, const TokenIds& ids,
                   TokenizerSpec* spec) {
  spec->scores.assign(spec->tokens.size(), 0.0f);
  std::vector<bool> produced(spec->tokens.size(), false);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) continue;
    const auto it = ids.find(m.substr(0, space) + m.substr(space + 1));
    if (it == ids.end() || produced[it->second]) continue;
    produced[it->second] = true;
    spec->scores[it->second] = -static_cast<float>(rank + 1);
  }
  // A piece no merge produces can never appear in HF's output: rank it below every merge so the
  // score-driven SPM merge loop prefers the pieces HF would build.
  const float lowest = -static_cast<float>(merges.size() + 1);
  for (size_t i = 0; i < spec->tokens.size(); ++i) {
    if (!produced[i] && spec->types[i] == TokenType::kNormal) spec->scores[i] = lowest;
  }
  for (size_t i = 0; i < spec->tokens.size(); ++i) {
    const std::string& t = spec->tokens[i];
    if (spec->types[i] == TokenType::kNormal && t.size() == 6 && t.compare(0, 3, "<0x") == 0 &&
        t[5] == '>') {
      spec->types[i] = TokenType::kByte;
    }
  }
}

Status ReadPreTokenizer(const Json& root, TokenizerSpec* spec) {
  const Json& pre = Field(root, "pre_tokenizer");
  std::vector<std::string> regexes;
  bool byte_level_regex = false;
  ForEachComponent(pre, [&](const Json& c) {
    if (Field(c, "type") == "Split" && Field(Field(c, "pattern"), "Regex").is_string()) {
      regexes.push_back(Field(Field(c, "pattern"), "Regex").get<std::string>());
    }
    if (Field(c, "type") == "ByteLevel" && Field(c, "use_regex") != false) byte_level_regex = true;
  });
  if (!regexes.empty()) {
    PreTokenizerConfig from_json;
    from_json.regexes = std::move(regexes);
    ForEachComponent(Field(root, "normalizer"),
                     [&](const Json& c) { from_json.nfc |= Field(c, "type") == "NFC"; });
    from_json.ignore_merges = Field(Field(root, "model"), "ignore_merges") == true;
    spec->pre = PreNameForConfig(from_json);
    if (spec->pre.empty()) {
      return Unimplemented("tokenizer.json: pre-tokenizer regex is not one kvserve knows: " +
                           from_json.regexes.back());
    }
  } else if (byte_level_regex) {
    spec->pre = "gpt2";
  } else {
    return Unimplemented("tokenizer.json: byte-level BPE without a known pre-tokenizer");
  }
  return Status::Ok();
}

// BOS/EOS insertion as the post-processor's single-sequence template declares it.
void ReadPostProcessor(const Json& root, const TokenIds& ids, TokenizerSpec* spec,
                       bool* has_template) {
  ForEachComponent(Field(root, "post_processor"), [&](const Json& c) {
    if (Field(c, "type") != "TemplateProcessing" || !Field(c, "single").is_array()) return;
    *has_template = true;
    const Json& single = Field(c, "single");
    auto special_id = [&](const Json& item) -> int32_t {
      const Json& st = Field(item, "SpecialToken");
      if (!Field(st, "id").is_string()) return -1;
      const auto it = ids.find(Field(st, "id").get<std::string>());
      return it == ids.end() ? -1 : it->second;
    };
    if (!single.empty() && special_id(single.front()) >= 0) {
      spec->add_bos = true;
      spec->bos_id = special_id(single.front());
    }
    if (single.size() > 1 && special_id(single.back()) >= 0) {
      spec->add_eos = true;
      spec->eos_id = special_id(single.back());
    }
  });
}

void ReadConfig(const Json& config, const TokenIds& ids, bool has_template, TokenizerSpec* spec) {
  auto lookup = [&](const char* key, int32_t* out) {
    const std::string name = TokenName(Field(config, key));
    if (const auto it = ids.find(name); !name.empty() && it != ids.end()) *out = it->second;
  };
  lookup("bos_token", &spec->bos_id);
  lookup("eos_token", &spec->eos_id);
  lookup("unk_token", &spec->unk_id);
  lookup("pad_token", &spec->pad_id);
  if (!has_template) {
    if (Field(config, "add_bos_token").is_boolean())
      spec->add_bos = Field(config, "add_bos_token").get<bool>();
    if (Field(config, "add_eos_token").is_boolean())
      spec->add_eos = Field(config, "add_eos_token").get<bool>();
  }
  const Json& tmpl = Field(config, "chat_template");
  if (tmpl.is_string()) {
    spec->chat_template = tmpl.get<std::string>();
  } else if (tmpl.is_array()) {
    for (const Json& t : tmpl) {
      if (Field(t, "name") == "default" && Field(t, "template").is_string()) {
        spec->chat_template = Field(t, "template").get<std::string>();
      }
    }
  }
}

Result<TokenizerSpec> Convert(const Json& root, const Json& config) {
  const Json& model = Field(root, "model");
  if (Field(model, "type") != "BPE") {
    return Unimplemented("tokenizer.json: model type " + Field(model, "type").dump() +
                         " is not supported (only BPE)");
  }
  TokenizerSpec spec;
  TokenIds ids;
  KV_RETURN_IF_ERROR(ReadVocab(root, &spec, &ids));
  std::vector<std::string> merges;
  KV_RETURN_IF_ERROR(ReadMerges(model, &merges));
  const bool spm = Field(model, "byte_fallback") == true ||
                   HasComponent(Field(root, "decoder"), "ByteFallback") ||
                   HasComponent(Field(root, "pre_tokenizer"), "Metaspace");
  if (spm) {
    spec.model = TokenizerModel::kSpm;
    spec.pre = "default";
    SpmFromMerges(merges, ids, &spec);
    bool prefix = false;
    ForEachComponent(Field(root, "normalizer"), [&](const Json& c) {
      prefix |= Field(c, "type") == "Prepend" && Field(c, "prepend") == kSpmSpace;
    });
    ForEachComponent(Field(root, "pre_tokenizer"), [&](const Json& c) {
      prefix |= Field(c, "type") == "Metaspace" && Field(c, "prepend_scheme") != "never" &&
                Field(c, "add_prefix_space") != false;
    });
    spec.add_space_prefix = prefix;
  } else {
    spec.model = TokenizerModel::kBpe;
    spec.add_space_prefix = false;
    spec.merges = std::move(merges);
    KV_RETURN_IF_ERROR(ReadPreTokenizer(root, &spec));
  }
  if (Field(model, "unk_token").is_string()) {
    if (const auto it = ids.find(Field(model, "unk_token").get<std::string>()); it != ids.end()) {
      spec.unk_id = it->second;
      spec.types[it->second] = TokenType::kUnknown;
    }
  }
  bool has_template = false;
  ReadPostProcessor(root, ids, &spec, &has_template);
  ReadConfig(config, ids, has_template, &spec);
  for (const char* eot : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"}) {
    if (const auto it = ids.find(eot); spec.eot_id < 0 && it != ids.end()) spec.eot_id = it->second;
  }
  if (const auto it = ids.find("<|eom_id|>"); it != ids.end()) spec.eom_id = it->second;
  DeriveEogIds(&spec);
  return spec;
}

}  // namespace

Result<TokenizerSpec> TokenizerSpecFromHfJson(std::string_view tokenizer_json,
                                              std::string_view tokenizer_config_json) {
  const Json root = Json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return InvalidArgument("tokenizer.json is not a valid JSON object");
  }
  Json config = Json::object();
  if (!tokenizer_config_json.empty()) {
    config = Json::parse(tokenizer_config_json, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return InvalidArgument("tokenizer_config.json is not a valid JSON object");
    }
  }
  try {
    return Convert(root, config);
  } catch (const Json::exception& e) {
    return InvalidArgument(std::string("tokenizer.json: unexpected structure: ") + e.what());
  }
}

}  // namespace kvserve
