#include "tokenizer/tokenizer_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/test_vocabs.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

using ::testing::ElementsAre;

Result<TokenizerSpec> RoundTrip(const TokenizerSpec& spec) {
  GgufWriter writer;
  writer.SetString("general.architecture", "llama");
  WriteTokenizerSpec(spec, writer);
  KV_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, writer.WriteToBytes());
  KV_ASSIGN_OR_RETURN(GgufFile file, GgufFile::FromBytes(std::move(bytes)));
  return TokenizerSpecFromGguf(file);
}

TEST(TokenizerSpecTest, GgufRoundTripKeepsEveryField) {
  TokenizerSpec spec =
      testing::BpeSpec({"a b", "\xC4\xA0 a"},
                       {"ab",
                        "\xC4\xA0"
                        "a"},
                       {{"<|eot_id|>", TokenType::kControl}, {"<tool>", TokenType::kUserDefined}});
  spec.scores.assign(spec.tokens.size(), 0.0f);
  spec.scores[3] = -1.5f;
  spec.bos_id = 258, spec.eos_id = 258, spec.eot_id = 258, spec.pad_id = 259;
  spec.add_bos = true;
  spec.chat_template = "{{ messages }}";
  DeriveEogIds(&spec);
  auto back = RoundTrip(spec);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->model, TokenizerModel::kBpe);
  EXPECT_EQ(back->pre, "llama-bpe");
  EXPECT_EQ(back->tokens, spec.tokens);
  EXPECT_EQ(back->scores, spec.scores);
  EXPECT_EQ(back->types, spec.types);
  EXPECT_EQ(back->merges, spec.merges);
  EXPECT_EQ(back->bos_id, 258);
  EXPECT_EQ(back->eot_id, 258);
  EXPECT_EQ(back->pad_id, 259);
  EXPECT_EQ(back->unk_id, -1);
  EXPECT_EQ(back->eom_id, -1);
  EXPECT_TRUE(back->add_bos);
  EXPECT_FALSE(back->add_eos);
  EXPECT_FALSE(back->add_space_prefix);
  EXPECT_EQ(back->chat_template, "{{ messages }}");
  EXPECT_EQ(back->eog_ids, spec.eog_ids);
}

TEST(TokenizerSpecTest, HarmonyEndClosesAMessageNotTheReply) {
  // gpt-oss writes <|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final
  // <|message|>...<|return|>: generation goes on past <|end|> and stops at <|return|> or <|call|>.
  TokenizerSpec harmony = testing::BpeSpec({}, {},
                                           {{"<|return|>", TokenType::kControl},     // 256
                                            {"<|end|>", TokenType::kControl},        // 257
                                            {"<|call|>", TokenType::kControl},       // 258
                                            {"<|endoftext|>", TokenType::kControl},  // 259
                                            {"<|channel|>", TokenType::kControl}});  // 260
  harmony.eos_id = 256, harmony.eot_id = 257;  // as gpt-oss's Hugging Face files give them
  DeriveEogIds(&harmony);
  EXPECT_THAT(harmony.eog_ids, ElementsAre(256, 258, 259));
  // Phi-3 ends its turns with <|end|> and has no <|return|>: there it stays an end.
  TokenizerSpec phi3 = testing::BpeSpec(
      {}, {}, {{"<|end|>", TokenType::kControl}, {"<|endoftext|>", TokenType::kControl}});
  phi3.eot_id = 256;
  DeriveEogIds(&phi3);
  EXPECT_THAT(phi3.eog_ids, ElementsAre(256, 257));
}

TEST(TokenizerSpecTest, GgufRoundTripOfSyntheticSpmEncodesTheSame) {
  const TokenizerSpec spec = MakeSyntheticSpec(400);
  auto back = RoundTrip(spec);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->add_space_prefix);
  auto a = Tokenizer::Create(spec);
  auto b = Tokenizer::Create(*back);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->Encode("the little girl said hello", true, true),
            b->Encode("the little girl said hello", true, true));
}

TEST(TokenizerSpecTest, MissingTokenizerKeysAreNotFound) {
  GgufWriter writer;
  writer.SetString("general.architecture", "llama");
  auto bytes = writer.WriteToBytes();
  ASSERT_TRUE(bytes.ok());
  auto file = GgufFile::FromBytes(std::move(bytes).value());
  ASSERT_TRUE(file.ok());
  EXPECT_FALSE(TokenizerSpecFromGguf(*file).ok());
}

