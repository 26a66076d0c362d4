#include "server/engine_bridge.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "util/api_keys.h"

namespace kvserve {

namespace {

void AddTierTokens(const std::vector<TierTokens>& by_tier, UsageOut* usage) {
  for (const TierTokens& t : by_tier) {
    auto it = std::find_if(usage->cached_tokens_by_tier.begin(),
                           usage->cached_tokens_by_tier.end(),
                           [&](const auto& p) { return p.first == t.tier; });
    if (it == usage->cached_tokens_by_tier.end()) {
      usage->cached_tokens_by_tier.emplace_back(t.tier, t.tokens);
    } else {
      it->second += t.tokens;
    }
  }
}

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

const char* FinishName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "abort";
    case FinishReason::kError: return "error";
  }
  return "error";
}

ApiError FromStatus(const Status& s, const char* param) {
  ApiError e = BadRequest(s.message(), param);
  switch (s.code()) {
    case StatusCode::kOutOfRange:
    case StatusCode::kResourceExhausted:
      e.code = "context_length_exceeded";
      break;
    case StatusCode::kInvalidArgument:
      break;
    default:
      e.status = 500;
      e.type = "server_error";
      e.param.clear();
  }
  return e;
}

constexpr int64_t kFiveMinutesMs = 5 * 60 * 1000;
constexpr int64_t kDayMs = 24 * 60 * 60 * 1000;


ApiError CacheNotFound(const std::string& id) {
  ApiError e;
  e.status = 404;
  e.message = fmt::format("no cache '{}': it never existed, expired, or belongs to another key", id);
  e.code = "cache_not_found";
  return e;
}

// A hold the KV manager refused: past the retained share (409), or an engine that has stopped.
ApiError CacheFull(const Status& s) {
  ApiError e;
  e.message = std::string(s.message());
  if (s.code() == StatusCode::kResourceExhausted) {
    e.status = 409;
    e.code = "cache_full";
  } else {
    e.status = 503;
    e.type = "server_error";
    e.code = "server_overloaded";
  }
  return e;
}

}  // namespace

