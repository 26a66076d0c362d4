#include "server/http_server.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "http/message.h"
#include "server/http_common.h"
#include "server/messages_api.h"
#include "server/caches_api.h"
#include "util/api_keys.h"
#include "util/log.h"

namespace kvserve {

using nlohmann::json;

namespace {

// /tokenize and /detokenize bodies up to this size are answered on the I/O thread.
constexpr size_t kQuickTokenizeBytes = size_t{16} << 10;

http::Response ErrorResponse(const ApiError& e) {
  http::Response r;
  r.status = e.status;
  if (e.status == 503) r.headers.emplace_back("Retry-After", "1");
  r.body = ErrorBody(e);
  r.reason = e.message;
  return r;
}

http::Response JsonResponse(const json& j) {
  http::Response r;
  r.body = Dump(j);
  return r;
}

// Whether a request's Content-Type may carry a JSON text: none, application/json or
// application/*+json, text/plain, and application/x-www-form-urlencoded (what `curl -d` sends
// unless told otherwise). Anything else, multipart bodies above all, is a 415.
bool CarriesJson(std::string_view content_type) {
  std::string type(content_type.substr(0, content_type.find(';')));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.pop_back();
  for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return type.empty() || type == "application/json" || type == "text/plain" ||
         type == "application/x-www-form-urlencoded" ||
         (type.rfind("application/", 0) == 0 && type.ends_with("+json"));
}

// Whether `method` is one of `methods` ("GET, POST").
bool Allows(std::string_view methods, std::string_view method) {
  for (size_t at = 0; at <= methods.size();) {
    const size_t end = std::min(methods.find(", ", at), methods.size());
    if (methods.substr(at, end - at) == method) return true;
    at = end + 2;
  }
  return false;
}

// Anthropic's routes answer errors in Anthropic's shape, the others in OpenAI's.
http::Response ErrorFor(const std::string& path, const ApiError& e) {
  const bool anthropic =
      path == kMessagesPath || path.rfind(std::string(kMessagesPath) + "/", 0) == 0;
  return anthropic ? MessagesErrorResponse(e) : ErrorResponse(e);
}

ApiError StatusError(int status) {
  ApiError e;
  e.status = status;
  switch (status) {
    case 404:
      e.message = "unknown route";
      e.code = "not_found";
      break;
    case 405:
      e.message = "method not allowed";
      e.code = "method_not_allowed";
      break;
    case 408:
      e.message = "the request did not arrive in time";
      e.code = "request_timeout";
      break;
    case 411:
      e.message = "a POST needs a Content-Length header (or a chunked body)";
      e.code = "length_required";
      break;
    case 413:
      e.message = "the request body is too large";
      e.code = "request_too_large";
      break;
    case 431:
      e.message = "the request's headers are too large";
      e.code = "request_header_fields_too_large";
      break;
    case 415:
      e.message = "unsupported Content-Type: send the body as application/json";
      e.code = "unsupported_media_type";
      break;
    case 501:  // a transfer coding the layer does not decode: the client's to change
      e.message = "not implemented";
      e.code = "not_implemented";
      break;
    case 503:
      e.type = "server_error";
      e.message = "the server is overloaded";
      e.code = "server_overloaded";
      break;
    default:
      if (status >= 500) {
        e.type = "server_error";
        e.message = "internal server error";
      } else {
        e.message = "bad request";
      }
  }
  return e;
}

std::string Event(const json& j) { return "data: " + Dump(j) + "\n\n"; }

// About what an update adds to a non-streamed response's JSON: its text and reasoning, and per
// logprob entry chat's {"token":…,"logprob":…,"bytes":[…]} (the bytes listed as numbers) or
// completions' "…": -1.2345 pairs.
uint64_t UpdateBytes(const ChoiceOut& u, bool chat) {
  const auto entry = [chat](const std::string& token) -> uint64_t {
    return chat ? 40 + 5 * token.size() : 14 + token.size();
  };
  uint64_t n = u.text.size() + u.reasoning.size();
  for (const TokenLogprobOut& t : u.logprobs) {
    n += entry(t.token);
    for (const auto& alt : t.top) n += entry(alt.first);
  }
  return n;
}

}  // namespace

struct HttpServer::Impl {
  HttpConfig config;
  EngineBridge* bridge;
  std::unique_ptr<http::Server> server;

  Impl(HttpConfig c, EngineBridge* b) : config(std::move(c)), bridge(b) {}

