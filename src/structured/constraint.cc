#include "structured/constraint.h"

#include <fmt/format.h>

#include "structured/gbnf.h"
#include "structured/regex.h"

namespace kvserve::structured {

const char* ConstraintKindName(ConstraintKind kind) {
  switch (kind) {
    case ConstraintKind::kJsonSchema: return "json_schema";
    case ConstraintKind::kJsonObject: return "json_object";
    case ConstraintKind::kRegex: return "regex";
    case ConstraintKind::kChoice: return "choice";
    case ConstraintKind::kGrammar: return "grammar";
  }
  return "?";
}

std::string ConstraintSpec::Key() const {
  std::string key = fmt::format("{}|ws={}|strict={}|", ConstraintKindName(kind),
                                json.flexible_whitespace ? 1 : 0, json.strict ? 1 : 0);
  key += text;
  for (const std::string& c : choices) {
    key += fmt::format("|{}:", c.size());
    key += c;
  }
  return key;
}

Result<Grammar> BuildGrammar(const ConstraintSpec& spec,
                             std::chrono::steady_clock::time_point deadline) {
  GrammarBuilder b;
  b.SetDeadline(deadline);
  int root = -1;
  switch (spec.kind) {
    case ConstraintKind::kJsonSchema: {
      nlohmann::json schema = nlohmann::json::parse(spec.text, nullptr, false);
      if (schema.is_discarded()) return InvalidArgument("the JSON schema is not valid JSON");
      KV_ASSIGN_OR_RETURN(root, CompileJsonSchema(schema, spec.json, &b));
      break;
    }
    case ConstraintKind::kJsonObject:
      root = AddJsonObjectRule(spec.json, &b);
      break;
    case ConstraintKind::kRegex: {
      KV_ASSIGN_OR_RETURN(root, CompileRegex(spec.text, &b));
      break;
    }
    case ConstraintKind::kChoice: {
      if (spec.choices.empty()) return InvalidArgument("'choice' needs at least one string");
      std::vector<Sequence> alts;
      for (const std::string& c : spec.choices) {
        if (c.empty()) return InvalidArgument("'choice' strings must not be empty");
        alts.push_back(b.Literal(c));
      }
      root = b.Alternatives("choice", std::move(alts));
      break;
    }
    case ConstraintKind::kGrammar: {
      KV_ASSIGN_OR_RETURN(root, CompileGbnf(spec.text, &b));
      break;
    }
  }
  return b.Build(root);
}

ConstraintCompiler::ConstraintCompiler(std::shared_ptr<const TokenVocab> vocab,
                                       ConstraintCompilerOptions options)
    : vocab_(std::move(vocab)), options_(options) {}

Result<std::shared_ptr<TokenMasker>> ConstraintCompiler::CompileUncached(
    const ConstraintSpec& spec) const {
  const auto deadline = std::chrono::steady_clock::now() + options_.compile_timeout;
  KV_ASSIGN_OR_RETURN(Grammar g, BuildGrammar(spec, deadline));
  auto masker = std::make_shared<TokenMasker>(std::move(g), vocab_);
  // The first mask, here on the caller's thread rather than in an engine step.
  const State start = masker->Initial();
  (void)masker->Allowed(start);
  if (std::chrono::steady_clock::now() > deadline) {
    return InvalidArgument(
        "the constraint took longer to compile than the time limit allows "
        "(--structured-compile-timeout-ms); simplify it");
  }
  return masker;
}

Result<std::shared_ptr<TokenMasker>> ConstraintCompiler::Compile(const ConstraintSpec& spec) {
  const std::string key = spec.Key();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.cache_hits;
      return it->second->second;
    }
  }
  // Compiled outside the lock: two workers may compile the same spec once each; the first to
  // finish is kept.
  const auto t0 = std::chrono::steady_clock::now();
  KV_ASSIGN_OR_RETURN(std::shared_ptr<TokenMasker> masker, CompileUncached(spec));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.compiled;
  stats_.last_compile_seconds = seconds;
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;
  lru_.emplace_front(key, masker);
  index_[key] = lru_.begin();
  while (lru_.size() > options_.max_cached) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return masker;
}

CompileStats ConstraintCompiler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

ConstraintProcessor::ConstraintProcessor(std::shared_ptr<TokenMasker> masker)
    : masker_(std::move(masker)), state_(masker_->Initial()) {}

void ConstraintProcessor::Process(std::span<float> logits, const TokenHistory& history) {
  const std::span<const TokenId> generated = history.generated();
  for (; consumed_ < generated.size(); ++consumed_) {
    // A refused token (only possible if something outside the mask chose it) leaves an empty
    // state, which allows only the end of generation.
    if (!state_.empty()) masker_->Accept(&state_, generated[consumed_]);
  }
  masker_->Apply(state_, logits);
}

}  // namespace kvserve::structured
