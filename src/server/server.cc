#include "server/server.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "engine/synthetic_model.h"
#include "kv/kv_storage.h"
#include "model/model.h"
#include "server/harmony.h"
#include "tokenizer/tokenizer.h"
#include "util/byte_size.h"
#include "util/log.h"
#include "util/shutdown_signals.h"

namespace kvserve {

namespace {

std::string ServedName(const ServeConfig& c, const Model& model) {
  if (!c.served_model_name.empty()) return c.served_model_name;
  if (!model.config().name.empty()) return model.config().name;
  if (c.model_path.empty()) return "kvserve-default";
  return std::filesystem::path(c.model_path).stem().string();
}

Result<ChatTemplate> PickTemplate(const ServeConfig& c, const Tokenizer& tok) {
  if (!c.chat_template.empty()) return ChatTemplate::FromName(c.chat_template);
  if (!tok.spec().chat_template.empty()) {
    Result<ChatTemplate> t = ChatTemplate::Detect(tok.spec().chat_template);
    if (t.ok()) return t;
    KV_LOG(Warning, "the model's chat template is not one kvserve knows ({}); using chatml; pass "
                "--chat-template NAME to choose",
                t.status().message());
  }
  return ChatTemplate::FromName("chatml");
}

}  // namespace

Status Serve(const ServeConfig& config) {
  const sigset_t signals = BlockShutdownSignals();  // before any thread starts

  KV_ASSIGN_OR_RETURN(GgufFile file, OpenModelOrDefault(config.model_path));
  KV_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::FromGguf(file));
  KV_ASSIGN_OR_RETURN(ChatTemplate tmpl, PickTemplate(config, tokenizer));
  if (tmpl.reply_format() == ReplyFormat::kHarmony && !HarmonyTokens::Find(tokenizer)) {
    KV_LOG(Warning,
           "chat template '{}' with a vocabulary that lacks harmony's marker tokens "
           "(<|start|>, <|channel|>, <|message|>, <|end|>, <|return|>, <|call|>): "
           "replies are sent as plain content",
           tmpl.name());
  }
  ModelOptions mo;
  if (config.engine.max_num_batched_tokens > 0) mo.max_batch_tokens = config.engine.max_num_batched_tokens;
  mo.max_context = config.engine.max_model_len;
  mo.mla_form = config.mla_form;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(std::move(file), mo));
  const std::string name = ServedName(config, *model);
  EngineConfig engine_config = config.engine;
  HttpConfig http = config.http;
  if (config.debug_clock) {
    // The system clock plus an offset that only moves forward.
    auto offset = std::make_shared<std::atomic<int64_t>>(0);
    engine_config.clock_ms = [offset] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count() +
             offset->load();
    };
    http.advance_clock = [offset](int64_t ms) { offset->fetch_add(ms); };
  }
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                      Engine::Create(std::move(model), engine_config, &tokenizer));

  ServerMetrics metrics;
  EngineBridge bridge(engine.get(), &tokenizer, std::move(tmpl),
                      BridgeConfig{name, config.max_queued_requests, config.max_response_bytes,
                                   config.structured_compile_timeout_ms},
                      &metrics);
  if (http.server.num_workers <= 0) {
    // Every admitted request (running or queued) may hold a worker for its whole stream; a few
    // more serve the requests that are refused.
    http.server.num_workers =
        std::min(1024, engine->config().max_num_seqs + config.max_queued_requests + 16);
  }
  HttpServer server(http, &bridge);
  KV_ASSIGN_OR_RETURN(int port, server.Bind());
  const EngineStats stats = engine->stats();
  KV_LOG(Info, "serving '{}' ({} KV blocks of {} tokens, max model length {})", name,
              stats.kv.num_blocks, engine->config().block_size, engine->config().max_model_len);
  fmt::print(stderr, "kvserve: {}{}\n",
             KvCapacitySummary(stats.kv_k_dtype, stats.kv_v_dtype, stats.kv_bytes_per_token,
                               stats.kv_capacity_tokens, stats.kv_latent),
             stats.kv_window_layers == 0
                 ? std::string()
                 : fmt::format(", + {} window layers in {}", stats.kv_window_layers,
                               FormatByteSize(stats.kv_window_bytes)));
  for (const std::string& line : engine->TierDescriptions()) {
    fmt::print(stderr, "kvserve: {}\n", line);
  }
  if (const SpecConfig& sc = engine->config().spec; sc.enabled()) {
    fmt::print(stderr, "kvserve: speculative decoding: {}, up to {} drafts per step{}{}\n",
               SpecMethodName(sc.method), sc.num_speculative_tokens,
               sc.adaptive ? ", adaptive" : "",
               sc.method == SpecMethod::kDraftModel ? ", draft " + sc.draft_model : "");
    if (!stats.spec.step_seconds_by_rows.empty()) {
      std::string ms;
      for (double s : stats.spec.step_seconds_by_rows) ms += fmt::format(" {:.2f}", 1e3 * s);
      fmt::print(stderr,
                 "kvserve: verification cost, ms for 1..{} rows:{} (measured in {:.0f} ms)\n",
                 stats.spec.step_seconds_by_rows.size(), ms,
                 1e3 * stats.spec.calibration_seconds);
    }
  }
  std::printf("kvserve: listening on http://%s:%d\n", http.server.host.c_str(), port);
  std::fflush(stdout);

  return RunUntilShutdownSignal(
      signals, [&] { return server.Run(); },
      [&] {
        bridge.Shutdown();  // running generations end with finish_reason "abort"
        server.Stop();
      });
}

}  // namespace kvserve