  std::optional<ApiError> CheckModel(const std::string& model) const {
    if (model.empty() || model == bridge->model_name()) return std::nullopt;
    ApiError e;
    e.status = 404;
    e.message = fmt::format("the model '{}' does not exist; this server serves '{}'", model,
                            bridge->model_name());
    e.param = "model";
    e.code = "model_not_found";
    return e;
  }

  json ModelCard() const {
    return {{"id", bridge->model_name()},
            {"object", "model"},
            {"created", 0},
            {"owned_by", "kvserve"},
            {"max_model_len", bridge->max_model_len()}};
  }

  // A generation that is not streamed. While it runs, the HTTP layer watches the connection: a
  // client that closes it is noticed within kPollEvery, and destroying the generation cancels
  // its engine requests, as for a stream.
  void Generate(const std::string& body_text, http::Exchange& ex, Endpoint endpoint,
                const std::string& tenant) {
    json body;
    GenerationParams params;
    params.tenant = tenant;
    std::unique_ptr<Generation> gen;
    std::optional<ApiError> err = ParseBody(body_text, &body);
    if (!err) err = ParseGenerationParams(body, endpoint, &params);
    if (!err) KeepClientOrder(body_text, &params);
    if (!err) err = CheckModel(params.model);
    if (!err) err = bridge->Start(params, &gen);
    if (err) {
      ex.Send(ErrorResponse(*err));
      return;
    }
    if (params.stream) return Stream(ex, std::move(gen), params.include_usage);

    std::vector<ChoiceOut> choices(static_cast<size_t>(gen->num_choices()));
    for (size_t i = 0; i < choices.size(); ++i) {
      choices[i].index = static_cast<int>(i);
      choices[i].with_logprobs = params.logprobs >= 0;
    }
    std::vector<ChoiceOut> updates;
    uint64_t bytes = 0;
    while (gen->Next(kPollEvery, &updates) != Generation::Poll::kDone) {
      if (ex.ClientGone()) return;  // the generation is cancelled as it goes
      for (ChoiceOut& u : updates) {
        bytes += UpdateBytes(u, endpoint == Endpoint::kChat);
        // Over --max-response-bytes: answer the error; destroying the generation cancels it.
        if (bytes > bridge->max_response_bytes()) {
          ex.Send(ErrorResponse(ResponseTooLarge(bridge->max_response_bytes())));
          return;
        }
        ChoiceOut& c = choices[static_cast<size_t>(u.index)];
        if (c.logprobs.empty() && !u.logprobs.empty()) c.text_offset = u.text_offset;
        c.text += u.text;
        c.reasoning += u.reasoning;
        for (ToolCallOut& t : u.tool_calls) c.tool_calls.push_back(std::move(t));
        for (TokenLogprobOut& t : u.logprobs) c.logprobs.push_back(std::move(t));
        if (!u.finish_reason.empty()) c.finish_reason = u.finish_reason;
      }
      updates.clear();
    }
    if (gen->error()) {
      ex.Send(ErrorResponse(*gen->error()));
      return;
    }
    ex.Send(JsonResponse(Response(gen->header(), choices, gen->usage())));
  }

