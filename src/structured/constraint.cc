#include "structured/constraint.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <limits>

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
    case ConstraintKind::kToolCalls: return "tool_calls";
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
  if (kind == ConstraintKind::kToolCalls) {
    key += fmt::format("|tools={}:{}:{}", ToolFormatName(tool_format), tool_lazy ? 1 : 0,
                       parallel_tool_calls ? 1 : 0);
    for (const ToolSpec& t : tools) {
      key += fmt::format("|{}:{}:{}:", t.name.size(), t.parameters.size(), t.strict ? 1 : 0);
      key += t.name;
      key += t.parameters;
    }
  }
  return key;
}

Trigger ToolCallTrigger(ToolFormat format) {
  switch (format) {
    case ToolFormat::kHermes: return Trigger{"<tool_call>", false};
    case ToolFormat::kLlama3Json: return Trigger{"{", true};
    case ToolFormat::kNone: break;
  }
  return Trigger{};
}

namespace {

// The calls of spec.tools in spec.tool_format (kToolCalls).
Result<int> AddToolCallRules(const ConstraintSpec& spec, GrammarBuilder* b) {
  if (spec.tools.empty()) return InvalidArgument("tool calls need at least one tool");
  std::vector<Sequence> calls;
  for (const ToolSpec& tool : spec.tools) {
    nlohmann::ordered_json schema = nlohmann::ordered_json::parse(tool.parameters, nullptr, false);
    if (schema.is_discarded()) {
      return InvalidArgument(fmt::format("tool '{}': parameters are not valid JSON", tool.name));
    }
    JsonSchemaOptions options = spec.json;
    options.strict = tool.strict;
    Result<int> args = CompileJsonSchema(schema, options, b);
    if (!args.ok()) {
      return InvalidArgument(fmt::format("tool '{}': {}", tool.name, args.status().message()));
    }
    // The name goes in as JSON string content; names are [A-Za-z0-9_-], nothing to escape.
    Sequence call;
    switch (spec.tool_format) {
      case ToolFormat::kHermes:
        b->AppendLiteral("<tool_call>\n{\"name\": \"" + tool.name + "\", \"arguments\": ", &call);
        call.push_back(GrammarBuilder::Ref(*args));
        b->AppendLiteral("}\n</tool_call>", &call);
        break;
      case ToolFormat::kLlama3Json:
        b->AppendLiteral("{\"name\": \"" + tool.name + "\", \"parameters\": ", &call);
        call.push_back(GrammarBuilder::Ref(*args));
        b->AppendLiteral("}", &call);
        break;
      case ToolFormat::kNone:
        return InvalidArgument("the chat template defines no tool-call format");
    }
    calls.push_back(std::move(call));
  }
  const int call = b->Alternatives("tool_call", std::move(calls));
  if (spec.tool_format != ToolFormat::kHermes || !spec.parallel_tool_calls) return call;
  Sequence next = b->Literal("\n");
  next.push_back(GrammarBuilder::Ref(call));
  const int more = b->Star("more_tool_calls", std::move(next));
  return b->Alternatives("tool_calls", {Sequence{GrammarBuilder::Ref(call),
                                                 GrammarBuilder::Ref(more)}});
}

}  // namespace

