// kvserve run: generate text from a prompt. kvserve logits: dump prompt logits (reference checks).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "engine_options.h"
#include "engine/engine_core.h"
#include "engine/generator.h"
#include "engine/synthetic_model.h"
#include "structured/constraint.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::cli {
namespace {


struct RunOptions {
  EngineOptions engine;
  std::string prompt, prompt_file, prompt_ids, system, chat_template;
  int n = 128;
  float temp = 0.8f, top_p = 1.0f, min_p = 0.0f, repeat_penalty = 1.0f;
  int top_k = 40;
  int64_t seed = -1;
  bool chat = false, json = false, ignore_eos = false;
  std::string speculative_config;
  // Structured output (at most one).
  std::string json_schema_file, regex, grammar_file;
  std::vector<std::string> choices;
  bool json_object = false;
  bool flexible_whitespace = false;
  int compile_timeout_ms = 10000;
  JumpForwardOptions jump_forward;
  KvEvictionOptions kv_eviction;
};



std::vector<TokenId> ParseIds(const std::string& s) {
  std::vector<TokenId> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<TokenId>(v));
    } catch (const std::exception&) {
      Fail(fmt::format("'{}' is not a token id (expected comma-separated integers)", item));
    }
  }
  return ids;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail(fmt::format("cannot read '{}'", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<TokenId> BuildPrompt(const RunOptions& o, const Tokenizer& tok) {
  if (!o.prompt_ids.empty()) return ParseIds(o.prompt_ids);
  std::string text = o.prompt_file.empty() ? o.prompt : ReadFile(o.prompt_file);
  if (!o.chat) return tok.Encode(text, /*add_special=*/true, /*parse_special=*/false);
  Result<ChatTemplate> tmpl = !o.chat_template.empty() ? ChatTemplate::FromName(o.chat_template)
                              : tok.spec().chat_template.empty()
                                  ? Result<ChatTemplate>(NotFound(
                                        "the model has no chat template; pass --chat-template NAME"))
                                  : ChatTemplate::Detect(tok.spec().chat_template);
  if (!tmpl.ok()) Fail(tmpl.status().ToString());
  std::vector<ChatMessage> msgs;
  if (!o.system.empty()) msgs.push_back({"system", o.system});
  msgs.push_back({"user", text});
  auto ids = EncodeChat(*tmpl, tok, msgs, /*add_generation_prompt=*/true);
  if (!ids.ok()) Fail(ids.status().ToString());
  return std::move(ids).value();
}

SamplingParams Sampling(const RunOptions& o) {
  SamplingParams p;
  p.temperature = o.temp;
  p.top_k = o.top_k;
  p.top_p = o.top_p;
  p.min_p = o.min_p;
  p.repetition_penalty = o.repeat_penalty;
  if (o.seed >= 0) {
    p.seed = static_cast<uint64_t>(o.seed);
    p.has_seed = true;
  }
  return p;
}

// The fields `run --json` prints for any generation.
nlohmann::json RunJson(const std::vector<TokenId>& prompt, const std::vector<TokenId>& ids,
                       const std::string& text, FinishReason reason, double prompt_tps,
                       double generation_tps, int threads, int64_t poll_us) {
  nlohmann::json j;
  j["prompt_ids"] = prompt;
  j["ids"] = ids;
  j["text"] = text;
  j["finish_reason"] = FinishReasonName(reason);
  j["prompt_tokens"] = prompt.size();
  j["generated_tokens"] = ids.size();
  j["prompt_tokens_per_second"] = prompt_tps;
  j["generation_tokens_per_second"] = generation_tps;
  j["threads"] = threads;
  j["poll_us"] = poll_us;
  return j;
}

// The constraint --json-schema / --json-object / --regex / --grammar-file / --choice ask for,
// compiled for this tokenizer; null without one.
std::shared_ptr<structured::TokenMasker> RunConstraint(const RunOptions& o, const Tokenizer& tok) {
  using structured::ConstraintKind;
  structured::ConstraintSpec spec;
  int ways = 0;
  if (!o.json_schema_file.empty()) {
    ++ways;
    spec.kind = ConstraintKind::kJsonSchema;
    spec.text = ReadFile(o.json_schema_file);
  }
  if (o.json_object) {
    ++ways;
    spec.kind = ConstraintKind::kJsonObject;
  }
  if (!o.regex.empty()) {
    ++ways;
    spec.kind = ConstraintKind::kRegex;
    spec.text = o.regex;
  }
  if (!o.grammar_file.empty()) {
    ++ways;
    spec.kind = ConstraintKind::kGrammar;
    spec.text = ReadFile(o.grammar_file);
  }
  if (!o.choices.empty()) {
    ++ways;
    spec.kind = ConstraintKind::kChoice;
    spec.choices = o.choices;
  }
  spec.json.flexible_whitespace = o.flexible_whitespace;
  if (ways == 0) return nullptr;
  if (ways > 1) Fail("use at most one of --json-schema, --json-object, --regex, --grammar-file, --choice");
  structured::ConstraintCompiler compiler(
      structured::TokenVocab::FromTokenizer(tok),
      structured::ConstraintCompilerOptions{std::chrono::milliseconds(o.compile_timeout_ms)});
  auto masker = compiler.Compile(spec);
  if (!masker.ok()) Fail(fmt::format("{}: {}", structured::ConstraintKindName(spec.kind),
                                     masker.status().message()));
  return *masker;
}

void PrintJson(const nlohmann::json& j) {
  fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

bool HasConstraint(const RunOptions& o) {
  return !o.json_schema_file.empty() || !o.regex.empty() || !o.grammar_file.empty() ||
         !o.choices.empty() || o.json_object;
}

// With --speculative-config, or a constraint and jump-forward: one request on an EngineCore
// (the serving engine, which verifies drafts and forced tokens inside its steps) instead of
// the Generator.
void RunOnEngine(const RunOptions& o) {
  auto spec = o.speculative_config.empty() ? Result<SpecConfig>(SpecConfig{})
                                           : ParseSpecConfig(o.speculative_config);
  if (!spec.ok()) Fail("--speculative-config: " + spec.status().message());
  LoadedModel m = LoadModel(o.engine, /*need_tokenizer=*/true);
  const Tokenizer& tok = *m.tokenizer;
  EngineConfig c = OneSequenceEngineConfig(o.engine);
  c.spec = *spec;
  ApplyJumpForwardOptions(o.jump_forward, &c);
  c.kv_eviction = KvEvictionFromOptions(o.kv_eviction);
  auto core = EngineCore::Create(std::move(m.model), c, &tok);
  if (!core.ok()) Fail(core.status().ToString());
  EngineRequest req;
  req.prompt = BuildPrompt(o, tok);
  req.max_tokens = o.n;
  req.sampling = Sampling(o);
  req.ignore_eos = o.ignore_eos;
  req.constraint = RunConstraint(o, tok);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  if (Status st = (*core)->Add(RequestId(0), req, start); !st.ok()) Fail(st.ToString());
  std::vector<TokenId> ids;
  std::string text;
  RequestMetrics metrics;
  FinishReason reason = FinishReason::kLength;
  Clock::time_point first, last;
  std::vector<RequestOutput> events;
  while ((*core)->HasWork()) {
    if (Status st = (*core)->Step(&events); !st.ok()) Fail(st.ToString());
    for (RequestOutput& e : events) {
      if (!e.new_tokens.empty()) {
        if (ids.empty()) first = Clock::now();
        last = Clock::now();
      }
      ids.insert(ids.end(), e.new_tokens.begin(), e.new_tokens.end());
      text += e.text;
      if (!o.json) {
        std::fwrite(e.text.data(), 1, e.text.size(), stdout);
        std::fflush(stdout);
      }
      if (e.finished) {
        metrics = e.metrics;
        reason = e.finish_reason;
        if (e.finish_reason == FinishReason::kError) Fail(e.error.ToString());
      }
    }
    events.clear();
  }
  const double prefill = std::chrono::duration<double>(first - start).count();
  const double decode = std::chrono::duration<double>(last - first).count();
  const double pp = prefill > 0 ? static_cast<double>(req.prompt.size()) / prefill : 0;
  const double tg = decode > 0 && ids.size() > 1 ? static_cast<double>(ids.size() - 1) / decode : 0;
  const EngineStats stats = (*core)->stats();
  const double rate = metrics.draft_tokens > 0
                          ? static_cast<double>(metrics.accepted_tokens) / metrics.draft_tokens
                          : 0;
  const double mean_len =
      stats.spec.num_drafts > 0
          ? 1.0 + static_cast<double>(stats.spec.num_accepted_tokens) / stats.spec.num_drafts
          : 1.0;
  if (o.json) {
    const int threads = c.num_threads > 0 ? c.num_threads : ThreadPool::DefaultThreads();
    nlohmann::json j = RunJson(req.prompt, ids, text, reason, pp, tg, threads,
                               PoolSpin(c.poll_us).count());
    j["speculative_method"] = spec->enabled() ? SpecMethodName(spec->method) : "off";
    j["jump_forward_tokens"] = stats.jump_forward.num_forced_tokens;
    j["jump_forward_accepted"] = stats.jump_forward.num_accepted_tokens;
    j["kv_eviction"] = KvEvictionPolicyName(c.kv_eviction.policy);
    j["evicted_tokens"] = metrics.evicted_tokens;
    j["kv_shifts"] = stats.kv_eviction.num_shifts;
    j["kv_shift_ms"] = stats.kv_eviction.num_shifts > 0
                           ? 1e3 * stats.kv_eviction.shift_seconds / stats.kv_eviction.num_shifts
                           : 0.0;
    j["draft_tokens"] = metrics.draft_tokens;
    j["accepted_tokens"] = metrics.accepted_tokens;
    j["acceptance_rate"] = rate;
    j["num_drafts"] = stats.spec.num_drafts;
    j["mean_acceptance_length"] = mean_len;
    if (!stats.spec.step_seconds_by_rows.empty()) {  // the adaptive policy's cost table
      nlohmann::json ms = nlohmann::json::array();
      for (double s : stats.spec.step_seconds_by_rows) ms.push_back(1e3 * s);
      j["verify_step_ms"] = ms;
      j["verify_calibration_ms"] = 1e3 * stats.spec.calibration_seconds;
    }
    PrintJson(j);
  } else {
    fmt::print("\n");
    fmt::print(stderr,
               "\n[{} prompt tokens at {:.1f} tok/s, {} generated at {:.1f} tok/s, {}; {} drafts, "
               "{} accepted ({:.0f}%), mean acceptance length {:.2f}; jump-forward {} of {} "
               "forced tokens]\n",
               req.prompt.size(), pp, ids.size(), tg, FinishReasonName(reason),
               metrics.draft_tokens, metrics.accepted_tokens, rate * 100, mean_len,
               stats.jump_forward.num_accepted_tokens, stats.jump_forward.num_forced_tokens);
  }
}

void RunGenerate(const RunOptions& o) {
  if (!o.speculative_config.empty() || (HasConstraint(o) && !o.jump_forward.off) ||
      o.kv_eviction.policy != "none") {
    return RunOnEngine(o);
  }
  Loaded l = Load(o.engine, true);
  const Tokenizer& tok = *l.tokenizer;
  GenerateRequest req;
  req.prompt = BuildPrompt(o, tok);
  req.max_tokens = o.n;
  req.sampling = Sampling(o);
  if (!o.ignore_eos) req.stop_ids = tok.spec().eog_ids;
  req.constraint = RunConstraint(o, tok);
  StreamingDetokenizer detok(tok);
  std::string text;
  auto on_token = [&](TokenId id, const SampleOutput&) {
    const std::string piece = detok.Push(id);
    text += piece;
    if (!o.json) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  auto result = l.generator->Generate(req, on_token);
  if (!result.ok()) Fail(result.status().ToString());
  const std::string tail = detok.Flush();
  text += tail;
  const double pp = result->prefill_seconds > 0 ? result->prompt_tokens / result->prefill_seconds : 0;
  const size_t decoded = result->ids.empty() ? 0 : result->ids.size() - 1;
  const double tg = result->decode_seconds > 0 ? decoded / result->decode_seconds : 0;
  if (o.json) {
    PrintJson(RunJson(req.prompt, result->ids, text, result->finish_reason, pp, tg,
                      l.generator->num_threads(), l.generator->poll_us()));
  } else {
    fmt::print("{}\n", tail);
    fmt::print(stderr, "\n[{} prompt tokens at {:.1f} tok/s, {} generated at {:.1f} tok/s, {}]\n",
               result->prompt_tokens, pp, result->ids.size(), tg,
               FinishReasonName(result->finish_reason));
  }
}

struct LogitsOptions {
  EngineOptions engine;
  std::string ids, out;
  int chunk = 0;
};

void RunLogits(const LogitsOptions& o) {
  Loaded l = Load(o.engine, false);
  const std::vector<TokenId> ids = ParseIds(o.ids);
  auto logits = l.generator->PromptLogits(ids, o.chunk);
  if (!logits.ok()) Fail(logits.status().ToString());
  std::ofstream f(o.out, std::ios::binary);
  f.write(reinterpret_cast<const char*>(logits->data()),
          static_cast<std::streamsize>(logits->size() * sizeof(float)));
  if (!f) Fail(fmt::format("cannot write '{}'", o.out));
  fmt::print("{{\"tokens\": {}, \"vocab\": {}}}\n", ids.size(), l.generator->model().config().vocab);
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt");
  AddEngineOptions(cmd, o->engine);
  auto* p = cmd->add_option("-p,--prompt", o->prompt, "Prompt text");
  auto* pf = cmd->add_option("-f,--prompt-file", o->prompt_file, "Read the prompt from a file");
  auto* pi = cmd->add_option("--prompt-ids", o->prompt_ids, "Prompt as comma-separated token ids");
  p->excludes(pf)->excludes(pi);
  pf->excludes(pi);
  cmd->add_option("-n,--n-predict", o->n, "Tokens to generate");
  cmd->add_option("--temp", o->temp, "Temperature (0 = greedy)");
  cmd->add_option("--top-k", o->top_k, "Top-k (0 = off)");
  cmd->add_option("--top-p", o->top_p, "Top-p (1 = off)");
  cmd->add_option("--min-p", o->min_p, "Min-p (0 = off)");
  cmd->add_option("--repeat-penalty", o->repeat_penalty, "Repetition penalty (1 = off)");
  cmd->add_option("-s,--seed", o->seed, "Random seed (default: random)");
  cmd->add_flag("--chat", o->chat, "Wrap the prompt as a user message in the chat template");
  cmd->add_option("--system", o->system, "System message (with --chat)");
  cmd->add_option("--chat-template", o->chat_template, "Chat template name (overrides the model's)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating past end-of-generation tokens");
  cmd->add_flag("--json", o->json, "Print one JSON object instead of streaming text");
  cmd->add_option("--json-schema", o->json_schema_file,
                  "Constrain the output to JSON valid against the schema in this file");
  cmd->add_flag("--json-object", o->json_object, "Constrain the output to a JSON object");
  cmd->add_flag("--json-whitespace", o->flexible_whitespace,
                "With --json-schema or --json-object: allow whitespace between JSON tokens "
                "(default: compact JSON)");
  cmd->add_option("--regex", o->regex, "Constrain the output to match this regular expression");
  cmd->add_option("--grammar-file", o->grammar_file,
                  "Constrain the output to this GBNF grammar (llama.cpp's syntax, start rule root)");
  cmd->add_option("--choice", o->choices,
                  "Constrain the output to one of these strings (repeat the flag)");
  AddJumpForwardOptions(cmd, o->jump_forward);
  AddKvEvictionOptions(cmd, o->kv_eviction);
  cmd->add_option("--structured-compile-timeout-ms", o->compile_timeout_ms,
                  "Time limit for compiling the constraint (default 10000)")
      ->check(CLI::Range(1, 600000));
  cmd->add_option("--speculative-config", o->speculative_config,
                  "Speculative decoding as JSON (as for serve; docs/speculative.md); --json then "
                  "reports draft_tokens, accepted_tokens and acceptance_rate");
  cmd->callback([o] { RunGenerate(*o); });
}

void AddLogitsCommand(CLI::App& app) {
  auto o = std::make_shared<LogitsOptions>();
  CLI::App* cmd = app.add_subcommand("logits", "Write the logits of every prompt position (float32, [n, vocab])");
  AddEngineOptions(cmd, o->engine);
  cmd->add_option("--ids", o->ids, "Comma-separated token ids")->required();
  cmd->add_option("--out", o->out, "Output file")->required();
  cmd->add_option("--chunk", o->chunk, "Tokens per forward pass (0 = as many as fit)");
  cmd->callback([o] { RunLogits(*o); });
}

}  // namespace kvserve::cli