  void Stream(http::Exchange& ex, std::unique_ptr<Generation> gen, bool include_usage) {
    std::vector<bool> first(static_cast<size_t>(gen->num_choices()), true);
    http::Response head;
    head.content_type = "text/event-stream";
    head.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
    if (!ex.BeginStream(std::move(head))) return;
    const uint64_t limit = bridge->max_response_bytes();
    uint64_t sent = 0;
    const ResponseHeader& h = gen->header();
    const bool chat = h.endpoint == Endpoint::kChat;
    std::vector<ChoiceOut> updates;
    auto last_write = std::chrono::steady_clock::now();
    for (;;) {
      updates.clear();
      const Generation::Poll poll = gen->Next(kPollEvery, &updates);
      if (poll == Generation::Poll::kDone) break;
      if (poll == Generation::Poll::kTimeout) {
        // Returning drops the generation, which cancels it: the client left.
        if (ex.ClientGone()) return;
        if (std::chrono::steady_clock::now() - last_write >= kKeepAliveEvery) {
          if (!ex.Write(": keep-alive\n\n")) return;
          last_write = std::chrono::steady_clock::now();
        }
        continue;
      }
      std::string out;
      for (ChoiceOut& u : updates) {
        const auto i = static_cast<size_t>(u.index);
        if (chat && first[i]) {
          // OpenAI's first chunk of a chat choice: the role and empty content, alone.
          ChoiceOut role;
          role.index = u.index;
          out += Event(Chunk(h, role, /*first=*/true, include_usage));
          first[i] = false;
        }
        const bool has_payload =
            !u.text.empty() || !u.reasoning.empty() || !u.logprobs.empty() || !u.tool_calls.empty();
        if (!has_payload && u.finish_reason.empty()) continue;
        if (chat && has_payload && !u.finish_reason.empty()) {
          // The text goes first, then the tool calls (as OpenAI streams them: one delta per
          // call with its id, name and arguments); the finish_reason follows on its own.
          ChoiceOut text = u;
          text.finish_reason.clear();
          text.tool_calls.clear();
          if (!text.text.empty() || !text.reasoning.empty() || !text.logprobs.empty()) {
            out += Event(Chunk(h, text, false, include_usage));
          }
          for (ToolCallOut& call : u.tool_calls) {
            ChoiceOut one;
            one.index = u.index;
            one.tool_calls.push_back(std::move(call));
            out += Event(Chunk(h, one, false, include_usage));
          }
          u.text.clear();
          u.reasoning.clear();
          u.logprobs.clear();
          u.tool_calls.clear();
        }
        out += Event(Chunk(h, u, false, include_usage));
      }
      if (out.empty()) continue;
      if (sent + out.size() > limit) {
        // --max-response-bytes reached: an error event ends the stream, and dropping the
        // generation cancels what is still running.
        const ApiError e = ResponseTooLarge(limit);
        ex.SetReason(e.message);
        if (ex.Write("data: " + ErrorBody(e) + "\n\ndata: [DONE]\n\n")) ex.End();
        return;
      }
      if (!ex.Write(out)) return;
      sent += out.size();
      last_write = std::chrono::steady_clock::now();
    }
    std::string tail;
    if (gen->error()) {
      tail += "data: " + ErrorBody(*gen->error()) + "\n\n";
      ex.SetReason(gen->error()->message);
    }
    if (include_usage) tail += Event(UsageChunk(h, gen->usage()));
    tail += "data: [DONE]\n\n";
    if (ex.Write(tail)) ex.End();
  }

  http::Response Tokenize(const std::string& body_text) const {
    json body;
    if (auto e = ParseBody(body_text, &body)) return ErrorResponse(*e);
    if (!body.is_object()) return ErrorResponse(BadRequest("the body must be a JSON object"));
    std::string model;
    if (body.contains("model") && !body["model"].is_null()) {
      if (!body["model"].is_string()) {
        return ErrorResponse(BadRequest("'model' must be a string", "model"));
      }
      model = body["model"].get<std::string>();
    }
    if (auto e = CheckModel(model)) return ErrorResponse(*e);
    auto flag = [&](const char* key, bool def, std::optional<ApiError>* err) {
      auto it = body.find(key);
      if (it == body.end() || it->is_null()) return def;
      if (!it->is_boolean()) *err = BadRequest(fmt::format("'{}' must be a boolean", key), key);
      return it->is_boolean() ? it->get<bool>() : def;
    };
    std::optional<ApiError> err;
    const bool add_special = flag("add_special_tokens", true, &err);
    const bool add_generation_prompt = flag("add_generation_prompt", true, &err);
    if (err) return ErrorResponse(*err);
    std::vector<TokenId> ids;
    if (body.contains("messages")) {
      std::vector<ChatMessage> messages;
      if (auto e = ParseMessages(body["messages"], &messages)) return ErrorResponse(*e);
      std::vector<nlohmann::ordered_json> tools;
      if (auto e = ParseTokenizeTools(body, body_text, &tools)) return ErrorResponse(*e);
      ChatRenderOptions render;
      if (auto e = ParseReasoningEffort(body, &render.reasoning_effort)) return ErrorResponse(*e);
      if (auto e = bridge->EncodeChat(messages, add_generation_prompt, &ids, tools, render)) {
        return ErrorResponse(*e);
      }
    } else if (body.contains("prompt") && body["prompt"].is_string()) {
      PromptInput p{false, body["prompt"].get<std::string>(), {}};
      if (auto e = bridge->EncodePrompt(p, add_special, &ids)) return ErrorResponse(*e);
    } else {
      return ErrorResponse(BadRequest("give 'prompt' (a string) or 'messages'", "prompt"));
    }
    return JsonResponse({{"tokens", ids},
                         {"count", ids.size()},
                         {"max_model_len", bridge->max_model_len()}});
  }

