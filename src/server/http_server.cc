#include "server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/log.h"

namespace kvserve {

using nlohmann::json;

namespace {

constexpr std::chrono::milliseconds kKeepAliveEvery{250};  // SSE comment while idle
constexpr std::chrono::milliseconds kPollEvery{20};        // client liveness check while idle

void SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(ErrorBody(e), "application/json");
}

void SendJson(httplib::Response& res, const json& j) {
  res.status = 200;
  res.set_content(Dump(j), "application/json");
}

// Parses the body as JSON; nlohmann rejects malformed JSON, invalid UTF-8 in strings (parse
// errors) and numbers beyond a double such as 1e400 (an out_of_range error).
std::optional<ApiError> ParseBody(const std::string& body, json* out) {
  try {
    *out = json::parse(body);
  } catch (const json::exception& e) {
    return BadRequest(fmt::format("the body is not valid JSON: {}", e.what()));
  }
  return std::nullopt;
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

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

bool NeedsKey(const std::string& path) {
  return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
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
      break;
    case 411:
      e.message = "a POST needs a Content-Length header (or a chunked body)";
      e.code = "length_required";
      break;
    case 413:
      e.message = "the request body is too large";
      e.code = "request_too_large";
      break;
    case 414:
      e.message = "the request URI is too long";
      break;
    case 415:
      e.message = "unsupported Content-Type: send the body as application/json";
      e.code = "unsupported_media_type";
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

ApiError ResponseTooLarge(uint64_t limit) {
  ApiError e;
  e.status = 400;
  e.message = fmt::format(
      "the response reached the server's limit of {} bytes (--max-response-bytes); ask for "
      "fewer tokens, choices or top_logprobs",
      limit);
  e.code = "response_too_large";
  return e;
}

// About what an update adds to a non-streamed response's JSON: its text, and per logprob entry
// chat's {"token":…,"logprob":…,"bytes":[…]} (the bytes listed as numbers) or completions'
// "…": -1.2345 pairs.
uint64_t UpdateBytes(const ChoiceOut& u, bool chat) {
  const auto entry = [chat](const std::string& token) -> uint64_t {
    return chat ? 40 + 5 * token.size() : 14 + token.size();
  };
  uint64_t n = u.text.size();
  for (const TokenLogprobOut& t : u.logprobs) {
    n += entry(t.token);
    for (const auto& alt : t.top) n += entry(alt.first);
  }
  return n;
}

// The access log's view of the request a worker thread is serving: set when routing starts,
// read when the response has been written (cpp-httplib serves a request on one thread).
struct AccessStart {
  bool pending = false;
  std::chrono::steady_clock::time_point start;
  std::string id;
};
thread_local AccessStart t_access;

// A client's X-Request-Id is kept when it is short printable ASCII; else one is made.
bool UsableRequestId(std::string_view id) {
  return !id.empty() && id.size() <= 128 &&
         std::all_of(id.begin(), id.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// The message of an OpenAI-shaped error body, or empty.
std::string ErrorMessageOf(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string()) {
    return j["error"]["message"].get<std::string>();
  }
  return {};
}

}  // namespace

struct HttpServer::Impl {
  HttpConfig config;
  EngineBridge* bridge;
  httplib::Server server;

  Impl(HttpConfig c, EngineBridge* b) : config(std::move(c)), bridge(b) {}

  std::atomic<uint64_t> next_request_id{1};

  // Every request gets an id (the client's X-Request-Id, else a new one), echoed in the
  // response, and one access-log line when its response has been written: method, path,
  // status, bytes (of bodies that are not streamed), duration, client address, and for errors
  // the reason. 2xx/3xx log at info, 4xx at warning, 5xx at error (--log-level).
  void StartAccess(const httplib::Request& req, httplib::Response& res) {
    t_access.pending = true;
    t_access.start = std::chrono::steady_clock::now();
    const std::string given = req.get_header_value("X-Request-Id");
    t_access.id = UsableRequestId(given) ? given : fmt::format("req-{}", next_request_id++);
    res.set_header("X-Request-Id", t_access.id);
  }

  void LogAccess(const httplib::Request& req, const httplib::Response& res) {
    const LogLevel level = res.status >= 500   ? LogLevel::kError
                           : res.status >= 400 ? LogLevel::kWarning
                                               : LogLevel::kInfo;
    if (level < GetLogLevel()) {
      t_access.pending = false;
      return;
    }
    std::vector<LogField> fields = {{"method", req.method},
                                    {"path", req.path},
                                    {"status", int64_t{res.status}},
                                    {"client", req.remote_addr}};
    if (t_access.pending) {
      fields.push_back({"request_id", t_access.id});
      fields.push_back({"duration_ms", std::chrono::duration<double, std::milli>(
                                           std::chrono::steady_clock::now() - t_access.start)
                                           .count()});
    }
    if (res.get_header_value("Content-Type").rfind("text/event-stream", 0) != 0) {
      fields.push_back({"bytes", static_cast<int64_t>(res.body.size())});
    }
    if (res.status >= 400) fields.push_back({"error", ErrorMessageOf(res.body)});
    t_access.pending = false;
    LogRecord(level, fmt::format("{} {} {}", req.method, req.path, res.status), fields);
  }

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

  void Generate(const std::string& body_text, httplib::Response& res, Endpoint endpoint) {
    json body;
    GenerationParams params;
    std::unique_ptr<Generation> gen;
    std::optional<ApiError> err = ParseBody(body_text, &body);
    if (!err) err = ParseGenerationParams(body, endpoint, &params);
    if (!err) err = CheckModel(params.model);
    if (!err) err = bridge->Start(params, &gen);
    if (err) return SendError(res, *err);
    if (params.stream) return Stream(res, std::move(gen), params.include_usage);

    std::vector<ChoiceOut> choices(static_cast<size_t>(gen->num_choices()));
    for (size_t i = 0; i < choices.size(); ++i) {
      choices[i].index = static_cast<int>(i);
      choices[i].with_logprobs = params.logprobs >= 0;
    }
    std::vector<ChoiceOut> updates;
    uint64_t bytes = 0;
    while (gen->Next(std::chrono::seconds(1), &updates) != Generation::Poll::kDone) {
      for (ChoiceOut& u : updates) {
        bytes += UpdateBytes(u, endpoint == Endpoint::kChat);
        // Over --max-response-bytes: answer the error; destroying the generation cancels it.
        if (bytes > bridge->max_response_bytes()) {
          return SendError(res, ResponseTooLarge(bridge->max_response_bytes()));
        }
        ChoiceOut& c = choices[static_cast<size_t>(u.index)];
        if (c.logprobs.empty() && !u.logprobs.empty()) c.text_offset = u.text_offset;
        c.text += u.text;
        for (TokenLogprobOut& t : u.logprobs) c.logprobs.push_back(std::move(t));
        if (!u.finish_reason.empty()) c.finish_reason = u.finish_reason;
      }
      updates.clear();
    }
    if (gen->error()) return SendError(res, *gen->error());
    SendJson(res, Response(gen->header(), choices, gen->usage()));
  }

  void Stream(httplib::Response& res, std::unique_ptr<Generation> owned, bool include_usage) {
    std::shared_ptr<Generation> gen = std::move(owned);
    auto first = std::make_shared<std::vector<bool>>(static_cast<size_t>(gen->num_choices()),
                                                     true);
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    const uint64_t limit = bridge->max_response_bytes();
    auto sent = std::make_shared<uint64_t>(0);
    res.set_chunked_content_provider("text/event-stream", [gen, first, include_usage, limit, sent](
                                                              size_t, httplib::DataSink& sink) {
      const ResponseHeader& h = gen->header();
      const bool chat = h.endpoint == Endpoint::kChat;
      std::vector<ChoiceOut> updates;
      auto last_write = std::chrono::steady_clock::now();
      for (;;) {
        updates.clear();
        const Generation::Poll poll = gen->Next(kPollEvery, &updates);
        if (poll == Generation::Poll::kDone) break;
        if (poll == Generation::Poll::kTimeout) {
          // is_writable also peeks at the socket: a client that closed it is noticed here,
          // and returning false ends the response, which cancels the generation.
          if (!sink.is_writable()) return false;
          if (std::chrono::steady_clock::now() - last_write >= kKeepAliveEvery) {
            if (!sink.write(": keep-alive\n\n", 14)) return false;
            last_write = std::chrono::steady_clock::now();
          }
          continue;
        }
        std::string out;
        for (ChoiceOut& u : updates) {
          const auto i = static_cast<size_t>(u.index);
          if (chat && (*first)[i]) {
            // OpenAI's first chunk of a chat choice: the role and empty content, alone.
            ChoiceOut role;
            role.index = u.index;
            out += Event(Chunk(h, role, /*first=*/true, include_usage));
            (*first)[i] = false;
          }
          const bool has_payload = !u.text.empty() || !u.logprobs.empty();
          if (!has_payload && u.finish_reason.empty()) continue;
          if (chat && has_payload && !u.finish_reason.empty()) {
            // The text goes first; the finish_reason follows in a chunk of its own.
            ChoiceOut text = u;
            text.finish_reason.clear();
            out += Event(Chunk(h, text, false, include_usage));
            u.text.clear();
            u.logprobs.clear();
          }
          out += Event(Chunk(h, u, false, include_usage));
        }
        if (out.empty()) continue;
        if (*sent + out.size() > limit) {
          // --max-response-bytes reached: an error event ends the stream, and dropping the
          // generation cancels what is still running.
          const std::string end =
              "data: " + ErrorBody(ResponseTooLarge(limit)) + "\n\ndata: [DONE]\n\n";
          if (!sink.write(end.data(), end.size())) return false;
          sink.done();
          return true;
        }
        if (!sink.is_writable() || !sink.write(out.data(), out.size())) return false;
        *sent += out.size();
        last_write = std::chrono::steady_clock::now();
      }
      std::string tail;
      if (gen->error()) tail += "data: " + ErrorBody(*gen->error()) + "\n\n";
      if (include_usage) tail += Event(UsageChunk(h, gen->usage()));
      tail += "data: [DONE]\n\n";
      if (!sink.write(tail.data(), tail.size())) return false;
      sink.done();
      return true;
    });
  }

  void Tokenize(const std::string& body_text, httplib::Response& res) {
    json body;
    if (auto e = ParseBody(body_text, &body)) return SendError(res, *e);
    if (!body.is_object()) return SendError(res, BadRequest("the body must be a JSON object"));
    std::string model;
    if (body.contains("model") && !body["model"].is_null()) {
      if (!body["model"].is_string()) return SendError(res, BadRequest("'model' must be a string", "model"));
      model = body["model"].get<std::string>();
    }
    if (auto e = CheckModel(model)) return SendError(res, *e);
    auto flag = [&](const char* key, bool def, std::optional<ApiError>* err) {
      auto it = body.find(key);
      if (it == body.end() || it->is_null()) return def;
      if (!it->is_boolean()) *err = BadRequest(fmt::format("'{}' must be a boolean", key), key);
      return it->is_boolean() ? it->get<bool>() : def;
    };
    std::optional<ApiError> err;
    const bool add_special = flag("add_special_tokens", true, &err);
    const bool add_generation_prompt = flag("add_generation_prompt", true, &err);
    if (err) return SendError(res, *err);
    std::vector<TokenId> ids;
    if (body.contains("messages")) {
      std::vector<ChatMessage> messages;
      if (auto e = ParseMessages(body["messages"], &messages)) return SendError(res, *e);
      if (auto e = bridge->EncodeChat(messages, add_generation_prompt, &ids)) {
        return SendError(res, *e);
      }
    } else if (body.contains("prompt") && body["prompt"].is_string()) {
      PromptInput p{false, body["prompt"].get<std::string>(), {}};
      if (auto e = bridge->EncodePrompt(p, add_special, &ids)) return SendError(res, *e);
    } else {
      return SendError(res, BadRequest("give 'prompt' (a string) or 'messages'", "prompt"));
    }
    SendJson(res, {{"tokens", ids},
                   {"count", ids.size()},
                   {"max_model_len", bridge->max_model_len()}});
  }

  void Detokenize(const std::string& body_text, httplib::Response& res) {
    json body;
    if (auto e = ParseBody(body_text, &body)) return SendError(res, *e);
    if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array()) {
      return SendError(res, BadRequest("'tokens' must be an array of token ids", "tokens"));
    }
    std::vector<TokenId> ids;
    const int64_t vocab = bridge->tokenizer().vocab_size();
    for (const json& t : body["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab) {
        return SendError(res, BadRequest(fmt::format("'tokens' must hold ids in [0, {})", vocab),
                                         "tokens"));
      }
      ids.push_back(static_cast<TokenId>(t.get<int64_t>()));
    }
    SendJson(res, {{"prompt", bridge->tokenizer().Decode(ids)}});
  }

  // A POST route whose body is read here, under --max-body-bytes. A declared Content-Length
  // over it never gets here (FramingError answers it before routing); a chunked body is
  // counted as it arrives. A body whose Content-Type cannot carry JSON is read to its end too
  // (so the connection stays in step) and answered 415; multipart bodies must go through the
  // multipart reader to be read at all.
  template <typename Fn>
  void PostJson(const std::string& path, Fn fn) {
    server.Post(path, [this, fn](const httplib::Request& req, httplib::Response& res,
                                 const httplib::ContentReader& reader) {
      const bool json_body = CarriesJson(req.get_header_value("Content-Type"));
      std::string body;
      bool too_large = false;
      uint64_t received = 0;
      auto receive = [&](const char* data, size_t n) {
        received += n;
        if (received > config.max_body_bytes) {
          too_large = true;
          return false;
        }
        if (json_body) body.append(data, n);
        return true;
      };
      const bool read =
          req.is_multipart_form_data()
              ? reader([](const httplib::MultipartFormData&) { return true; }, receive)
              : reader(receive);
      if (too_large || !read) {
        res.set_header("Connection", "close");  // the rest of the body is not read
        return SendError(res, StatusError(too_large ? 413 : 400));
      }
      if (!json_body) return SendError(res, StatusError(415));
      fn(body, res);
    });
  }

  // Framing (RFC 9112 section 6.3), checked before anything reads a body: the body's length
  // must be unambiguous, or a proxy in front of the server and the server could disagree on
  // where the next request starts (request smuggling), and a length that can never arrive must
  // not hold a worker until the read timeout.
  std::optional<ApiError> FramingError(const httplib::Request& req) const {
    const size_t lengths = req.get_header_value_count("Content-Length");
    const bool chunked = req.has_header("Transfer-Encoding");
    auto bad = [](std::string message) {
      ApiError e = StatusError(400);
      e.message = std::move(message);
      return e;
    };
    if (lengths > 0 && chunked) {
      return bad("a request may not carry both Content-Length and Transfer-Encoding");
    }
    if (lengths > 0) {
      const std::string first = req.get_header_value("Content-Length", 0);
      for (size_t i = 1; i < lengths; ++i) {
        if (req.get_header_value("Content-Length", i) != first) {
          return bad("conflicting Content-Length headers");
        }
      }
      uint64_t declared = 0;
      const auto [end, ec] = std::from_chars(first.data(), first.data() + first.size(), declared);
      const bool digits = !first.empty() && std::all_of(first.begin(), first.end(), [](char c) {
        return c >= '0' && c <= '9';
      });
      if (!digits) return bad("invalid Content-Length '" + first.substr(0, 32) + "'");
      if (ec == std::errc::result_out_of_range || declared > config.max_body_bytes) {
        return StatusError(413);
      }
      return std::nullopt;
    }
    if (!chunked && req.method == "POST") return StatusError(411);
    return std::nullopt;
  }

  void Routes() {
    server.set_logger(
        [this](const httplib::Request& req, const httplib::Response& res) { LogAccess(req, res); });
    server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      StartAccess(req, res);
      // NOTE (Range): cpp-httplib would cut any response to the ranges a client asks for, which
      // breaks JSON bodies (a 200 holding '{"co') and lets one small request ask for a body many
      // times over. No route here serves byte ranges, so the header is ignored (RFC 9110 allows
      // it): the parsed ranges are dropped before any handler runs. The request object belongs
      // to the server and is not const; the handler is only given a const view of it.
      const_cast<httplib::Request&>(req).ranges.clear();
      if (std::optional<ApiError> framing = FramingError(req)) {
        res.set_header("Connection", "close");  // the body, if any, is not read
        SendError(res, *framing);
        return httplib::Server::HandlerResponse::Handled;
      }
      if (config.api_key.empty() || !NeedsKey(req.path)) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      const std::string auth = req.get_header_value("Authorization");
      const std::string_view prefix = "Bearer ";
      if (auth.rfind(prefix, 0) == 0 &&
          ConstantTimeEquals(std::string_view(auth).substr(prefix.size()), config.api_key)) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      ApiError e;
      e.status = 401;
      e.message = auth.empty() ? "missing API key: send 'Authorization: Bearer KEY'"
                               : "incorrect API key";
      e.code = "invalid_api_key";
      SendError(res, e);
      return httplib::Server::HandlerResponse::Handled;
    });
    server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      SendError(res, StatusError(res.status));
    });
    server.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          ApiError e = StatusError(500);
          try {
            if (ep) std::rethrow_exception(ep);
          } catch (const std::exception& ex) {
            e.message = ex.what();
          } catch (...) {
          }
          SendError(res, e);
        });
    PostJson("/v1/completions", [this](const std::string& body, httplib::Response& res) {
      Generate(body, res, Endpoint::kCompletions);
    });
    PostJson("/v1/chat/completions", [this](const std::string& body, httplib::Response& res) {
      Generate(body, res, Endpoint::kChat);
    });
    server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      SendJson(res, {{"object", "list"}, {"data", json::array({ModelCard()})}});
    });
    server.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (auto e = CheckModel(req.matches[1].str())) return SendError(res, *e);
      SendJson(res, ModelCard());
    });
    PostJson("/tokenize", [this](const std::string& body, httplib::Response& res) {
      Tokenize(body, res);
    });
    PostJson("/detokenize", [this](const std::string& body, httplib::Response& res) {
      Detokenize(body, res);
    });
    server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      SendJson(res, {{"status", "ok"}});
    });
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(bridge->metrics().Render(bridge->stats(), bridge->model_name()),
                      "text/plain; version=0.0.4; charset=utf-8");
    });
  }
};

