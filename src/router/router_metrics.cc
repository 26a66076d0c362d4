#include "router/router_metrics.h"

#include <fmt/format.h>

#include <utility>

namespace kvserve::router {

namespace {

std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void Head(std::string* out, const char* name, const char* type, const char* help) {
  *out += fmt::format("# HELP kvserve_router:{} {}\n# TYPE kvserve_router:{} {}\n", name, help,
                      name, type);
}

}  // namespace

RouterMetrics::RouterMetrics(std::vector<std::string> replica_names, PolicyKind policy)
    : names_(std::move(replica_names)), policy_(policy), per_(new PerReplica[names_.size()]) {}

void RouterMetrics::Routed(int replica, Rule rule) {
  per_[static_cast<size_t>(replica)].routed[static_cast<size_t>(rule)].fetch_add(1);
}
void RouterMetrics::RoutedOther(int replica) {
  per_[static_cast<size_t>(replica)].routed_other.fetch_add(1);
}
void RouterMetrics::UpstreamError(int replica) {
  per_[static_cast<size_t>(replica)].upstream_errors.fetch_add(1);
}
void RouterMetrics::Retry(int replica) { per_[static_cast<size_t>(replica)].retries.fetch_add(1); }
void RouterMetrics::BrokeOff(int replica) {
  per_[static_cast<size_t>(replica)].broke_off.fetch_add(1);
}
void RouterMetrics::Failed() { failed_.fetch_add(1); }
void RouterMetrics::TokenizeError() { tokenize_errors_.fetch_add(1); }

void RouterMetrics::Usage(int replica, int64_t predicted_cached_tokens,
                          const ReportedUsage& reported) {
  PerReplica& p = per_[static_cast<size_t>(replica)];
  p.usage_reports.fetch_add(1);
  p.predicted_cached.fetch_add(
      static_cast<uint64_t>(std::max<int64_t>(predicted_cached_tokens, 0)));
  p.reported_cached.fetch_add(static_cast<uint64_t>(std::max<int64_t>(reported.cached_tokens, 0)));
  p.reported_prompt.fetch_add(static_cast<uint64_t>(std::max<int64_t>(reported.prompt_tokens, 0)));
}

std::string RouterMetrics::Render(const std::vector<ReplicaState>& replicas) const {
  std::string out;
  const std::string policy(PolicyName(policy_));
  const auto label = [this](size_t i) { return Escape(names_[i]); };
  const auto counter = [&](const char* name, const char* help, auto get) {
    Head(&out, name, "counter", help);
    for (size_t i = 0; i < names_.size(); ++i) {
      out += fmt::format("kvserve_router:{}{{replica=\"{}\"}} {}\n", name, label(i), get(i));
    }
  };
  const auto gauge = [&](const char* name, const char* help, auto get) {
    Head(&out, name, "gauge", help);
    for (size_t i = 0; i < names_.size() && i < replicas.size(); ++i) {
      out += fmt::format("kvserve_router:{}{{replica=\"{}\"}} {}\n", name, label(i), get(i));
    }
  };

  Head(&out, "requests_total", "counter",
       "Generation requests routed, by replica, policy and the rule that chose the replica");
  for (size_t i = 0; i < names_.size(); ++i) {
    for (int r = 0; r < kNumRules; ++r) {
      const uint64_t n = per_[i].routed[static_cast<size_t>(r)].load();
      if (n == 0) continue;
      out += fmt::format(
          "kvserve_router:requests_total{{replica=\"{}\",policy=\"{}\",rule=\"{}\"}} {}\n",
          label(i), policy, RuleName(static_cast<Rule>(r)), n);
    }
  }
  counter("other_requests_total", "Other requests (tokenize, detokenize, models) routed",
          [&](size_t i) { return per_[i].routed_other.load(); });
  counter("upstream_errors_total",
          "Requests that failed at the replica before any byte reached the client",
          [&](size_t i) { return per_[i].upstream_errors.load(); });
  counter("retries_total", "Requests moved from this replica to another after an upstream error",
          [&](size_t i) { return per_[i].retries.load(); });
  counter("broken_responses_total",
          "Streams that broke off at the replica after their head reached the client",
          [&](size_t i) { return per_[i].broke_off.load(); });
  counter("usage_reports_total", "Responses whose usage the router read",
          [&](size_t i) { return per_[i].usage_reports.load(); });
  counter("predicted_cached_tokens_total",
          "Prompt tokens the router expected the replica to hold, over the responses with usage",
          [&](size_t i) { return per_[i].predicted_cached.load(); });
  counter("reported_cached_tokens_total",
          "Prompt tokens the replica reported as cached, over the responses with usage",
          [&](size_t i) { return per_[i].reported_cached.load(); });
  counter("reported_prompt_tokens_total", "Prompt tokens the replica reported",
          [&](size_t i) { return per_[i].reported_prompt.load(); });
  gauge("replica_healthy", "1 while the replica is in the pool",
        [&](size_t i) { return replicas[i].healthy ? 1 : 0; });
  gauge("replica_in_flight", "Requests in flight to the replica through this router",
        [&](size_t i) { return replicas[i].in_flight; });
  gauge("replica_blocks", "KV blocks the replica's events say it holds",
        [&](size_t i) { return replicas[i].stored_blocks; });
  gauge("replica_predicted_blocks", "Blocks held plus blocks of requests just routed there",
        [&](size_t i) { return replicas[i].blocks; });
  const auto events = [&](const char* name, const char* help,
                          std::atomic<uint64_t> EventCounters::*field) {
    Head(&out, name, "counter", help);
    for (size_t i = 0; i < names_.size() && i < replicas.size(); ++i) {
      if (replicas[i].events == nullptr) continue;
      out += fmt::format("kvserve_router:{}{{replica=\"{}\"}} {}\n", name, label(i),
                         (replicas[i].events->*field).load());
    }
  };
  events("kv_event_batches_total", "KV event batches applied", &EventCounters::batches);
  events("kv_event_gaps_total", "Sequence gaps in the KV event stream", &EventCounters::gaps);
  events("kv_event_replayed_total", "KV event batches applied from the replay endpoint",
         &EventCounters::replayed);
  events("kv_event_resyncs_total", "Times the replica's block set was cleared for lack of history",
         &EventCounters::resyncs);
  events("kv_event_restarts_total", "Times the replica's publisher started over",
         &EventCounters::restarts);
  events("kv_event_decode_errors_total", "KV event batches that did not decode",
         &EventCounters::decode_errors);
  Head(&out, "failed_requests_total", "counter", "Requests no replica could serve");
  out += fmt::format("kvserve_router:failed_requests_total {}\n", failed_.load());
  Head(&out, "tokenize_errors_total", "counter",
       "Prompts the router could not tokenize for cache-aware routing");
  out += fmt::format("kvserve_router:tokenize_errors_total {}\n", tokenize_errors_.load());
  return out;
}

}  // namespace kvserve::router