  http::Response Detokenize(const std::string& body_text) const {
    json body;
    if (auto e = ParseBody(body_text, &body)) return ErrorResponse(*e);
    if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array()) {
      return ErrorResponse(BadRequest("'tokens' must be an array of token ids", "tokens"));
    }
    std::vector<TokenId> ids;
    const int64_t vocab = bridge->tokenizer().vocab_size();
    for (const json& t : body["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab) {
        return ErrorResponse(
            BadRequest(fmt::format("'tokens' must hold ids in [0, {})", vocab), "tokens"));
      }
      ids.push_back(static_cast<TokenId>(t.get<int64_t>()));
    }
    return JsonResponse({{"prompt", bridge->tokenizer().Decode(ids)}});
  }

  enum class Route { kNone, kCompletions, kChat, kMessages, kTokenize, kDetokenize, kModels,
                     kModel, kHealth, kMetrics, kCaches, kCache, kDebugClock };
  // The methods a route answers, for the routes that answer more than POST or GET alone.
  static const char* MethodsOf(Route route) {
    switch (route) {
      case Route::kCaches: return "GET, POST";
      case Route::kCache: return "GET, PATCH, DELETE";
      default: return nullptr;
    }
  }
  static Route RouteOf(const std::string& path, bool* post) {
    *post = true;
    if (path == "/v1/completions") return Route::kCompletions;
    if (path == "/v1/chat/completions") return Route::kChat;
    if (path == kMessagesPath) return Route::kMessages;
    if (path == "/tokenize") return Route::kTokenize;
    if (path == "/detokenize") return Route::kDetokenize;
    if (path == "/debug/clock") return Route::kDebugClock;
    if (path == "/v1/caches") return Route::kCaches;
    if (path.rfind("/v1/caches/", 0) == 0 && path.size() > 11 &&
        path.find('/', 11) == std::string::npos) {
      return Route::kCache;
    }
    *post = false;
    if (path == "/v1/models") return Route::kModels;
    if (path.rfind("/v1/models/", 0) == 0 && path.size() > 11) return Route::kModel;
    if (path == "/health") return Route::kHealth;
    if (path == "/metrics") return Route::kMetrics;
    return Route::kNone;
  }

  // The key a request presents, or nullptr when none of the server's keys matches. OpenAI's
  // clients send `Authorization: Bearer KEY`, Anthropic's `x-api-key: KEY`; either works on
  // every route, the Bearer key first.
  const std::string* KeyOf(const http::Request& req) const {
    const std::string_view auth = req.header("Authorization");
    const std::string_view prefix = "Bearer ";
    const std::string_view x_api_key = req.header("x-api-key");
    const bool bearer = auth.rfind(prefix, 0) == 0;
    const std::string* by_bearer = nullptr;
    const std::string* by_x_api_key = nullptr;
    for (const std::string& key : config.api_keys) {  // every key compared: constant time
      if (bearer && ConstantTimeEquals(auth.substr(prefix.size()), key)) by_bearer = &key;
      if (!x_api_key.empty() && ConstantTimeEquals(x_api_key, key)) by_x_api_key = &key;
    }
    return by_bearer ? by_bearer : by_x_api_key;
  }

  // Who sent the request: a digest of its key (never the key itself), or "" without keys.
  std::string TenantOf(const http::Request& req) const {
    const std::string* key = KeyOf(req);
    if (!key) return {};
    return TenantDigest(*key);
  }

  // On the I/O thread, with the head only: the key, the route and the body's type. What fails
  // here is answered without reading the body.
  std::optional<http::Response> Check(const http::Request& req) const {
    if (!config.api_keys.empty() && PathNeedsApiKey(req.path) && KeyOf(req) == nullptr) {
      ApiError e;
      e.status = 401;
      e.message = req.header("Authorization").empty() && req.header("x-api-key").empty()
                      ? "missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'"
                      : "incorrect API key";
      e.code = "invalid_api_key";
      return ErrorFor(req.path, e);
    }
    bool post = false;
    const Route route = RouteOf(req.path, &post);
    if (route == Route::kNone || (route == Route::kDebugClock && !config.advance_clock)) {
      return ErrorFor(req.path, StatusError(404));
    }
    const char* methods = MethodsOf(route);
    if (!(methods ? Allows(methods, req.method) : req.method == (post ? "POST" : "GET"))) {
      http::Response r = ErrorFor(req.path, StatusError(405));
      r.headers.emplace_back("Allow", methods ? methods : post ? "POST" : "GET");
      return r;
    }
    post = req.method == "POST" || req.method == "PATCH";
    if (post && !CarriesJson(req.header("Content-Type"))) {
      return ErrorFor(req.path, StatusError(415));
    }
    return std::nullopt;
  }