TEST(TokenizerSpecTest, LoadsGgufByMagicAndJsonWithItsConfig) {
  const std::string dir = ::testing::TempDir();
  GgufWriter writer;
  WriteTokenizerSpec(MakeSyntheticSpec(300), writer);
  const std::string gguf_path = dir + "/kvserve_tok_vocab.bin";  // no .gguf suffix on purpose
  ASSERT_TRUE(writer.WriteFile(gguf_path).ok());
  auto from_gguf = LoadTokenizerSpec(gguf_path);
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.status().ToString();
  EXPECT_EQ(from_gguf->tokens.size(), 300u);
  EXPECT_FALSE(LoadTokenizerSpec(dir + "/kvserve_no_such_file.json").ok());
}

constexpr char kTinyByteLevelJson[] = R"({
  "normalizer": null,
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "ignore_merges": true, "vocab": {"a": 0, "b": 1, "ab": 2},
            "merges": [["a", "b"]]},
  "added_tokens": [
    {"id": 3, "content": "<|begin_of_text|>", "special": true},
    {"id": 4, "content": "<|eot_id|>", "special": true},
    {"id": 6, "content": "<tool>", "special": false}]
})";

TEST(HfJsonTest, ReadsByteLevelBpe) {
  auto spec = TokenizerSpecFromHfJson(kTinyByteLevelJson, R"({"eos_token": "<|eot_id|>",
                                      "chat_template": "T"})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->model, TokenizerModel::kBpe);
  EXPECT_EQ(spec->pre, "llama-bpe");
  EXPECT_EQ(spec->tokens.size(), 7u);  // id 5 is a gap, filled with an unused token
  EXPECT_EQ(spec->types[5], TokenType::kUnused);
  EXPECT_EQ(spec->types[3], TokenType::kControl);
  EXPECT_EQ(spec->types[6], TokenType::kUserDefined);
  EXPECT_THAT(spec->merges, ElementsAre("a b"));
  EXPECT_TRUE(spec->add_bos);
  EXPECT_EQ(spec->bos_id, 3);
  EXPECT_EQ(spec->eos_id, 4);
  EXPECT_EQ(spec->eot_id, 4);
  EXPECT_THAT(spec->eog_ids, ElementsAre(4));
  EXPECT_EQ(spec->chat_template, "T");
  auto tok = Tokenizer::Create(*spec);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_THAT(tok->Encode("ab<tool>", true, true), ElementsAre(3, 2, 6));
}

TEST(HfJsonTest, ReadsSentencePieceStyleBpe) {
  const char* json = R"({
    "normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": null,
    "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}]},
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
      "vocab": {"<unk>": 0, "<s>": 1, "<0x41>": 2, "\u2581": 3, "a": 4, "\u2581a": 5},
      "merges": ["\u2581 a"]},
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true},
                     {"id": 1, "content": "<s>", "special": true}]
  })";
  auto spec = TokenizerSpecFromHfJson(json, R"({"bos_token": "<s>", "add_bos_token": true})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->model, TokenizerModel::kSpm);
  EXPECT_TRUE(spec->add_space_prefix);
  EXPECT_TRUE(spec->add_bos);
  EXPECT_EQ(spec->types[0], TokenType::kUnknown);
  EXPECT_EQ(spec->types[2], TokenType::kByte);
  EXPECT_GT(spec->scores[5], spec->scores[4] - 1e9f);
  auto tok = Tokenizer::Create(*spec);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_THAT(tok->Encode("a A", true, true), ElementsAre(1, 5, 3, 2));
}

TEST(HfJsonTest, MalformedInputIsAnErrorNotAnException) {
  EXPECT_FALSE(TokenizerSpecFromHfJson("{not json").ok());
  EXPECT_FALSE(TokenizerSpecFromHfJson("[]").ok());
  EXPECT_FALSE(TokenizerSpecFromHfJson(R"({"model": {"type": "BPE", "vocab": {"a": "x"}}})").ok());
  EXPECT_EQ(
      TokenizerSpecFromHfJson(R"({"model": {"type": "Unigram", "vocab": []}})").status().code(),
      StatusCode::kUnimplemented);
  EXPECT_FALSE(TokenizerSpecFromHfJson(R"({"model": {"type": "BPE", "vocab": {"a": 0},
      "merges": [1]}, "pre_tokenizer": {"type": "ByteLevel"}})")
                   .ok());
}

}  // namespace
}  // namespace kvserve
