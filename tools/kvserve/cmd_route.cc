// kvserve route: a cache-aware router in front of kvserve replicas (see docs/router.md).
#include <fmt/format.h>

#include <cstdlib>

#include "commands.h"
#include "router/router.h"
#include "util/byte_size.h"
#include "util/log.h"

namespace kvserve::cli {
namespace {

struct RouteOptions {
  router::RouterConfig config;
  std::vector<std::string> replicas;
  std::string policy = "cache-aware";
  double health_interval_s = 1;
  double pending_ttl_s = 10;
  std::string max_body = "8MiB";
  std::string log_level = "info";
  std::string log_format = "text";
};

void RunRoute(RouteOptions& o) {
  router::RouterConfig& c = o.config;
  const std::optional<LogLevel> level = ParseLogLevel(o.log_level);
  if (!level) Fail("--log-level must be debug, info, warning, error or off");
  SetLogLevel(*level);
  const std::optional<LogFormat> format = ParseLogFormat(o.log_format);
  if (!format) Fail("--log-format must be text or json");
  SetLogFormat(*format);
  if (o.replicas.empty()) Fail("give at least one --replica URL");
  for (const std::string& text : o.replicas) {
    Result<router::ReplicaSpec> spec = router::ParseReplicaSpec(text);
    if (!spec.ok()) Fail(spec.status().message());
    c.replicas.push_back(std::move(spec).value());
  }
  Result<router::PolicyKind> policy = router::ParsePolicy(o.policy);
  if (!policy.ok()) Fail("--policy: " + policy.status().message());
  c.policy = *policy;
  if (c.api_keys.empty()) {
    if (const char* key = std::getenv("KVSERVE_API_KEY")) c.api_keys.push_back(key);
  }
  if (c.server.port < 0 || c.server.port > 65535) Fail("--port must be in [0, 65535]");
  if (!(o.health_interval_s > 0) || o.health_interval_s > 3600) {
    Fail("--health-interval must be in (0, 3600] seconds");
  }
  c.health_interval = std::chrono::milliseconds(static_cast<int64_t>(o.health_interval_s * 1e3));
  if (!(o.pending_ttl_s >= 0) || o.pending_ttl_s > 3600) {
    Fail("--pending-ttl must be in [0, 3600] seconds");
  }
  c.pending_ttl = std::chrono::milliseconds(static_cast<int64_t>(o.pending_ttl_s * 1e3));
  for (const auto& [flag, value] :
       {std::pair<const char*, double>{"--health-timeout", c.health_timeout_s},
        {"--upstream-timeout", c.upstream_timeout_s},
        {"--connect-timeout", c.connect_timeout_s}}) {
    if (!(value > 0) || value > 86400) Fail(fmt::format("{} must be in (0, 86400] seconds", flag));
  }
  const router::CacheAwareConfig& ca = c.cache_aware;
  if (!(ca.cache_threshold >= 0 && ca.cache_threshold <= 1)) {
    Fail("--cache-threshold must be in [0, 1]");
  }
  if (ca.balance_abs_threshold < 0) Fail("--balance-abs-threshold must be >= 0");
  if (!(ca.balance_rel_threshold >= 1)) Fail("--balance-rel-threshold must be >= 1");
  if (c.block_size < 0) Fail("--block-size must be >= 0");
  if (c.server.num_workers < 1) Fail("--max-concurrent-requests must be >= 1");
  auto body = ParseByteSize(o.max_body);
  if (!body.ok()) Fail("--max-body-bytes: " + body.status().message());
  c.server.limits.max_body_bytes = *body;
  const Status s = router::RunRouter(c);
  if (!s.ok()) Fail(s.ToString());
}

}  // namespace

void AddRouteCommand(CLI::App& app) {
  auto o = std::make_shared<RouteOptions>();
  router::RouterConfig& c = o->config;
  c.server.num_workers = 1024;
  CLI::App* cmd = app.add_subcommand(
      "route", "Route OpenAI/Anthropic requests across kvserve replicas (cache-aware by default)");
  cmd->add_option("--replica", o->replicas,
                  "A replica: URL[,events=tcp://HOST:PORT][,replay=tcp://HOST:PORT][,topic=T]; "
                  "events= is its --kv-events-config endpoint, replay= its replay_endpoint "
                  "(repeat for each replica)")
      ->required();
  cmd->add_option("--policy", o->policy, "cache-aware (default), least-load or round-robin");
  cmd->add_option("--host", c.server.host, "Address to bind (default 127.0.0.1)");
  cmd->add_option("--port", c.server.port, "TCP port; 0 = any free port (default 8080)");
  cmd->add_option("--api-key", c.api_keys,
                  "Require 'Authorization: Bearer KEY' or 'x-api-key: KEY' on /v1/*, /tokenize, "
                  "/detokenize (default: env KVSERVE_API_KEY); repeatable");
  cmd->add_option("--replica-api-key", c.replica_api_key,
                  "Key sent to the replicas instead of the client's own key headers");
  cmd->add_option("--kv-events-hash-seed", c.hash_seed,
                  "The replicas' --kv-events-hash-seed (vLLM's PYTHONHASHSEED; default \"\")");
  cmd->add_option("--block-size", c.block_size,
                  "Tokens per KV block for prompt hashing (default 0: learned from the events)");
  cmd->add_option("--cache-threshold", c.cache_aware.cache_threshold,
                  "cache-aware: the share of the prompt a replica must hold to be preferred for "
                  "it (default 0.3)");
  cmd->add_option("--balance-abs-threshold", c.cache_aware.balance_abs_threshold,
                  "cache-aware: the fleet is imbalanced when max - min in-flight requests "
                  "exceeds this (default 64)...");
  cmd->add_option("--balance-rel-threshold", c.cache_aware.balance_rel_threshold,
                  "...and max > this x min (default 1.5); then least-load decides");
  cmd->add_option("--pending-ttl", o->pending_ttl_s,
                  "cache-aware: seconds a routed prompt's blocks count as on its replica before "
                  "its KV events confirm them (default 10)");
  cmd->add_option("--health-interval", o->health_interval_s,
                  "Seconds between health checks of each replica (default 1)");
  cmd->add_option("--health-timeout", c.health_timeout_s,
                  "Seconds a health check may take (default 2)");
  cmd->add_option("--upstream-timeout", c.upstream_timeout_s,
                  "Seconds a replica may stay silent during a response (default 600)");
  cmd->add_option("--connect-timeout", c.connect_timeout_s,
                  "Seconds to connect to a replica before trying another (default 2)");
  cmd->add_option("--max-concurrent-requests", c.server.num_workers,
                  "Requests proxied at once, each on its own thread (default 1024)");
  cmd->add_option("--max-body-bytes", o->max_body, "Largest request body (default 8MiB)");
  cmd->add_option("--log-level", o->log_level, "debug, info (default), warning, error or off");
  cmd->add_option("--log-format", o->log_format, "text (default) or json");
  cmd->callback([o] { RunRoute(*o); });
}

}  // namespace kvserve::cli
