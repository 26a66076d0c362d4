// kvserve tokenize / detokenize / convert-tokenizer: the tokenizer from the command line.
// All three need only tokenizer metadata, so they work on vocabulary-only GGUF files (and
// tokenize/detokenize also accept a HuggingFace tokenizer.json as --model).
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"
#include "kvserve/commands.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_spec.h"

namespace kvserve::cli {
namespace {

using Json = nlohmann::json;

// Token pieces and decoded text may hold invalid UTF-8 (a byte token alone): replace, never throw.
std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string ReadFileOrFail(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Tokenizer LoadTokenizerOrFail(const std::string& path) {
  auto spec = LoadTokenizerSpec(path);
  if (!spec.ok()) Fail("cannot load a tokenizer from '" + path + "': " + spec.status().ToString());
  auto tok = Tokenizer::Create(std::move(spec).value());
  if (!tok.ok()) Fail("invalid tokenizer in '" + path + "': " + tok.status().ToString());
  return std::move(tok).value();
}

struct TokenizeOptions {
  std::string model, text, file, jsonl;
  bool no_add_special = false, no_parse_special = false;
};

Json EncodeToJson(const Tokenizer& tok, const std::string& text, const TokenizeOptions& o,
                  bool with_text) {
  const std::vector<TokenId> ids = tok.Encode(text, !o.no_add_special, !o.no_parse_special);
  Json pieces = Json::array();
  for (TokenId id : ids) pieces.push_back(tok.TokenToPiece(id));
  Json out = {{"ids", ids}, {"pieces", std::move(pieces)}};
  if (with_text) out["text"] = tok.Decode(ids);
  return out;
}

// --jsonl: one JSON string per input line → one {"ids", "pieces", "text"} object per line.
void TokenizeJsonl(const Tokenizer& tok, const TokenizeOptions& o) {
  std::ifstream in(o.jsonl, std::ios::binary);
  if (!in) Fail("cannot open '" + o.jsonl + "'");
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.empty()) continue;
    const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_string()) {
      Fail(o.jsonl + ":" + std::to_string(line_no) + ": expected one JSON string per line");
    }
    std::cout << Dump(EncodeToJson(tok, j.get<std::string>(), o, /*with_text=*/true)) << '\n';
  }
}

void RunTokenize(const TokenizeOptions& o) {
  const int sources = !o.text.empty() + !o.file.empty() + !o.jsonl.empty();
  if (sources != 1) Fail("give exactly one of --text, --file, --jsonl");
  const Tokenizer tok = LoadTokenizerOrFail(o.model);
  if (!o.jsonl.empty()) {
    TokenizeJsonl(tok, o);
    return;
  }
  const std::string text = o.file.empty() ? o.text : ReadFileOrFail(o.file);
  std::cout << Dump(EncodeToJson(tok, text, o, /*with_text=*/false)) << '\n';
}

std::vector<TokenId> ParseIds(const std::string& csv, int vocab_size) {
  std::vector<TokenId> ids;
  std::stringstream ss(csv);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    long value = -1;
    try {
      value = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || value < 0 || value >= vocab_size) {
      Fail("bad token id '" + item + "' (vocabulary has " + std::to_string(vocab_size) + ")");
    }
    ids.push_back(static_cast<TokenId>(value));
  }
  return ids;
}

void RunConvert(const std::string& json_path, std::string config_path, const std::string& out) {
  if (config_path.empty()) {
    const size_t slash = json_path.find_last_of('/');
    const std::string candidate =
        (slash == std::string::npos ? "" : json_path.substr(0, slash + 1)) +
        "tokenizer_config.json";
    if (std::ifstream(candidate)) config_path = candidate;
  }
  const std::string json = ReadFileOrFail(json_path);
  const std::string config = config_path.empty() ? "" : ReadFileOrFail(config_path);
  auto spec = TokenizerSpecFromHfJson(json, config);
  if (!spec.ok()) Fail("cannot convert '" + json_path + "': " + spec.status().ToString());
  if (auto tok = Tokenizer::Create(*spec); !tok.ok()) {
    Fail("converted tokenizer is not usable: " + tok.status().ToString());
  }
  GgufWriter writer;
  writer.SetString("general.architecture", "llama");
  writer.SetString("general.name", "vocab only");
  WriteTokenizerSpec(*spec, writer);
  if (Status s = writer.WriteFile(out); !s.ok())
    Fail("cannot write '" + out + "': " + s.ToString());
  std::cout << Dump({{"out", out},
                     {"vocab_size", spec->tokens.size()},
                     {"model", std::string(TokenizerModelName(spec->model))},
                     {"pre", spec->pre}})
            << '\n';
}

}  // namespace

void AddTokenizeCommands(CLI::App& app) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* tok =
      app.add_subcommand("tokenize", "Text to token ids: {\"ids\": [...], \"pieces\": [...]}");
  tok->add_option("--model", opts->model, "GGUF file (vocabulary-only is enough) or tokenizer.json")
      ->required();
  tok->add_option("--text", opts->text, "Text to tokenize");
  tok->add_option("--file", opts->file, "File whose bytes to tokenize");
  tok->add_option("--jsonl", opts->jsonl,
                  "Batch mode: one JSON string per line; prints one JSON object per line, with "
                  "\"text\" = the ids decoded again");
  tok->add_flag("--no-add-special", opts->no_add_special, "Do not add BOS/EOS");
  tok->add_flag("--no-parse-special", opts->no_parse_special,
                "Treat special-token text such as <s> as plain text");
  tok->callback([opts] { RunTokenize(*opts); });

  auto model = std::make_shared<std::string>();
  auto ids = std::make_shared<std::string>();
  auto skip = std::make_shared<bool>(false);
  CLI::App* detok = app.add_subcommand("detokenize", "Token ids to text: {\"text\": \"...\"}");
  detok->add_option("--model", *model, "GGUF file or tokenizer.json")->required();
  detok->add_option("--ids", *ids, "Comma-separated token ids, e.g. 1,2,3")->required();
  detok->add_flag("--skip-special", *skip, "Leave out control tokens");
  detok->callback([model, ids, skip] {
    const Tokenizer t = LoadTokenizerOrFail(*model);
    const std::vector<TokenId> parsed = ParseIds(*ids, t.vocab_size());
    std::cout << Dump({{"text", t.Decode(parsed, *skip)}}) << '\n';
  });

  auto json = std::make_shared<std::string>();
  auto config = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  CLI::App* conv =
      app.add_subcommand("convert-tokenizer", "HuggingFace tokenizer.json → vocabulary-only GGUF");
  conv->add_option("--tokenizer-json", *json, "tokenizer.json")->required();
  conv->add_option("--tokenizer-config", *config,
                   "tokenizer_config.json (default: the one next to tokenizer.json, if any)");
  conv->add_option("--out", *out, "Output .gguf")->required();
  conv->callback([json, config, out] { RunConvert(*json, *config, *out); });
}

}  // namespace kvserve::cli
