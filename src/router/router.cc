#include "router/router.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "router/event_feed.h"
#include "router/prompt_hasher.h"
#include "router/proxy.h"
#include "router/router_metrics.h"
#include "util/api_keys.h"
#include "util/log.h"
#include "util/shutdown_signals.h"

namespace kvserve::router {

using nlohmann::json;

namespace {

std::vector<EventSource> SourcesOf(const std::vector<ReplicaSpec>& specs) {
  std::vector<EventSource> out;
  for (const ReplicaSpec& s : specs) out.push_back(s.events);
  return out;
}

std::vector<std::string> NamesOf(const std::vector<ReplicaSpec>& specs) {
  std::vector<std::string> out;
  for (const ReplicaSpec& s : specs) out.push_back(s.origin);
  return out;
}

}  // namespace

struct Router::Impl {
  RouterConfig config;
  std::vector<std::unique_ptr<Replica>> replicas;
  BlockIndex index;
  PromptHasher hasher;
  RouterMetrics metrics;
  // The health round's clients, one per replica: only the round's thread uses them.
  std::vector<std::unique_ptr<http::Client>> health_clients;
  HealthChecker health;
  EventFeed feed;
  Fleet fleet;
  std::unique_ptr<http::Server> server;
  // Whether each replica has been in the pool before (its return then asks for a resync).
  std::unique_ptr<std::atomic<bool>[]> seen_healthy;

  explicit Impl(RouterConfig c)
      : config(std::move(c)),
        index(BlockIndexConfig{
            static_cast<int>(config.replicas.size()), config.block_size, config.pending_ttl, {}}),
        hasher(config.hash_seed),
        metrics(NamesOf(config.replicas), config.policy),
        health(
            static_cast<int>(config.replicas.size()), [this](int r) { return Probe(r); },
            [this](int r, bool healthy) { OnHealthChange(r, healthy); }, config.health_interval),
        feed(SourcesOf(config.replicas), &index),
        fleet(FleetConfig{&replicas, &index, &hasher, &metrics, &health, config.policy,
                          config.cache_aware, config.replica_api_key}),
        seen_healthy(new std::atomic<bool>[config.replicas.size()]) {
    http::ClientOptions upstream{config.upstream_timeout_s, config.connect_timeout_s};
    http::ClientOptions probe{config.health_timeout_s, config.health_timeout_s};
    for (size_t i = 0; i < config.replicas.size(); ++i) {
      replicas.push_back(
          std::make_unique<Replica>(static_cast<int>(i), config.replicas[i], upstream));
      Result<std::unique_ptr<http::Client>> prober =
          http::Client::Create(config.replicas[i].origin, probe);
      health_clients.push_back(prober.ok() ? std::move(prober).value() : nullptr);
      seen_healthy[i].store(false);
    }
  }

  bool Probe(int r) {
    http::Client* c = health_clients[static_cast<size_t>(r)].get();
    if (c == nullptr) return false;
    Result<http::ClientResponse> res = c->Send("GET", "/health", {});
    return res.ok() && res->status == 200;
  }

  // On the health round's thread, when the replica enters the pool: a 401 to a request without
  // a key says it keeps tenants apart.
  void LearnWhetherKeysAreRequired(int r) {
    http::Client* c = health_clients[static_cast<size_t>(r)].get();
    if (c == nullptr) return;
    Result<http::ClientResponse> res = c->Send("GET", "/v1/models", {});
    replicas[static_cast<size_t>(r)]->set_requires_key(res.ok() && res->status == 401);
  }

  void OnHealthChange(int r, bool healthy) {
    Replica& replica = *replicas[static_cast<size_t>(r)];
    replica.set_healthy(healthy);
    if (!healthy) {
      replica.DropIdle();
      KV_LOG(Warning, "replica {} left the pool", replica.origin());
      return;
    }
    LearnWhetherKeysAreRequired(r);
    // Back in the pool after an absence: it may have restarted, so its picture is rebuilt.
    if (seen_healthy[static_cast<size_t>(r)].exchange(true)) {
      feed.RequestResync(r);
      KV_LOG(Info, "replica {} is back in the pool", replica.origin());
    }
  }

