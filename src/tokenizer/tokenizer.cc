#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <unordered_set>

#include "gguf/gguf_file.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/spm.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace kvserve {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581 "▁"

std::string ReplaceSpaces(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (char c : text) {
    if (c == ' ') {
      out.append(kSpmSpace);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string SpmPiece(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    if (text.substr(pos, kSpmSpace.size()) == kSpmSpace) {
      out.push_back(' ');
      pos += kSpmSpace.size();
    } else {
      out.push_back(text[pos++]);
    }
  }
  return out;
}

Status ValidateSpec(const TokenizerSpec& spec) {
  const size_t n = spec.tokens.size();
  if (n == 0) return InvalidArgument("tokenizer has an empty vocabulary");
  if (n > static_cast<size_t>(INT32_MAX)) return InvalidArgument("vocabulary too large");
  if (!spec.scores.empty() && spec.scores.size() != n) {
    return InvalidArgument("tokenizer has " + std::to_string(spec.scores.size()) + " scores for " +
                           std::to_string(n) + " tokens");
  }
  if (!spec.types.empty() && spec.types.size() != n) {
    return InvalidArgument("tokenizer has " + std::to_string(spec.types.size()) +
                           " token types for " + std::to_string(n) + " tokens");
  }
  const std::pair<const char*, int32_t> ids[] = {{"bos", spec.bos_id}, {"eos", spec.eos_id},
                                                 {"unk", spec.unk_id}, {"pad", spec.pad_id},
                                                 {"eot", spec.eot_id}, {"eom", spec.eom_id}};
  for (const auto& [name, id] : ids) {
    if (id >= static_cast<int64_t>(n)) {
      return InvalidArgument(std::string(name) + " token id " + std::to_string(id) +
                             " is outside the vocabulary of " + std::to_string(n));
    }
  }
  for (int32_t id : spec.eog_ids) {
    if (id < 0 || id >= static_cast<int64_t>(n)) {
      return InvalidArgument("end-of-generation token id " + std::to_string(id) +
                             " is outside the vocabulary");
    }
  }
  if (spec.add_bos && spec.bos_id < 0) return InvalidArgument("add_bos is set but no bos id");
  if (spec.add_eos && spec.eos_id < 0) return InvalidArgument("add_eos is set but no eos id");
  return Status::Ok();
}

}  // namespace

struct Tokenizer::Impl {
  TokenizerSpec spec;
  Vocab vocab;
  SpecialTokenMatcher matcher;
  PreTokenizer pretokenizer;
  std::optional<SpmModel> spm;
  std::optional<BpeModel> bpe;
  std::vector<std::string> pieces;  // [vocab_size] TokenToPiece of every token
  std::unordered_set<TokenId> eog;

  Impl(TokenizerSpec s, PreTokenizer pt)
      : spec(std::move(s)), vocab(spec), matcher(spec.tokens, vocab), pretokenizer(std::move(pt)) {}

  std::string ComputePiece(TokenId id) const;
  void EncodeFragment(std::string_view text, bool after_special, std::vector<TokenId>* out) const;
};

std::string Tokenizer::Impl::ComputePiece(TokenId id) const {
  const std::string& text = spec.tokens[id];
  switch (vocab.type(id)) {
    case TokenType::kByte:
      for (int b = 0; b < 256; ++b) {
        if (vocab.ByteToken(static_cast<uint8_t>(b)) == id)
          return std::string(1, static_cast<char>(b));
      }
      return text;
    case TokenType::kControl:
    case TokenType::kUnknown:
    case TokenType::kUserDefined:
      return text;
    default:
      return spec.model == TokenizerModel::kSpm ? SpmPiece(text) : ByteLevelToBytes(text);
  }
}

void Tokenizer::Impl::EncodeFragment(std::string_view text, bool after_special,
                                     std::vector<TokenId>* out) const {
  if (spec.model == TokenizerModel::kSpm) {
    std::string escaped;
    if (spec.add_space_prefix && after_special) escaped.append(kSpmSpace);
    escaped += ReplaceSpaces(text);
    spm->Encode(escaped, out);
    return;
  }
  std::string normalized;
  std::string_view view = text;
  if (pretokenizer.config().nfc) {
    normalized = NormalizeNfc(text);
    view = normalized;
  }
  const bool ignore_merges = pretokenizer.config().ignore_merges;
  for (std::string_view word : pretokenizer.Split(view)) bpe->EncodeWord(word, ignore_merges, out);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::Create(TokenizerSpec spec) {
  KV_RETURN_IF_ERROR(ValidateSpec(spec));
  KV_ASSIGN_OR_RETURN(const PreTokenizerConfig pre_config,
                      LookupPreTokenizer(spec.pre, spec.model));
  KV_ASSIGN_OR_RETURN(PreTokenizer pretokenizer, PreTokenizer::Create(pre_config));
  if (spec.eog_ids.empty()) DeriveEogIds(&spec);
  auto impl = std::make_unique<Impl>(std::move(spec), std::move(pretokenizer));
  const TokenizerSpec& s = impl->spec;
  if (s.model == TokenizerModel::kSpm) {
    impl->spm.emplace(&impl->vocab, &s.scores, s.unk_id);
  } else {
    KV_ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::Create(&impl->vocab, s.merges, s.unk_id));
    impl->bpe.emplace(std::move(bpe));
  }
  impl->pieces.reserve(s.tokens.size());
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    impl->pieces.push_back(impl->ComputePiece(static_cast<TokenId>(i)));
  }
  impl->eog.insert(s.eog_ids.begin(), s.eog_ids.end());
  return Tokenizer(std::move(impl));
}

