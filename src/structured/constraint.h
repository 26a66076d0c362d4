// Constraints as requests name them, compiled into token maskers, cached by content, and
// applied in the sampler.
//
// ConstraintSpec is the plain value a request carries (the server and `run` fill it from
// response_format, structured_outputs, guided_* or --json-schema / --regex / --grammar-file /
// --choice). ConstraintCompiler turns it into a TokenMasker for one vocabulary:
//   - within a time limit (a pathological schema fails with InvalidArgument, it never stalls);
//   - cached by content (kind, text, options), so repeated schemas compile once and share their
//     mask cache across requests;
//   - with the start state's mask computed at compile time, off the engine thread.
// ConstraintProcessor is the LogitsProcessor a sequence's Sampler runs first: it advances the
// parse over the tokens the sequence generated since the last step and masks the logits. Where
// the grammar has unique arrays it also tracks their items (unique_items.h) and masks the
// tokens that would complete a duplicate.
//
// Thread safety: ConstraintCompiler is thread-safe (server workers compile concurrently);
// a ConstraintProcessor belongs to one Sampler.
#pragma once

#include <chrono>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvserve/status.h"
#include "sample/logits_processor.h"
#include "structured/json_schema.h"
#include "structured/token_masker.h"
#include "structured/unique_items.h"
#include "tokenizer/chat_template.h"

namespace kvserve::structured {

enum class ConstraintKind { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar, kToolCalls };
const char* ConstraintKindName(ConstraintKind kind);  // "json_schema", "json_object", ...

// A function the model may call: its name and its parameters' JSON Schema (text).
struct ToolSpec {
  std::string name;
  std::string parameters;
  // additionalProperties defaults to false, as in OpenAI's strict mode: a call carries the
  // arguments the function declares (an explicit additionalProperties still holds).
  bool strict = true;
};

struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::kJsonObject;
  std::string text;                  // the schema (JSON text), regex or GBNF grammar
  std::vector<std::string> choices;  // kChoice
  JsonSchemaOptions json;
  // kToolCalls: calls of `tools` in the chat family's format (see ToolFormat), their arguments
  // valid against each tool's parameters. Lazy (tool_choice "auto"): free text until the
  // format's trigger ("<tool_call>" for Hermes, "{" at the start for Llama 3), then calls.
  // Otherwise ("required" or a named tool, given as the only entry of `tools`) calls from the
  // first token. `parallel`: Hermes may write several calls.
  ToolFormat tool_format = ToolFormat::kNone;
  std::vector<ToolSpec> tools;
  bool tool_lazy = false;
  bool parallel_tool_calls = true;

  // The cache key: every field that changes the compiled result.
  std::string Key() const;
};

struct ConstraintCompilerOptions {
  std::chrono::milliseconds compile_timeout{10000};
  size_t max_cached = 256;  // compiled constraints kept (least recently used go first)
};

struct CompileStats {
  int64_t compiled = 0;
  int64_t cache_hits = 0;
  double last_compile_seconds = 0;
};

class ConstraintCompiler {
 public:
  ConstraintCompiler(std::shared_ptr<const TokenVocab> vocab, ConstraintCompilerOptions options);

  // InvalidArgument with a message for the user (bad schema, regex or grammar; over the limit).
  Result<std::shared_ptr<TokenMasker>> Compile(const ConstraintSpec& spec);
  CompileStats stats() const;
  const TokenVocab& vocab() const { return *vocab_; }

 private:
  Result<std::shared_ptr<TokenMasker>> CompileUncached(const ConstraintSpec& spec) const;

  std::shared_ptr<const TokenVocab> vocab_;
  ConstraintCompilerOptions options_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<TokenMasker>>> lru_;  // guarded by mu_
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;      // guarded by mu_
  CompileStats stats_;                                                   // guarded by mu_
};

// Builds the grammar of a spec (no vocabulary needed): for tests and tools.
Result<Grammar> BuildGrammar(const ConstraintSpec& spec,
                             std::chrono::steady_clock::time_point deadline =
                                 std::chrono::steady_clock::time_point::max());

// The trigger of a lazy tool-call constraint for a format (see ConstraintSpec).
Trigger ToolCallTrigger(ToolFormat format);

class ConstraintProcessor final : public LogitsProcessor {
 public:
  explicit ConstraintProcessor(std::shared_ptr<TokenMasker> masker);
  void Process(std::span<float> logits, const TokenHistory& history) override;
  // The parse state after the tokens seen so far (tests).
  const State& state() const { return state_; }
  const TokenVocab& vocab() const { return masker_->vocab(); }
  // A lazy constraint: whether its trigger has appeared (always true for others).
  bool active() const { return active_; }
  // The bytes every continuation must start with after the tokens in `history` (at most
  // max_bytes; empty when there is a choice, the structure may end, a lazy constraint has
  // not triggered, or inside a unique array): jump-forward's input.
  std::string ForcedBytes(const TokenHistory& history, size_t max_bytes);

 private:
  void Advance(const TokenHistory& history);
  // Advances the parse (and the unique items) over output bytes.
  void AcceptBytes(std::string_view bytes);
  // Masks the tokens the grammar allows that would complete a duplicate item.
  void MaskDuplicates(std::span<float> logits);

  std::shared_ptr<TokenMasker> masker_;
  std::optional<UniqueItemsTracker> unique_;  // where the grammar has unique arrays
  std::vector<TokenId> candidates_;           // MaskDuplicates scratch
  State state_;
  size_t consumed_ = 0;  // generated tokens already advanced over
  bool active_ = true;
  std::string text_;     // lazy, before the trigger: the output's last bytes (a partial trigger)
  bool gave_up_ = false;  // lazy at_start: the output began otherwise, it stays free
};

}  // namespace kvserve::structured
