#include "router/proxy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "util/api_keys.h"
#include "util/log.h"

namespace kvserve::router {

using nlohmann::json;

namespace {

// A buffered (not streamed) response larger than this is refused rather than held.
constexpr size_t kMaxBufferedBytes = size_t{256} << 20;

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

bool IsAnyOf(std::string_view name, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    if (EqualsIgnoreCase(name, n)) return true;
  }
  return false;
}

// RFC 9110 7.6.1's hop-by-hop fields, and what the HTTP layer writes itself.
bool HopByHop(std::string_view name) {
  return IsAnyOf(
      name, {"Connection", "Keep-Alive", "Proxy-Connection", "TE", "Trailer", "Transfer-Encoding",
             "Upgrade", "Content-Length", "Host", "Expect", "Proxy-Authorization", "X-Request-Id"});
}

const char* AnthropicErrorType(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

}  // namespace

std::string HashSalt(const http::Headers& upstream_headers, const std::string& cache_salt,
                     bool replicas_require_keys) {
  if (!replicas_require_keys) return cache_salt;
  std::string_view key;
  const std::string_view auth = http::FindHeader(upstream_headers, "Authorization");
  if (auth.rfind("Bearer ", 0) == 0) {
    key = auth.substr(7);
  } else {
    key = http::FindHeader(upstream_headers, "x-api-key");
  }
  return key.empty() ? cache_salt : TenantCacheSalt(TenantDigest(key), cache_salt);
}

http::Response ErrorResponse(std::string_view path, int status, std::string message,
                             std::string code) {
  http::Response r;
  r.status = status;
  r.reason = message;
  if (status == 503) r.headers.emplace_back("Retry-After", "1");
  if (path == "/v1/messages") {
    r.body = json{{"type", "error"},
                  {"error", {{"type", AnthropicErrorType(status)}, {"message", message}}}}
                 .dump();
    return r;
  }
  r.body = json{{"error",
                 {{"message", message},
                  {"type", status >= 500 ? "server_error" : "invalid_request_error"},
                  {"param", nullptr},
                  {"code", code.empty() ? json(nullptr) : json(code)}}}}
               .dump();
  return r;
}

Fleet::Fleet(FleetConfig config)
    : config_(std::move(config)),
      replicas_(*config_.replicas),
      policy_(MakePolicy(config_.policy, config_.cache_aware)),
      utility_(MakePolicy(PolicyKind::kLeastLoad)) {}

http::Headers Fleet::UpstreamHeaders(const http::Request& req) const {
  http::Headers out;
  const bool replace_key = !config_.replica_api_key.empty();
  for (const auto& [name, value] : req.headers) {
    if (HopByHop(name)) continue;
    if (replace_key && IsAnyOf(name, {"Authorization", "x-api-key"})) continue;
    out.emplace_back(name, value);
  }
  if (replace_key) out.emplace_back("Authorization", "Bearer " + config_.replica_api_key);
  out.emplace_back("X-Request-Id", req.request_id);
  return out;
}

Fleet::Scoring Fleet::Score(const RequestFacts& facts, const http::Headers& headers) {
  Scoring s;
  s.block_size = config_.index->block_size();
  if (s.block_size <= 0) return s;  // no event has said the block size yet: nothing to match
  std::vector<int32_t> ids;
  if (facts.prompt_ids) {
    ids = *facts.prompt_ids;
  } else if (!facts.tokenize_body.is_null()) {
    // The replicas share one model and tokenizer: any of them tells the ids. The least loaded
    // one in the pool is asked, without counting the call as routed load.
    Replica* best = nullptr;
    for (auto& r : replicas_) {
      if (r->healthy() && (best == nullptr || r->load() < best->load())) best = r.get();
    }
    if (best == nullptr) return s;
    std::optional<std::vector<int32_t>> told;
    Result<std::unique_ptr<http::Client>> client = best->Acquire();
    if (client.ok()) {
      http::Headers h;
      for (const auto& [name, value] : headers) {
        if (IsAnyOf(name, {"Authorization", "x-api-key", "X-Request-Id"}))
          h.emplace_back(name, value);
      }
      h.emplace_back("Content-Type", "application/json");
      Result<http::ClientResponse> res =
          (*client)->Send("POST", "/tokenize", h, facts.tokenize_body.dump());
      if (res.ok() && res->status == 200) told = TokensOf(res->body);
      best->Release(std::move(client).value());
    }
    if (!told) {
      config_.metrics->TokenizeError();
      return s;
    }
    ids = std::move(*told);
  } else {
    return s;
  }
  s.prompt_tokens = ids.size();
  bool keyed = false;
  for (auto& r : replicas_) keyed |= r->healthy() && r->requires_key();
  s.hashes = config_.hasher->Hash(ids, s.block_size, HashSalt(headers, facts.cache_salt, keyed));
  return s;
}

Fleet::Choice Fleet::Decide(bool generates, const Scoring& scoring, const std::string& cache_key,
                            const std::vector<int>& tried) {
  std::vector<Candidate> candidates;
  for (auto& r : replicas_) {
    if (!r->healthy() || std::find(tried.begin(), tried.end(), r->index()) != tried.end()) continue;
    Candidate c;
    c.replica = r->index();
    if (generates && config_.policy == PolicyKind::kCacheAware) {
      c.matched_blocks = config_.index->MatchPrefix(c.replica, scoring.hashes);
      c.num_blocks = config_.index->NumBlocks(c.replica);
    }
    candidates.push_back(c);
  }
  if (candidates.empty()) return {};
  RouteInput in;
  in.num_replicas = static_cast<int>(replicas_.size());
  in.prompt_tokens = scoring.prompt_tokens;
  in.block_size = scoring.block_size;
  Decision d;
  {
    std::lock_guard lock(decide_mu_);
    for (Candidate& c : candidates) c.load = replicas_[static_cast<size_t>(c.replica)]->load();
    in.candidates = candidates;
    const bool keyed = generates && config_.policy == PolicyKind::kCacheAware && !cache_key.empty();
    if (keyed) in.sticky_replica = sticky_.Find(cache_key);
    d = (generates ? policy_ : utility_)->Choose(in);
    replicas_[static_cast<size_t>(d.replica)]->in_flight().fetch_add(1);
    if (keyed) sticky_.Set(cache_key, d.replica);
  }
  if (!scoring.hashes.empty()) config_.index->AddPending(d.replica, scoring.hashes);
  return {d.replica, d.rule, d.matched_blocks};
}

Fleet::Outcome Fleet::Forward(Replica& replica, const http::Request& req,
                              const http::Headers& headers, http::Exchange& ex,
                              int64_t predicted_cached_tokens, std::string* error) {
  Result<std::unique_ptr<http::Client>> acquired = replica.Acquire();
  if (!acquired.ok()) {
    *error = acquired.status().message();
    return Outcome::kRetry;
  }
  std::unique_ptr<http::Client> client = std::move(acquired).value();
  bool streaming = false;
  bool write_failed = false;
  bool too_large = false;
  http::Response whole;
  UsageScanner scanner;
  const Status s = client->Stream(
      req.method, req.target, headers, req.body,
      [&](int status, const http::Headers& head) {
        http::Response r;
        r.status = status;
        r.content_type = std::string(http::FindHeader(head, "Content-Type"));
        for (const auto& [name, value] : head) {
          if (!HopByHop(name) && !EqualsIgnoreCase(name, "Content-Type")) {
            r.headers.emplace_back(name, value);
          }
        }
        streaming = r.content_type.rfind("text/event-stream", 0) == 0;
        if (streaming) {
          write_failed = !ex.BeginStream(std::move(r));
        } else {
          whole = std::move(r);
        }
      },
      [&](std::string_view data) {
        if (!streaming) {
          whole.body.append(data);
          too_large = whole.body.size() > kMaxBufferedBytes;
          return !too_large;
        }
        if (write_failed) return false;
        scanner.Feed(data);
        write_failed = !ex.Write(data);
        return !write_failed;  // false closes the upstream connection: the client has left
      },
      [&ex] { return ex.ClientGone(); });
  replica.Release(std::move(client));

  const auto record_usage = [&](const std::optional<ReportedUsage>& usage) {
    if (usage) config_.metrics->Usage(replica.index(), predicted_cached_tokens, *usage);
  };
  if (streaming) {
    if (write_failed || ex.ClientGone()) return Outcome::kClientGone;
    if (!s.ok()) {
      // The head is out: the client sees the stream end without its last chunk, as the
      // replica's own stream ended.
      ex.SetReason(s.message());
      config_.metrics->BrokeOff(replica.index());
      return Outcome::kBrokeOff;
    }
    if (ex.End()) record_usage(scanner.usage());
    return Outcome::kAnswered;
  }
  if (ex.ClientGone()) return Outcome::kClientGone;
  if (!s.ok() || too_large) {
    *error = too_large ? fmt::format("the response from {} is over {} MiB", replica.origin(),
                                     kMaxBufferedBytes >> 20)
                       : s.message();
    if (too_large) {
      ex.Send(ErrorResponse(req.path, 502, *error, "upstream_response_too_large"));
      return Outcome::kAnswered;
    }
    return Outcome::kRetry;
  }
  if (whole.status == 200 && whole.content_type.rfind("application/json", 0) == 0) {
    record_usage(UsageOfJson(json::parse(whole.body, nullptr, /*allow_exceptions=*/false)));
  }
  ex.Send(std::move(whole));
  return Outcome::kAnswered;
}

void Fleet::Serve(http::Request& req, http::Exchange& ex) {
  bool post = false;
  const ApiRoute route = RouteOfPath(req.path, &post);
  const bool generates = Generates(route);
  // Only cache-aware routing reads the body (the prompt, the cache key); the other policies pass
  // it on untouched. A body that is not JSON goes on too: the replica answers its error.
  const bool cache_aware = generates && config_.policy == PolicyKind::kCacheAware;
  RequestFacts facts;
  if (cache_aware) {
    facts = InspectRequest(
        route, nlohmann::ordered_json::parse(req.body, nullptr, /*allow_exceptions=*/false));
  }
  const http::Headers headers = UpstreamHeaders(req);
  Scoring scoring;
  if (cache_aware && config_.health->num_healthy() > 1) scoring = Score(facts, headers);

  std::vector<int> tried;
  std::string last_error;
  for (;;) {
    const Choice choice = Decide(generates, scoring, facts.cache_key, tried);
    if (choice.replica < 0) break;
    Replica& replica = *replicas_[static_cast<size_t>(choice.replica)];
    if (generates) {
      config_.metrics->Routed(choice.replica, choice.rule);
    } else {
      config_.metrics->RoutedOther(choice.replica);
    }
    const int64_t predicted = static_cast<int64_t>(
        std::min(choice.matched_blocks * static_cast<size_t>(std::max(scoring.block_size, 0)),
                 scoring.prompt_tokens));
    const Outcome outcome = Forward(replica, req, headers, ex, predicted, &last_error);
    replica.in_flight().fetch_sub(1);
    if (outcome != Outcome::kRetry) return;
    // Nothing reached the client: the request goes to another replica, and this one leaves the
    // pool until a health round finds it again.
    config_.metrics->UpstreamError(choice.replica);
    config_.metrics->Retry(choice.replica);
    config_.health->ReportFailure(choice.replica);
    KV_LOG(Warning, "replica {} failed a request before answering ({}); trying another",
           replica.origin(), last_error);
    tried.push_back(choice.replica);
  }
  config_.metrics->Failed();
  if (tried.empty()) {
    ex.Send(ErrorResponse(req.path, 503,
                          "no replica is in the pool (all failed their health checks)",
                          "no_healthy_replica"));
  } else {
    ex.Send(ErrorResponse(
        req.path, 502,
        fmt::format("no replica could serve the request; the last error: {}", last_error),
        "upstream_unavailable"));
  }
}

}  // namespace kvserve::router