  bool KeyMatches(const http::Request& req) const {
    const std::string_view auth = req.header("Authorization");
    const std::string_view prefix = "Bearer ";
    const bool bearer = auth.rfind(prefix, 0) == 0;
    const std::string_view x_api_key = req.header("x-api-key");
    bool ok = false;
    for (const std::string& key : config.api_keys) {  // every key compared: constant time
      ok |= bearer && ConstantTimeEquals(auth.substr(prefix.size()), key);
      ok |= !x_api_key.empty() && ConstantTimeEquals(x_api_key, key);
    }
    return ok;
  }

  std::optional<http::Response> Check(const http::Request& req) const {
    if (!config.api_keys.empty() && PathNeedsApiKey(req.path) && !KeyMatches(req)) {
      const bool none = req.header("Authorization").empty() && req.header("x-api-key").empty();
      return ErrorResponse(req.path, 401,
                           none ? "missing API key: send 'Authorization: Bearer KEY' or "
                                  "'x-api-key: KEY'"
                                : "incorrect API key",
                           "invalid_api_key");
    }
    bool post = false;
    const ApiRoute route = RouteOfPath(req.path, &post);
    if (route == ApiRoute::kNone) return ErrorResponse(req.path, 404, "unknown route", "not_found");
    if (req.method != (post ? "POST" : "GET")) {
      http::Response r = ErrorResponse(req.path, 405, "method not allowed", "method_not_allowed");
      r.headers.emplace_back("Allow", post ? "POST" : "GET");
      return r;
    }
    return std::nullopt;
  }

  std::vector<ReplicaState> States() const {
    std::vector<ReplicaState> out;
    for (size_t i = 0; i < replicas.size(); ++i) {
      const int r = static_cast<int>(i);
      out.push_back({replicas[i]->healthy(), replicas[i]->load(), index.NumStoredBlocks(r),
                     index.NumBlocks(r), feed.counters(r)});
    }
    return out;
  }

  std::optional<http::Response> Quick(const http::Request& req) const {
    bool post = false;
    switch (RouteOfPath(req.path, &post)) {
      case ApiRoute::kHealth: {
        const int n = health.num_healthy();
        http::Response r;
        r.status = n > 0 ? 200 : 503;
        r.body = json{{"status", n > 0 ? "ok" : "no healthy replica"},
                      {"healthy_replicas", n},
                      {"replicas", replicas.size()}}
                     .dump();
        return r;
      }
      case ApiRoute::kMetrics: {
        http::Response r;
        r.content_type = "text/plain; version=0.0.4; charset=utf-8";
        r.body = metrics.Render(States());
        return r;
      }
      default:
        return std::nullopt;
    }
  }
};

Router::Router(RouterConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {
  Impl& s = *impl_;
  http::Handlers h;
  h.check = [&s](const http::Request& req) { return s.Check(req); };
  h.quick = [&s](const http::Request& req) { return s.Quick(req); };
  h.serve = [&s](http::Request& req, http::Exchange& ex) { s.fleet.Serve(req, ex); };
  h.error = [](int status, const std::string& message) {
    return ErrorResponse("", status, message, "");
  };
  s.server = std::make_unique<http::Server>(s.config.server, std::move(h));
}

Router::~Router() { Stop(); }

Result<int> Router::Bind() {
  Impl& s = *impl_;
  s.health.CheckAll();
  for (size_t i = 0; i < s.replicas.size(); ++i) {
    if (s.replicas[i]->healthy()) s.seen_healthy[i].store(true);
  }
  if (s.config.start_health_thread) s.health.Start();
  s.feed.Start();
  return s.server->Bind();
}

Status Router::Run() { return impl_->server->Run(); }

void Router::Stop() {
  impl_->server->Stop();
  impl_->health.Stop();
  impl_->feed.Stop();
}

BlockIndex& Router::index() { return impl_->index; }
HealthChecker& Router::health() { return impl_->health; }

Status RunRouter(const RouterConfig& config) {
  const sigset_t signals = BlockShutdownSignals();  // before any thread starts

  Router router(config);
  KV_ASSIGN_OR_RETURN(const int port, router.Bind());
  fmt::print(stderr, "kvserve route: {} replicas ({} in the pool), policy {}\n",
             config.replicas.size(), router.health().num_healthy(), PolicyName(config.policy));
  std::printf("kvserve: listening on http://%s:%d\n", config.server.host.c_str(), port);
  std::fflush(stdout);

  return RunUntilShutdownSignal(
      signals, [&] { return router.Run(); }, [&] { router.Stop(); });
}

}  // namespace kvserve::router