Result<Tokenizer> Tokenizer::FromGguf(const GgufFile& file) {
  KV_ASSIGN_OR_RETURN(TokenizerSpec spec, TokenizerSpecFromGguf(file));
  return Create(std::move(spec));
}

std::vector<TokenId> Tokenizer::Encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  const std::string clean = SanitizeUtf8(text);
  std::vector<TokenId> ids;
  ids.reserve(clean.size() / 3 + 2);
  const TokenizerSpec& s = impl_->spec;
  if (add_special && s.add_bos) ids.push_back(s.bos_id);
  bool after_special = true;  // the start of the text counts as "after a special token"
  for (const Fragment& f : impl_->matcher.Partition(clean, parse_special)) {
    if (f.token >= 0) {
      ids.push_back(f.token);
      after_special = true;
    } else {
      impl_->EncodeFragment(f.text, after_special, &ids);
      after_special = false;
    }
  }
  if (add_special && s.add_eos) ids.push_back(s.eos_id);
  return ids;
}

std::string Tokenizer::Decode(std::span<const TokenId> ids, bool skip_special) const {
  std::string bytes;
  for (TokenId id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && IsSpecial(id)) continue;
    bytes += impl_->pieces[id];
  }
  if (strips_leading_space() && !bytes.empty() && bytes.front() == ' ') bytes.erase(0, 1);
  return SanitizeUtf8(bytes);
}

std::string Tokenizer::TokenToPiece(TokenId id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return impl_->pieces[id];
}

const std::string& Tokenizer::TokenText(TokenId id) const { return impl_->spec.tokens.at(id); }
int Tokenizer::vocab_size() const { return static_cast<int>(impl_->spec.tokens.size()); }
bool Tokenizer::IsEog(TokenId id) const { return impl_->eog.count(id) > 0; }
TokenType Tokenizer::Type(TokenId id) const {
  return id < 0 || id >= vocab_size() ? TokenType::kUnused : impl_->vocab.type(id);
}
bool Tokenizer::IsControl(TokenId id) const { return Type(id) == TokenType::kControl; }
bool Tokenizer::IsSpecial(TokenId id) const {
  const TokenType t = Type(id);
  return t == TokenType::kControl || t == TokenType::kUnknown;
}
bool Tokenizer::strips_leading_space() const {
  return impl_->spec.model == TokenizerModel::kSpm && impl_->spec.add_space_prefix;
}
const TokenizerSpec& Tokenizer::spec() const { return impl_->spec; }

}  // namespace kvserve
