// EngineBridge: between the HTTP handlers and the Engine. It turns validated OpenAI parameters
// into engine requests (chat template, tokenization, defaults), enforces the admission limit
// (running + queued requests), and follows a Generation's engine streams, turning their events
// into per-choice updates and metrics.
//
// Contract: every method may be called from any HTTP worker thread. A Generation belongs to the
// one thread that serves its HTTP request; destroying it before its requests have finished
// cancels them (a client that went away), and their KV blocks return to the pool at the start
// of the engine's next step.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "server/harmony.h"
#include "server/metrics.h"
#include "server/openai_codec.h"
#include "server/tool_calls.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

struct BridgeConfig {
  std::string model_name;
  int max_queued_requests = 256;  // beyond max_num_seqs running; more get 503
  uint64_t max_response_bytes = uint64_t{64} << 20;  // --max-response-bytes
  int structured_compile_timeout_ms = 10000;          // --structured-compile-timeout-ms
};

// A floor on what one generated token adds to a response, streamed or not: the chunk's JSON
// around its text, and with logprobs, its own entry and each alternative's (token text, number,
// punctuation). Measured responses run above it, so a request refused by it is certainly over.
uint64_t MinResponseBytesPerToken(Endpoint endpoint, int top_logprobs);

// An explicit cache (POST /v1/caches): a prompt whose KV blocks are held until expires_ms.
struct ExplicitCache {
  std::string id;     // "cache_" + 24 hex digits
  uint64_t hold_id = 0;  // the KV manager's id for its hold
  std::string tenant;    // who made it; nobody else sees it
  std::string cache_salt;  // as the client gave it
  bool chat = false;       // made from messages (else from a prompt)
  std::vector<ChatMessage> messages;
  std::vector<TokenId> tokens;
  int held_tokens = 0;  // tokens held in the KV cache at the last (re)hold
  int64_t created_ms = 0, expires_ms = 0;
};

struct CacheRequest {  // the body of POST /v1/caches (validated by the server)
  std::string tenant, cache_salt;
  bool chat = false;
  std::vector<ChatMessage> messages;
  PromptInput prompt;
  int64_t ttl_seconds = 3600;
};

class EngineBridge;

class Generation {
 public:
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  enum class Poll { kProgress, kTimeout, kDone };
  // Waits up to `timeout` for events and appends one update per event to *updates: the choice's
  // new text (the echoed prompt first, when asked), its new logprobs, and its finish_reason
  // when it ended. kDone once every choice has ended (and nothing is appended).
  Poll Next(std::chrono::milliseconds timeout, std::vector<ChoiceOut>* updates);

  int num_choices() const { return static_cast<int>(jobs_.size()) * n_; }
  UsageOut usage() const { return usage_; }
  // Set when the engine failed a request; the generation then ends.
  const std::optional<ApiError>& error() const { return error_; }
  const ResponseHeader& header() const { return header_; }

 private:
  friend class EngineBridge;
  struct Job {
    std::shared_ptr<RequestStream> stream;
    std::string echo;  // prompt text to prepend, when echo is on
    int prompt_tokens = 0;
    bool finished = false;
    std::vector<bool> started;  // per sample: got its first update
    std::vector<std::chrono::steady_clock::time_point> last_token;
    std::vector<size_t> text_len;  // per sample: bytes of text sent so far
    std::vector<ToolCallStream> tools;  // per sample, when tool calls are parsed
    std::vector<HarmonyParser> harmony;   // per sample, when replies are harmony (gpt-oss)
    std::vector<size_t> engine_text_len;  // per sample, with harmony: bytes the engine gave out
    // Prompt caching: (prompt tokens up to the breakpoint, its TTL in ms), in prompt order.
    std::vector<std::pair<int, int64_t>> breakpoints;
    bool cache_counted = false;  // the prompt's cache usage is in usage_
  };
  Generation(EngineBridge* bridge, int n, ResponseHeader header)
      : bridge_(bridge), n_(n), header_(std::move(header)) {}
  void Take(Job& job, int job_index, RequestOutput e, std::vector<ChoiceOut>* updates);

  EngineBridge* bridge_;
  int n_;
  ResponseHeader header_;
  int with_logprobs_ = -1;  // top-N, -1 = off
  std::vector<std::string> stop_;  // the request's stop strings
  std::vector<Job> jobs_;
  UsageOut usage_;
  std::optional<ApiError> error_;
  std::chrono::steady_clock::time_point start_;
  bool cancel_sent_ = false;
};

