#include "router/replica.h"

#include <fmt/format.h>

#include <utility>

namespace kvserve::router {

Result<ReplicaSpec> ParseReplicaSpec(std::string_view text) {
  ReplicaSpec spec;
  size_t at = 0;
  bool first = true;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view part = text.substr(at, comma - at);
    at = comma + 1;
    if (first) {
      spec.origin = std::string(part);
      while (!spec.origin.empty() && spec.origin.back() == '/') spec.origin.pop_back();
      first = false;
      continue;
    }
    const size_t eq = part.find('=');
    const std::string_view key = part.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? "" : part.substr(eq + 1);
    if (key == "events") {
      spec.events.endpoint = std::string(value);
    } else if (key == "replay") {
      spec.events.replay_endpoint = std::string(value);
    } else if (key == "topic") {
      spec.events.topic = std::string(value);
    } else {
      return InvalidArgument(
          fmt::format("--replica '{}': unknown part '{}'; expected URL[,events=tcp://HOST:PORT]"
                      "[,replay=tcp://HOST:PORT][,topic=TOPIC]",
                      text, part));
    }
    if (value.empty()) {
      return InvalidArgument(fmt::format("--replica '{}': '{}' needs a value", text, key));
    }
  }
  // The origin is checked the way the client will use it.
  Result<std::unique_ptr<http::Client>> probe = http::Client::Create(spec.origin);
  if (!probe.ok()) return InvalidArgument(fmt::format("--replica: {}", probe.status().message()));
  for (const std::string* endpoint : {&spec.events.endpoint, &spec.events.replay_endpoint}) {
    if (!endpoint->empty() && endpoint->rfind("tcp://", 0) != 0 &&
        endpoint->rfind("ipc://", 0) != 0 && endpoint->rfind("inproc://", 0) != 0) {
      return InvalidArgument(fmt::format(
          "--replica '{}': '{}' is not a ZeroMQ endpoint (tcp://HOST:PORT or ipc://PATH)", text,
          *endpoint));
    }
  }
  if (spec.events.endpoint.empty() &&
      (!spec.events.replay_endpoint.empty() || !spec.events.topic.empty())) {
    return InvalidArgument(
        fmt::format("--replica '{}': replay= and topic= need events= as well", text));
  }
  return spec;
}

Replica::Replica(int index, ReplicaSpec spec, http::ClientOptions options, size_t max_idle_clients)
    : index_(index), spec_(std::move(spec)), options_(options), max_idle_(max_idle_clients) {}

Result<std::unique_ptr<http::Client>> Replica::Acquire() {
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      std::unique_ptr<http::Client> c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  return http::Client::Create(spec_.origin, options_);
}

void Replica::Release(std::unique_ptr<http::Client> client) {
  std::lock_guard lock(mu_);
  if (idle_.size() < max_idle_) idle_.push_back(std::move(client));
}

void Replica::DropIdle() {
  std::vector<std::unique_ptr<http::Client>> dropped;
  {
    std::lock_guard lock(mu_);
    dropped.swap(idle_);
  }
}

}  // namespace kvserve::router
