// Explicit caches over HTTP: POST /v1/caches {model, prompt | messages, ttl_seconds, cache_salt}
// makes one (its prompt's KV computed and held until it expires); GET /v1/caches lists the
// caller's; GET, PATCH {ttl_seconds} and DELETE /v1/caches/{id} read, extend or shorten, and end
// one. A generation names one with `cached_content: id`, and its prompt then starts with the
// cache's messages or prompt. Caches belong to the API key that made them (the tenant): another
// key gets 404 for them.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/engine_bridge.h"
#include "server/openai_codec.h"

namespace kvserve {

struct CacheApiResult {
  std::optional<ApiError> error;
  nlohmann::json body;
};

// `id` is empty for /v1/caches. REQUIRES: method is one the route answers.
CacheApiResult ServeCaches(EngineBridge& bridge, const std::string& method, const std::string& id,
                           const std::string& body, const std::string& tenant);

// The JSON of one cache.
nlohmann::json CacheJson(const ExplicitCache& cache, const std::string& model);

}  // namespace kvserve