std::string NewResponseId(std::string_view prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

EngineBridge::EngineBridge(Engine* engine, const Tokenizer* tokenizer,
                           std::optional<ChatTemplate> tmpl, BridgeConfig config,
                           ServerMetrics* metrics)
    : engine_(engine),
      tokenizer_(tokenizer),
      template_(std::move(tmpl)),
      config_(std::move(config)),
      metrics_(metrics) {
  if (template_ && template_->reply_format() == ReplyFormat::kHarmony) {
    harmony_ = HarmonyTokens::Find(*tokenizer_);
  }
}

structured::ConstraintCompiler& EngineBridge::constraints() const {
  std::call_once(constraints_once_, [this] {
    constraints_ = std::make_unique<structured::ConstraintCompiler>(
        structured::TokenVocab::FromTokenizer(*tokenizer_),
        structured::ConstraintCompilerOptions{
            std::chrono::milliseconds(config_.structured_compile_timeout_ms)});
  });
  return *constraints_;
}

uint64_t MinResponseBytesPerToken(Endpoint endpoint, int top_logprobs) {
  constexpr uint64_t kChunk = 60;  // {"choices":[{"index":0,"text":"…"}]} and the SSE framing
  // Chat: {"token":"…","logprob":-1.2,"bytes":[…]}; completions: "…": -1.2.
  const uint64_t per_logprob = endpoint == Endpoint::kChat ? 40 : 10;
  return kChunk + (top_logprobs < 0 ? 0 : per_logprob * (1 + static_cast<uint64_t>(top_logprobs)));
}

std::optional<ApiError> EngineBridge::EncodeChat(const std::vector<ChatMessage>& messages,
                                                 bool add_generation_prompt,
                                                 std::vector<TokenId>* ids,
                                                 std::span<const nlohmann::ordered_json> tools,
                                                 ChatRenderOptions options) const {
  if (!template_) return BadRequest("the model has no chat template", "messages");
  if (options.date.empty()) options.date = UtcDate(NowMs());
  Result<std::vector<TokenId>> encoded =
      kvserve::EncodeChat(*template_, *tokenizer_, messages, add_generation_prompt, tools, options);
  if (!encoded.ok()) return BadRequest(encoded.status().message(), "messages");
  *ids = std::move(encoded).value();
  return std::nullopt;
}

std::optional<ApiError> EngineBridge::EncodePrompt(const PromptInput& prompt, bool add_special,
                                                   std::vector<TokenId>* ids) const {
  if (!prompt.is_ids) {
    *ids = tokenizer_->Encode(prompt.text, add_special, /*parse_special=*/true);
    return std::nullopt;
  }
  const int vocab = tokenizer_->vocab_size();
  for (int32_t id : prompt.ids) {
    if (id < 0 || id >= vocab) {
      return BadRequest(fmt::format("token id {} is outside the vocabulary [0, {})", id, vocab),
                        "prompt");
    }
  }
  ids->assign(prompt.ids.begin(), prompt.ids.end());
  return std::nullopt;
}

std::optional<ApiError> EngineBridge::Start(const GenerationParams& p,
                                            std::unique_ptr<Generation>* out) {
  const bool chat = p.endpoint == Endpoint::kChat;
  const char* param = chat ? "messages" : "prompt";
  if (p.n > engine_->config().max_num_seqs) {
    return BadRequest(fmt::format("'n' is {}; this server runs at most {} sequences at once "
                                  "(--max-num-seqs)",
                                  p.n, engine_->config().max_num_seqs),
                      "n");
  }
  std::vector<std::vector<TokenId>> prompts;
  std::vector<std::string> echoes;
  // One date for the prompt and the prefixes of its breakpoints, whatever the clock does.
  const ChatRenderOptions render{.date = UtcDate(NowMs()), .reasoning_effort = p.reasoning_effort};
  // Harmony replies (gpt-oss): each choice's tokens are split into reasoning and content.
  const bool harmony = chat && harmony_.has_value();
  // Tool calls: constrained to the family's call syntax ("required", a named tool; "auto" from
  // the syntax's trigger on) and parsed out of the text into message.tool_calls.
  const bool tool_calls = chat && p.tool_choice != GenerationParams::ToolChoice::kNone;
  const ToolFormat format = template_ ? template_->tool_format() : ToolFormat::kNone;
  std::optional<structured::ConstraintSpec> tool_constraint;
  std::vector<std::string> tool_names;
  if (tool_calls) {
    if (format == ToolFormat::kNone) {
      return BadRequest(fmt::format("the chat template '{}' defines no tool-call format; tools "
                                    "work with chatml (Qwen, Hermes) and llama3 (--chat-template)",
                                    template_ ? template_->name() : std::string("(none)")),
                        "tools");
    }
    structured::ConstraintSpec spec;
    spec.kind = structured::ConstraintKind::kToolCalls;
    spec.tool_format = format;
    spec.tool_lazy = p.tool_choice == GenerationParams::ToolChoice::kAuto;
    spec.parallel_tool_calls = p.parallel_tool_calls;
    for (const structured::ToolSpec& t : p.tool_specs) {
      tool_names.push_back(t.name);
      if (p.tool_choice != GenerationParams::ToolChoice::kNamed || t.name == p.tool_choice_name) {
        spec.tools.push_back(t);
      }
    }
    tool_constraint = std::move(spec);
  }
  // An explicit cache leads the prompt: its messages (chat) or its tokens (completions).
  std::optional<ExplicitCache> cache;
  if (!p.cached_content.empty()) {
    ExplicitCache c;
    if (auto e = GetCache(p.tenant, p.cached_content, &c)) {
      e->param = "cached_content";
      return e;
    }
    if (c.chat != chat) {
      return BadRequest(fmt::format("cache '{}' was made from {}; use it with {}", c.id,
                                    c.chat ? "messages" : "a prompt",
                                    c.chat ? "/v1/chat/completions" : "/v1/completions"),
                        "cached_content");
    }
    cache = std::move(c);
  }
  if (chat) {
    std::vector<ChatMessage> messages = cache ? cache->messages : std::vector<ChatMessage>{};
    messages.insert(messages.end(), p.messages.begin(), p.messages.end());
    prompts.emplace_back();
    if (auto e = EncodeChat(messages, true, &prompts.back(), p.tools, render)) return e;
    echoes.emplace_back();
  } else {
    for (const PromptInput& in : p.prompts) {
      prompts.emplace_back();
      if (auto e = EncodePrompt(in, !cache, &prompts.back())) return e;
      if (cache) prompts.back().insert(prompts.back().begin(), cache->tokens.begin(), cache->tokens.end());
      echoes.push_back(!p.echo ? std::string()
                       : in.is_ids ? tokenizer_->Decode(prompts.back())
                                   : in.text);
    }
  }
  const std::string salt =
      cache ? TenantCacheSalt(cache->tenant, cache->cache_salt) : TenantCacheSalt(p.tenant, p.cache_salt);
  for (const auto& ids : prompts) {
    if (ids.empty()) return BadRequest("the prompt is empty", param);
  }

  // Reserve admission slots for every prompt at once, or refuse the whole request. One request
  // may hold at most a fair share of the places (running plus queued): half of them, or a full
  // batch when that is more. More than that is the client's to fix (a 400 naming the field,
  // never a 503 that invites retrying for ever), and one client cannot fill the queue alone.
  const int k = static_cast<int>(prompts.size());
  const int limit = engine_->config().max_num_seqs + config_.max_queued_requests;
  const int share = std::min(limit, std::max(engine_->config().max_num_seqs, (limit + 1) / 2));
  if (k > share) {
    return BadRequest(fmt::format("this request has {} prompts; one request may hold at most {} "
                                  "of the server's {} places for running and queued requests "
                                  "(--max-num-seqs plus --max-queued-requests): send fewer "
                                  "prompts per request",
                                  k, share, limit),
                      "prompt");
  }
  // A small request must not be able to ask for a response of gigabytes (n x max_tokens x
  // top_logprobs): refuse what is certainly over --max-response-bytes; streams are also cut
  // when they reach it.
  const auto max_tokens_for = [&](const std::vector<TokenId>& prompt) {
    const int prompt_len = static_cast<int>(prompt.size());
    return p.max_tokens.value_or(chat ? std::max(1, max_model_len() - prompt_len) : 16);
  };
  uint64_t floor_bytes = 0;
  for (const auto& ids : prompts) {
    floor_bytes += static_cast<uint64_t>(p.n) * static_cast<uint64_t>(max_tokens_for(ids)) *
                   MinResponseBytesPerToken(p.endpoint, p.logprobs);
  }
  if (floor_bytes > config_.max_response_bytes) {
    return BadRequest(
        fmt::format("this request can produce a response of {} MiB or more ({} choices of up to "
                    "{} tokens{}); the server's limit is {} MiB (--max-response-bytes): lower "
                    "n, max_tokens or top_logprobs",
                    floor_bytes >> 20, static_cast<int64_t>(p.n) * k,
                    p.max_tokens ? std::to_string(*p.max_tokens) : "(the rest of the context)",
                    p.logprobs >= 0 ? fmt::format(" with {} top logprobs each", p.logprobs) : "",
                    config_.max_response_bytes >> 20),
        "max_tokens");
  }
  std::shared_ptr<structured::TokenMasker> constraint;
  if (p.constraint || tool_constraint) {
    Result<std::shared_ptr<structured::TokenMasker>> c =
        constraints().Compile(tool_constraint ? *tool_constraint : *p.constraint);
    if (!c.ok()) return BadRequest(c.status().message(), tool_constraint ? "tools" : p.constraint_param);
    constraint = std::move(c).value();
  }
  int cur = in_flight_.load();
  do {
    if (cur + k > limit || shutting_down()) {
      metrics_->rejected.fetch_add(1);
      ApiError e;
      e.status = 503;
      e.type = "server_error";
      e.code = "server_overloaded";
      e.message = fmt::format("the server is at its limit of {} running and queued requests; "
                              "retry later",
                              limit);
      return e;
    }
  } while (!in_flight_.compare_exchange_weak(cur, cur + k));

  ResponseHeader header{p.endpoint, NewResponseId(chat ? "chatcmpl-" : "cmpl-"),
                        static_cast<int64_t>(std::time(nullptr)), config_.model_name};
  std::unique_ptr<Generation> gen(new Generation(this, p.n, std::move(header)));
  gen->with_logprobs_ = p.logprobs;
  gen->stop_ = p.stop;
  gen->start_ = Clock::now();
  for (int i = 0; i < k; ++i) {
    EngineRequest r;
    r.prompt = std::move(prompts[static_cast<size_t>(i)]);
    const int prompt_len = static_cast<int>(r.prompt.size());
    r.max_tokens = max_tokens_for(r.prompt);
    r.sampling = p.sampling;
    r.n = p.n;
    r.stop_ids.assign(p.stop_token_ids.begin(), p.stop_token_ids.end());
    r.stop_strings = p.stop;
    r.ignore_eos = p.ignore_eos;
    r.priority = p.priority;
    r.cache_salt = salt;
    std::vector<std::pair<int, int64_t>> breakpoints;
    if (auto e = ResolveHolds(p, render, r.prompt, &r.holds, &breakpoints)) {
      in_flight_.fetch_sub(k - i);
      return e;
    }
    if (cache) {
      r.holds.push_back(KvHold{static_cast<int>(cache->tokens.size()), 0, false, cache->hold_id,
                               cache->expires_ms});
    }
    r.speculative = p.speculative;
    r.constraint = constraint;
    if (p.kv_eviction) {
      KvEvictionConfig c = engine_->config().kv_eviction;
      c.policy = p.kv_eviction->policy;
      if (p.kv_eviction->budget) c.budget_tokens = *p.kv_eviction->budget;
      if (p.kv_eviction->sink_tokens) c.sink_tokens = *p.kv_eviction->sink_tokens;
      if (p.kv_eviction->evict_batch) c.evict_batch_tokens = *p.kv_eviction->evict_batch;
      if (p.kv_eviction->h2o_recent_fraction) {
        c.h2o_recent_fraction = *p.kv_eviction->h2o_recent_fraction;
      }
      if (p.kv_eviction->snapkv_window) c.snapkv_window = *p.kv_eviction->snapkv_window;
      if (p.kv_eviction->snapkv_kernel) c.snapkv_kernel = *p.kv_eviction->snapkv_kernel;
      r.kv_eviction = c;
    }
    Result<std::shared_ptr<RequestStream>> stream = engine_->AddRequest(std::move(r));
    if (!stream.ok()) {
      in_flight_.fetch_sub(k - i);  // the started ones are released by ~Generation
      return FromStatus(stream.status(), param);
    }
    Generation::Job job;
    job.stream = std::move(stream).value();
    job.echo = std::move(echoes[static_cast<size_t>(i)]);
    job.prompt_tokens = prompt_len;
    job.breakpoints = std::move(breakpoints);
    job.started.assign(static_cast<size_t>(p.n), false);
    job.last_token.assign(static_cast<size_t>(p.n), Clock::time_point{});
    job.text_len.assign(static_cast<size_t>(p.n), 0);
    if (tool_calls) job.tools.assign(static_cast<size_t>(p.n), ToolCallStream(format, tool_names));
    if (harmony) {
      job.harmony.assign(static_cast<size_t>(p.n), HarmonyParser(*tokenizer_, *harmony_));
      job.engine_text_len.assign(static_cast<size_t>(p.n), 0);
    }
    gen->usage_.prompt_tokens += prompt_len;
    gen->jobs_.push_back(std::move(job));
  }
  gen->usage_.prompt_cache_key = p.prompt_cache_key;
  *out = std::move(gen);
  return std::nullopt;
}

// NOTE (breakpoints): a breakpoint's prefix is rendered as the chat up to it (no generation
// prompt) and cut to the tokens it shares with the whole prompt: templates close a message with
// tokens that the whole prompt has too, but a prefix rendered alone may end differently (a last
// message rendered as the final one), and only tokens in the prompt are cached.
std::optional<ApiError> EngineBridge::ResolveHolds(
    const GenerationParams& p, const ChatRenderOptions& render, std::span<const TokenId> prompt,
    std::vector<KvHold>* holds, std::vector<std::pair<int, int64_t>>* breakpoints) const {
  const int n = static_cast<int>(prompt.size());
  for (const GenerationParams::PrefixHold& h : p.prefix_holds) {
    int tokens = n;
    if (!h.whole_prompt) {
      std::vector<TokenId> ids;
      const std::vector<ChatMessage> none;
      if (EncodeChat(h.tools_only ? none : h.messages, false, &ids, p.tools, render)) {
        // A template that cannot render this prefix alone (no messages, or a system message
        // without a user turn): nothing is held for it, and the request goes on.
        continue;
      }
      tokens = static_cast<int>(
          std::mismatch(ids.begin(), ids.end(), prompt.begin(), prompt.end()).first - ids.begin());
    }
    const int64_t ttl_ms = h.ttl_seconds * 1000;
    holds->push_back(KvHold{tokens, ttl_ms});
    breakpoints->emplace_back(tokens, ttl_ms);
  }
  if (p.retention_24h) {
    // Where a disk tier is configured it keeps the prompt for the day; RAM does otherwise.
    holds->push_back(KvHold{n, kDayMs, !engine_->config().tiers.disk_path.empty()});
  }
  return std::nullopt;
}

int64_t EngineBridge::NowMs() const {
  if (engine_->config().clock_ms) return engine_->config().clock_ms();
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

ExplicitCache* EngineBridge::FindCacheLocked(const std::string& tenant, const std::string& id) {
  const int64_t now = NowMs();
  std::erase_if(caches_, [now](const ExplicitCache& c) { return c.expires_ms <= now; });
  for (ExplicitCache& c : caches_) {
    if (c.id == id && c.tenant == tenant) return &c;
  }
  return nullptr;
}

std::optional<ApiError> EngineBridge::CreateCache(const CacheRequest& request, ExplicitCache* out) {
  ExplicitCache c;
  c.tenant = request.tenant;
  c.cache_salt = request.cache_salt;
  c.chat = request.chat;
  c.messages = request.messages;
  if (auto e = request.chat ? EncodeChat(request.messages, false, &c.tokens)
                            : EncodePrompt(request.prompt, true, &c.tokens)) {
    return e;
  }
  if (c.tokens.empty()) return BadRequest("the prompt is empty", c.chat ? "messages" : "prompt");
  c.id = NewResponseId("cache_");
  c.created_ms = NowMs();
  c.expires_ms = c.created_ms + request.ttl_seconds * 1000;
  {
    std::lock_guard lock(caches_mu_);
    c.hold_id = next_hold_id_++;
  }
  // One engine request computes the prompt's KV; when it ends its blocks are held.
  EngineRequest r;
  r.prompt = c.tokens;
  r.max_tokens = 1;
  r.cache_salt = TenantCacheSalt(c.tenant, c.cache_salt);
  r.speculative = false;
  r.holds.push_back(KvHold{static_cast<int>(c.tokens.size()), 0, false, c.hold_id, c.expires_ms});
  Result<std::shared_ptr<RequestStream>> stream = engine_->AddRequest(std::move(r));
  if (!stream.ok()) return FromStatus(stream.status(), c.chat ? "messages" : "prompt");
  RequestOutput e;
  while ((*stream)->Next(&e) && !e.request_finished) {
  }
  if (e.finish_reason == FinishReason::kError) {
    return FromStatus(e.error, c.chat ? "messages" : "prompt");
  }
  if (e.metrics.held_tokens.empty() || e.metrics.held_tokens[0] < 0) {
    return CacheFull(e.metrics.hold_error);
  }
  c.held_tokens = e.metrics.held_tokens[0];
  std::lock_guard lock(caches_mu_);
  caches_.push_back(c);
  *out = std::move(c);
  return std::nullopt;
}

std::vector<ExplicitCache> EngineBridge::ListCaches(const std::string& tenant) {
  std::lock_guard lock(caches_mu_);
  FindCacheLocked(tenant, {});  // drops the expired ones
  std::vector<ExplicitCache> out;
  for (const ExplicitCache& c : caches_) {
    if (c.tenant == tenant) out.push_back(c);
  }
  return out;
}

std::optional<ApiError> EngineBridge::GetCache(const std::string& tenant, const std::string& id,
                                               ExplicitCache* out) {
  std::lock_guard lock(caches_mu_);
  const ExplicitCache* c = FindCacheLocked(tenant, id);
  if (!c) return CacheNotFound(id);
  *out = *c;
  return std::nullopt;
}

std::optional<ApiError> EngineBridge::UpdateCache(const std::string& tenant, const std::string& id,
                                                  int64_t ttl_seconds, ExplicitCache* out) {
  std::lock_guard lock(caches_mu_);
  ExplicitCache* c = FindCacheLocked(tenant, id);
  if (!c) return CacheNotFound(id);
  const int64_t until = NowMs() + ttl_seconds * 1000;
  Result<int> held = FailedPrecondition("the server is shutting down");
  engine_->RunOnStepThread([&](EngineCore& core) {
    held = core.HoldExplicit(c->hold_id, c->tokens, TenantCacheSalt(c->tenant, c->cache_salt), until);
  });
  if (!held.ok()) return CacheFull(held.status());
  c->expires_ms = until;
  c->held_tokens = *held;
  *out = *c;
  return std::nullopt;
}

std::optional<ApiError> EngineBridge::DeleteCache(const std::string& tenant,
                                                  const std::string& id) {
  std::lock_guard lock(caches_mu_);
  ExplicitCache* c = FindCacheLocked(tenant, id);
  if (!c) return CacheNotFound(id);
  const uint64_t hold_id = c->hold_id;
  engine_->RunOnStepThread([hold_id](EngineCore& core) { core.ReleaseExplicit(hold_id); });
  caches_.erase(caches_.begin() + (c - caches_.data()));
  return std::nullopt;
}

void EngineBridge::Finished() { in_flight_.fetch_sub(1); }

Generation::~Generation() {
  for (Job& job : jobs_) {
    if (job.finished) continue;
    bridge_->engine_->Cancel(job.stream->id());
    job.finished = true;
    bridge_->metrics_->RecordFinished(FinishReason::kCancelled, job.prompt_tokens,
                                      Seconds(Clock::now() - start_));
    bridge_->Finished();
  }
}

Generation::Poll Generation::Next(std::chrono::milliseconds timeout,
                                  std::vector<ChoiceOut>* updates) {
  if (!cancel_sent_ && bridge_->shutting_down()) {
    cancel_sent_ = true;
    for (Job& job : jobs_) {
      if (!job.finished) bridge_->engine_->Cancel(job.stream->id());
    }
  }
  const size_t before = updates->size();
  for (size_t j = 0; j < jobs_.size(); ++j) {
    while (!jobs_[j].finished) {
      std::optional<RequestOutput> e = jobs_[j].stream->TryNext();
      if (!e) break;
      Take(jobs_[j], static_cast<int>(j), std::move(*e), updates);
    }
  }
  if (updates->size() > before) return Poll::kProgress;
  for (size_t j = 0; j < jobs_.size(); ++j) {
    Job& job = jobs_[j];
    if (job.finished) continue;
    RequestOutput e;
    switch (job.stream->NextFor(&e, timeout)) {
      case RequestStream::Wait::kEvent:
        Take(job, static_cast<int>(j), std::move(e), updates);
        return Poll::kProgress;
      case RequestStream::Wait::kTimeout:
        return Poll::kTimeout;
      case RequestStream::Wait::kEnded:
        job.finished = true;  // not reached: the last event marks the job finished
        bridge_->Finished();
        return Poll::kProgress;
    }
  }
  return Poll::kDone;
}

void Generation::Take(Job& job, int job_index, RequestOutput e, std::vector<ChoiceOut>* updates) {
  ServerMetrics& m = *bridge_->metrics_;
  const size_t s = static_cast<size_t>(e.index);
  ChoiceOut c;
  c.index = job_index * n_ + e.index;
  const Clock::time_point now = Clock::now();
  if (!e.new_tokens.empty()) {
    const auto count = static_cast<int64_t>(e.new_tokens.size());
    m.generation_tokens.fetch_add(count);
    usage_.completion_tokens += count;
    if (job.last_token[s] != Clock::time_point{}) m.inter_token.Observe(Seconds(now - job.last_token[s]));
    job.last_token[s] = now;
  }
  if (!job.started[s]) {
    job.started[s] = true;
    c.text = job.echo;
  }
  c.text_offset = job.text_len[s] + c.text.size();
  if (!job.harmony.empty()) {
    // The parser reads the tokens (the engine's text lacks the markers) and gives out no more
    // than the engine's text so far, which stop strings hold back and cut (harmony.h).
    HarmonyParser& parser = job.harmony[s];
    const size_t released = job.engine_text_len[s] += e.text.size();
    HarmonyDelta d = parser.Push(e.new_tokens, released);
    if (e.finished) {
      HarmonyDelta rest = parser.Finish(released);
      d.reasoning += rest.reasoning;
      d.content += rest.content;
    }
    c.text += d.content;
    c.reasoning = std::move(d.reasoning);
  } else if (job.tools.empty()) {
    c.text += e.text;
  } else {
    ToolCallStream& tools = job.tools[s];
    c.text += tools.Push(e.text);
    if (e.finished) {
      ParsedToolCalls parsed = tools.Finish();
      c.text += parsed.content;
      c.tool_calls = std::move(parsed.calls);
    }
  }
  job.text_len[s] += c.text.size();
  if (with_logprobs_ >= 0) {
    c.with_logprobs = true;
    const Tokenizer& tok = bridge_->tokenizer();
    for (const SampleOutput& lp : e.logprobs) {
      TokenLogprobOut t{tok.TokenToPiece(lp.token), lp.logprob, {}};
      for (const TokenLogprob& alt : lp.top) t.top.emplace_back(tok.TokenToPiece(alt.id), alt.logprob);
      c.logprobs.push_back(std::move(t));
    }
  }
  if (e.finished) {
    c.finish_reason = FinishName(e.finish_reason);
    if (e.finish_reason == FinishReason::kStop) {
      // The stop string that ended the text, or "" for an end-of-generation or stop token.
      c.stop_sequence = e.stop_string >= 0 && e.stop_string < static_cast<int>(stop_.size())
                            ? stop_[static_cast<size_t>(e.stop_string)]
                            : std::string();
    }
    if (!c.tool_calls.empty() && e.finish_reason == FinishReason::kStop) {
      c.finish_reason = "tool_calls";
    }
    if (e.finish_reason == FinishReason::kError && !error_) {
      error_ = FromStatus(e.error, header_.endpoint == Endpoint::kChat ? "messages" : "prompt");
    }
  }
  // The prompt's cache usage, from the first event that knows it: the first token's, or the
  // final one when no token came.
  if (e.index == 0 && !job.cache_counted && (e.finished || !e.new_tokens.empty())) {
    job.cache_counted = true;
    usage_.cached_tokens += e.metrics.cached_tokens;
    AddTierTokens(e.metrics.cached_tokens_by_tier, &usage_);
    // Prompt tokens up to each breakpoint that were not cached were written now.
    int covered = e.metrics.cached_tokens;
    for (const auto& [tokens, ttl_ms] : job.breakpoints) {
      if (tokens <= covered) continue;
      const int64_t written = tokens - covered;
      usage_.cache_creation_tokens += written;
      (ttl_ms <= kFiveMinutesMs ? usage_.cache_creation_5m_tokens
                                : usage_.cache_creation_1h_tokens) += written;
      covered = tokens;
    }
  }
  if (e.request_finished) {
    job.finished = true;
    const RequestMetrics& rm = e.metrics;
    const bool got_token = rm.generated_tokens > 0 || rm.ttft_seconds > 0;
    if (got_token) m.ttft.Observe(rm.ttft_seconds);
    if (rm.queue_seconds >= 0) {
      m.queue_time.Observe(rm.queue_seconds);
      if (got_token) {
        m.prefill_time.Observe(rm.ttft_seconds - rm.queue_seconds);
        m.decode_time.Observe(rm.e2e_seconds - rm.ttft_seconds);
      }
    }
    m.RecordFinished(e.finish_reason, job.prompt_tokens, rm.e2e_seconds);
    bridge_->Finished();
  }
  updates->push_back(std::move(c));
}

}  // namespace kvserve
