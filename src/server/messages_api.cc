#include "server/messages_api.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "server/anthropic_codec.h"
#include "server/http_common.h"

namespace kvserve {

namespace {

using nlohmann::json;

std::optional<ApiError> CheckModel(const EngineBridge& bridge, const std::string& model) {
  if (model == bridge.model_name()) return std::nullopt;
  ApiError e;
  e.status = 404;
  e.message = fmt::format("'model': the model '{}' does not exist; this server serves '{}'", model,
                          bridge.model_name());
  e.param = "model";
  e.code = "model_not_found";
  return e;
}

// A generation cancelled because the server is stopping (finish_reason "abort"): Anthropic has
// no stop_reason for it, so it is answered as an overload, which clients retry elsewhere.
ApiError ShuttingDown() {
  ApiError e;
  e.status = 503;
  e.type = "server_error";
  e.message = "the server is shutting down; the generation was cancelled";
  return e;
}

// Bytes an update adds to a non-streamed message, near enough to enforce
// --max-response-bytes: its text, and per tool call its name, arguments and the block's JSON.
uint64_t UpdateBytes(const ChoiceOut& u) {
  uint64_t n = u.text.size();
  for (const ToolCallOut& call : u.tool_calls) n += 64 + call.name.size() + call.arguments.size();
  return n;
}

void SendWhole(EngineBridge& bridge, http::Exchange& ex, Generation& gen,
               const GenerationParams& params, const std::string& id) {
  ChoiceOut message;
  std::vector<ChoiceOut> updates;
  uint64_t bytes = 0;
  while (gen.Next(kPollEvery, &updates) != Generation::Poll::kDone) {
    if (ex.ClientGone()) return;  // returning drops the generation, which cancels it
    for (ChoiceOut& u : updates) {
      bytes += UpdateBytes(u);
      if (bytes > bridge.max_response_bytes()) {
        ex.Send(MessagesErrorResponse(ResponseTooLarge(bridge.max_response_bytes())));
        return;
      }
      message.text += u.text;
      for (ToolCallOut& call : u.tool_calls) message.tool_calls.push_back(std::move(call));
      if (!u.finish_reason.empty()) {
        message.finish_reason = u.finish_reason;
        message.stop_sequence = u.stop_sequence;
      }
    }
    updates.clear();
  }
  if (gen.error() || message.finish_reason == "abort") {
    ex.Send(MessagesErrorResponse(gen.error() ? *gen.error() : ShuttingDown()));
    return;
  }
  http::Response r;
  r.body = DumpOrdered(
      MessageJson(id, bridge.model_name(), message, StopOf(message, params.stop), gen.usage()));
  ex.Send(std::move(r));
}

// Ends a stream with an error event (no message_stop follows, as Anthropic's streams end).
void EndWithError(http::Exchange& ex, const ApiError& e) {
  ex.SetReason(e.message);
  if (ex.Write(SseEvent(AnthropicErrorJson(e)))) ex.End();
}

void SendStream(EngineBridge& bridge, http::Exchange& ex, Generation& gen,
                MessageEventWriter writer) {
  http::Response head;
  head.content_type = "text/event-stream";
  head.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  if (!ex.BeginStream(std::move(head))) return;
  const uint64_t limit = bridge.max_response_bytes();
  // message_start waits for the first token: by then the prompt's cache reads and writes are
  // known, and clients take the usage's cache fields from message_start (message_delta carries
  // the output tokens). Until then keep-alives are SSE comments, which clients skip.
  bool started = false;
  std::string out;
  uint64_t sent = 0;
  auto last_write = std::chrono::steady_clock::now();
  std::vector<ChoiceOut> updates;
  for (;;) {
    updates.clear();
    const Generation::Poll poll = gen.Next(kPollEvery, &updates);
    if (poll == Generation::Poll::kDone) break;
    if (poll == Generation::Poll::kTimeout) {
      if (ex.ClientGone()) return;  // dropping the generation cancels it
      if (std::chrono::steady_clock::now() - last_write >= kKeepAliveEvery) {
        if (!ex.Write(started ? SseEvent(PingEvent()) : std::string(": keep-alive\n\n"))) return;
        last_write = std::chrono::steady_clock::now();
      }
      continue;
    }
    out.clear();
    if (!started) {
      out = writer.Start(gen.usage());
      started = true;
    }
    for (const ChoiceOut& u : updates) out += writer.Update(u);
    if (out.empty()) continue;
    if (sent + out.size() > limit) return EndWithError(ex, ResponseTooLarge(limit));
    if (!ex.Write(out)) return;
    sent += out.size();
    last_write = std::chrono::steady_clock::now();
  }
  if (gen.error()) return EndWithError(ex, *gen.error());
  if (writer.finish_reason() == "abort") return EndWithError(ex, ShuttingDown());
  if (ex.Write((started ? std::string() : writer.Start(gen.usage())) +
               writer.Finish(gen.usage()))) {
    ex.End();
  }
}

}  // namespace

http::Response MessagesErrorResponse(const ApiError& e) {
  http::Response r;
  r.status = e.status;
  if (e.status == 503) r.headers.emplace_back("Retry-After", "1");
  r.body = DumpOrdered(AnthropicErrorJson(e));
  r.reason = e.message;
  return r;
}

void ServeMessages(EngineBridge& bridge, const std::string& body_text, const std::string& tenant,
                   http::Exchange& ex) {
  json body;
  GenerationParams params;
  params.tenant = tenant;
  std::unique_ptr<Generation> gen;
  std::optional<ApiError> err = ParseBody(body_text, &body);
  if (!err) err = ParseMessagesRequest(body, &params);
  if (!err) KeepMessagesClientOrder(body_text, &params);
  if (!err) err = CheckModel(bridge, params.model);
  if (!err) err = bridge.Start(params, &gen);
  if (err) {
    ex.Send(MessagesErrorResponse(*err));
    return;
  }
  const std::string id = NewResponseId("msg_");
  if (params.stream) {
    SendStream(bridge, ex, *gen, MessageEventWriter(id, bridge.model_name(), params.stop));
  } else {
    SendWhole(bridge, ex, *gen, params, id);
  }
}

}  // namespace kvserve