  // On the I/O thread: the routes that never block.
  std::optional<http::Response> Quick(const http::Request& req) const {
    bool post = false;
    switch (RouteOf(req.path, &post)) {
      case Route::kModels:
        return JsonResponse({{"object", "list"}, {"data", json::array({ModelCard()})}});
      case Route::kModel:
        if (auto e = CheckModel(req.path.substr(11))) return ErrorResponse(*e);
        return JsonResponse(ModelCard());
      case Route::kHealth:
        return JsonResponse({{"status", "ok"}});
      // A small body tokenizes in microseconds: answered here, it saves the two thread hand-offs
      // of a worker (a router asks this before every cache-aware decision). A large one could
      // hold the I/O thread, so it goes to a worker.
      case Route::kTokenize:
        if (req.body.size() > kQuickTokenizeBytes) return std::nullopt;
        return Tokenize(req.body);
      case Route::kDetokenize:
        if (req.body.size() > kQuickTokenizeBytes) return std::nullopt;
        return Detokenize(req.body);
      case Route::kMetrics: {
        http::Response r;
        r.content_type = "text/plain; version=0.0.4; charset=utf-8";
        r.body = bridge->metrics().Render(bridge->stats(), bridge->model_name());
        return r;
      }
      default:
        return std::nullopt;
    }
  }

  // On a worker thread.
  void Serve(http::Request& req, http::Exchange& ex) {
    bool post = false;
    switch (RouteOf(req.path, &post)) {
      case Route::kCompletions:
        return Generate(req.body, ex, Endpoint::kCompletions, TenantOf(req));
      case Route::kChat:
        return Generate(req.body, ex, Endpoint::kChat, TenantOf(req));
      case Route::kMessages:
        return ServeMessages(*bridge, req.body, TenantOf(req), ex);
      case Route::kTokenize:
        ex.Send(Tokenize(req.body));
        return;
      case Route::kDetokenize:
        ex.Send(Detokenize(req.body));
        return;
      case Route::kCaches:
      case Route::kCache: {
        const std::string id = req.path.size() > 11 ? req.path.substr(11) : std::string();
        const CacheApiResult r =
            ServeCaches(*bridge, req.method, id, req.body, TenantOf(req));
        ex.Send(r.error ? ErrorResponse(*r.error) : JsonResponse(r.body));
        return;
      }
      case Route::kDebugClock: {
        json body;
        if (auto e = ParseBody(req.body, &body)) {
          ex.Send(ErrorResponse(*e));
          return;
        }
        const json* s = body.is_object() && body.contains("advance_seconds")
                            ? &body["advance_seconds"]
                            : nullptr;
        if (!s || !s->is_number() || s->get<double>() < 0) {
          ex.Send(ErrorResponse(
              BadRequest("'advance_seconds' must be a number >= 0", "advance_seconds")));
          return;
        }
        config.advance_clock(static_cast<int64_t>(s->get<double>() * 1000));
        ex.Send(JsonResponse({{"now_ms", bridge->NowMs()}}));
        return;
      }
      default:
        ex.Send(ErrorResponse(StatusError(404)));
    }
  }
};

HttpServer::HttpServer(HttpConfig config, EngineBridge* bridge)
    : impl_(std::make_unique<Impl>(std::move(config), bridge)) {
  Impl& s = *impl_;
  http::Handlers h;
  h.check = [&s](const http::Request& req) { return s.Check(req); };
  h.quick = [&s](const http::Request& req) { return s.Quick(req); };
  h.serve = [&s](http::Request& req, http::Exchange& ex) { s.Serve(req, ex); };
  h.error = [](int status, const std::string& message) {
    ApiError e = StatusError(status);
    e.message = message;
    return ErrorResponse(e);
  };
  s.server = std::make_unique<http::Server>(s.config.server, std::move(h));
}

HttpServer::~HttpServer() = default;

Result<int> HttpServer::Bind() { return impl_->server->Bind(); }

Status HttpServer::Run() { return impl_->server->Run(); }

void HttpServer::Stop() { impl_->server->Stop(); }

}  // namespace kvserve