Result<Grammar> BuildGrammar(const ConstraintSpec& spec,
                             std::chrono::steady_clock::time_point deadline) {
  GrammarBuilder b;
  b.SetDeadline(deadline);
  int root = -1;
  switch (spec.kind) {
    case ConstraintKind::kJsonSchema: {
      nlohmann::ordered_json schema = nlohmann::ordered_json::parse(spec.text, nullptr, false);
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
    case ConstraintKind::kToolCalls: {
      KV_ASSIGN_OR_RETURN(root, AddToolCallRules(spec, &b));
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
  Trigger trigger;
  if (spec.kind == ConstraintKind::kToolCalls && spec.tool_lazy) {
    trigger = ToolCallTrigger(spec.tool_format);
  }
  auto masker = std::make_shared<TokenMasker>(std::move(g), vocab_, std::move(trigger));
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
    : masker_(std::move(masker)),
      state_(masker_->Initial()),
      active_(masker_->trigger().text.empty()) {
  if (masker_->grammar().has_unique_arrays()) unique_.emplace();
}

void ConstraintProcessor::AcceptBytes(std::string_view bytes) {
  if (!unique_) {
    masker_->AcceptBytes(&state_, bytes);
    return;
  }
  // The grammar takes the bytes in runs; a run ends before each '[' outside a string, where
  // the state says whether that '[' opens a unique array.
  size_t run = 0;
  for (size_t k = 0; k < bytes.size(); ++k) {
    const auto b = static_cast<uint8_t>(bytes[k]);
    bool opens = false;
    if (b == '[' && !unique_->InString()) {
      if (!masker_->AcceptBytes(&state_, bytes.substr(run, k - run))) return;
      run = k;
      opens = masker_->OpensUniqueArray(state_);
    }
    if (!unique_->Feed(b, opens)) {
      state_.clear();  // a duplicate item: only possible past the mask
      return;
    }
  }
  masker_->AcceptBytes(&state_, bytes.substr(run));
}

void ConstraintProcessor::MaskDuplicates(std::span<float> logits) {
  const TokenVocab& vocab = masker_->vocab();
  std::string ahead;
  const auto check = [&](TokenId t) {
    float& logit = logits[static_cast<size_t>(t)];
    if (!std::isfinite(logit)) return;
    const std::string& piece = vocab.piece(t);
    UniqueItemsTracker::TrialOutcome outcome = unique_->Trial(piece);
    if (outcome == UniqueItemsTracker::TrialOutcome::kAtRisk) {
      // The token leaves an item that equals an earlier one if it ends now: a dead end unless
      // the grammar allows a next byte that does not end it so (one byte of lookahead: a
      // number of bounded digits, a string of bounded length).
      State after = state_;
      outcome = UniqueItemsTracker::TrialOutcome::kDuplicate;
      if (masker_->AcceptBytes(&after, piece)) {
        const ByteSet next = masker_->NextBytes(after);
        for (int b = 0; b < 256; ++b) {
          if (!next.Has(static_cast<uint8_t>(b))) continue;
          ahead.assign(piece).push_back(static_cast<char>(b));
          if (unique_->Trial(ahead) != UniqueItemsTracker::TrialOutcome::kDuplicate) {
            outcome = UniqueItemsTracker::TrialOutcome::kFine;
            break;
          }
        }
      }
    }
    if (outcome == UniqueItemsTracker::TrialOutcome::kDuplicate) {
      logit = -std::numeric_limits<float>::infinity();
    }
  };
  // Candidates: in a unique array, inside a string the tokens with a '"', elsewhere those with a
  // byte that ends a value, and in both the tokens spelling an earlier item's rest (at risk
  // without ending anything); inside an array or object item only tokens that close one;
  // outside, only tokens that open an array and write an item. Each a bitset, met with the
  // grammar's mask in one pass.
  if (!unique_->InUniqueArray() && !unique_->InItem()) {
    for (const TokenId t : vocab.open_list_tokens()) check(t);
    return;
  }
  const TokenBits* filter = &vocab.close_tokens();
  if (unique_->InUniqueArray()) {
    for (const std::string& rest : unique_->Remainders()) {
      for (const TokenId t : vocab.TokensSpelling(rest)) check(t);
    }
    filter = unique_->InString() ? &vocab.quote_tokens() : &vocab.ender_tokens();
  }
  candidates_.clear();
  masker_->AllowedIn(state_, *filter, &candidates_);
  for (const TokenId t : candidates_) check(t);
}

void ConstraintProcessor::Advance(const TokenHistory& history) {
  const std::span<const TokenId> generated = history.generated();
  if (!active_) {
    // Lazy: look for the trigger in the text so far; from its first byte on the grammar holds.
    const Trigger& trigger = masker_->trigger();
    const TokenVocab& vocab = masker_->vocab();
    for (; consumed_ < generated.size() && !active_ && !gave_up_; ++consumed_) {
      const TokenId t = generated[consumed_];
      if (t < 0 || t >= vocab.size() || vocab.is_eog(t)) continue;
      text_ += vocab.piece(t);
      const size_t at = trigger.at_start ? (text_.starts_with(trigger.text) ? 0 : std::string::npos)
                                         : text_.find(trigger.text);
      if (at != std::string::npos) {
        active_ = true;
        AcceptBytes(std::string_view(text_).substr(at));
        text_.clear();
      } else if (text_.size() >= trigger.text.size()) {
        if (trigger.at_start) {
          gave_up_ = true;
        } else {  // only a partial trigger at the end can still matter
          text_.erase(0, text_.size() - (trigger.text.size() - 1));
        }
      }
    }
  }
  if (!active_) return;
  for (; consumed_ < generated.size(); ++consumed_) {
    // A refused token (only possible if something outside the mask chose it) leaves an empty
    // state, which allows only the end of generation.
    if (state_.empty()) continue;
    const TokenId t = generated[consumed_];
    if (unique_ && t >= 0 && t < masker_->vocab().size() && !masker_->vocab().is_eog(t) &&
        !masker_->vocab().piece(t).empty()) {
      AcceptBytes(masker_->vocab().piece(t));
    } else {
      masker_->Accept(&state_, t);
    }
  }
}

void ConstraintProcessor::Process(std::span<float> logits, const TokenHistory& history) {
  Advance(history);
  if (!active_) return;
  masker_->Apply(state_, logits);
  if (unique_ && !state_.empty()) MaskDuplicates(logits);
}

std::string ConstraintProcessor::ForcedBytes(const TokenHistory& history, size_t max_bytes) {
  Advance(history);
  if (!active_ || state_.empty() || (unique_ && unique_->InUniqueArray())) return {};
  return masker_->ForcedBytes(state_, max_bytes);
}

}  // namespace kvserve::structured