class EngineBridge {
 public:
  EngineBridge(Engine* engine, const Tokenizer* tokenizer, std::optional<ChatTemplate> tmpl,
               BridgeConfig config, ServerMetrics* metrics);

  const std::string& model_name() const { return config_.model_name; }
  int max_model_len() const { return engine_->config().max_model_len; }
  uint64_t max_response_bytes() const { return config_.max_response_bytes; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  EngineStats stats() const { return engine_->stats(); }
  // Compiles structured-output constraints for this model's vocabulary (cached by content).
  // Built on first use: a server that never sees a constraint never builds the vocabulary trie.
  structured::ConstraintCompiler& constraints() const;
  ServerMetrics& metrics() const { return *metrics_; }

  // Renders messages (and tool definitions) through the chat template and tokenizes them. An
  // empty options.date is today's by NowMs() (UTC).
  std::optional<ApiError> EncodeChat(const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt, std::vector<TokenId>* ids,
                                     std::span<const nlohmann::ordered_json> tools = {},
                                     ChatRenderOptions options = {}) const;
  // Tokenizes a prompt (text, or ids checked against the vocabulary).
  std::optional<ApiError> EncodePrompt(const PromptInput& prompt, bool add_special,
                                       std::vector<TokenId>* ids) const;

  // Starts one engine request per prompt (chat: one). 400 for what the engine refuses (too long
  // for the context: code context_length_exceeded), 503 when the queue is full.
  std::optional<ApiError> Start(const GenerationParams& params,
                                std::unique_ptr<Generation>* out);

  // Explicit caches. Create computes the prompt's KV (one engine request) and holds its blocks:
  // 409 when they would take holds past the retained share. Get, Update and Delete see only the
  // tenant's own caches (404 for others'); expired caches are gone.
  std::optional<ApiError> CreateCache(const CacheRequest& request, ExplicitCache* out);
  std::vector<ExplicitCache> ListCaches(const std::string& tenant);
  std::optional<ApiError> GetCache(const std::string& tenant, const std::string& id,
                                   ExplicitCache* out);
  // Moves the deadline to now + ttl_seconds (holding again what was evicted and recomputed).
  std::optional<ApiError> UpdateCache(const std::string& tenant, const std::string& id,
                                      int64_t ttl_seconds, ExplicitCache* out);
  std::optional<ApiError> DeleteCache(const std::string& tenant, const std::string& id);
  int64_t NowMs() const;

  // From now on Start() refuses with 503 and every running Generation cancels its requests.
  void Shutdown() { shutting_down_.store(true); }
  bool shutting_down() const { return shutting_down_.load(); }

 private:
  friend class Generation;
  void Finished();  // one engine request left

  Engine* engine_;
  const Tokenizer* tokenizer_;
  std::optional<ChatTemplate> template_;
  // The vocabulary's harmony markers when the template's replies are harmony; nullopt also for
  // a vocabulary without them (replies are then plain content).
  std::optional<HarmonyTokens> harmony_;
  BridgeConfig config_;
  ServerMetrics* metrics_;
  mutable std::once_flag constraints_once_;
  mutable std::unique_ptr<structured::ConstraintCompiler> constraints_;
  std::atomic<int> in_flight_{0};
  // Resolves p's holds into token counts of `prompt` (Start), with (tokens, ttl ms) per
  // breakpoint for the usage; prefixes render with the prompt's `render` options.
  std::optional<ApiError> ResolveHolds(const GenerationParams& p, const ChatRenderOptions& render,
                                       std::span<const TokenId> prompt, std::vector<KvHold>* holds,
                                       std::vector<std::pair<int, int64_t>>* breakpoints) const;
  // The live cache `id` of `tenant` (expired ones are dropped first). REQUIRES: caches_mu_.
  ExplicitCache* FindCacheLocked(const std::string& tenant, const std::string& id);
  std::mutex caches_mu_;
  std::vector<ExplicitCache> caches_;  // guarded by caches_mu_
  uint64_t next_hold_id_ = 1;          // guarded by caches_mu_
  std::atomic<bool> shutting_down_{false};
};

// A random id such as "chatcmpl-3f9a…" (prefix + 24 hex digits).
std::string NewResponseId(std::string_view prefix);

}  // namespace kvserve