HttpServer::HttpServer(HttpConfig config, EngineBridge* bridge)
    : impl_(std::make_unique<Impl>(std::move(config), bridge)) {
  Impl& s = *impl_;
  const int workers = std::max(4, s.config.num_workers);
  s.server.new_task_queue = [workers] { return new httplib::ThreadPool(static_cast<size_t>(workers)); };
  s.server.set_payload_max_length(s.config.max_body_bytes);
  s.server.set_read_timeout(s.config.read_timeout_s, 0);
  s.server.set_write_timeout(s.config.write_timeout_s, 0);
  s.server.set_keep_alive_timeout(s.config.idle_timeout_s);
  s.server.set_tcp_nodelay(true);
  // cpp-httplib's default also sets SO_REUSEPORT, which would let a second server bind a port
  // that is in use and split its connections; SO_REUSEADDR alone keeps restarts quick.
  s.server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  s.Routes();
}

HttpServer::~HttpServer() = default;

Result<int> HttpServer::Bind() {
  Impl& s = *impl_;
  int port = s.config.port;
  if (port == 0) {
    port = s.server.bind_to_any_port(s.config.host);
    if (port < 0) return IoError(fmt::format("cannot bind to {}", s.config.host));
  } else if (!s.server.bind_to_port(s.config.host, port)) {
    return IoError(fmt::format("cannot bind to {}:{} (in use, or not an address of this host)",
                               s.config.host, port));
  }
  return port;
}

Status HttpServer::Run() {
  if (!impl_->server.listen_after_bind()) return IoError("the HTTP server stopped with an error");
  return Status::Ok();
}

void HttpServer::Stop() { impl_->server.stop(); }

}  // namespace kvserve
