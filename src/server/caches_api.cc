#include "server/caches_api.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

namespace kvserve {

using nlohmann::json;

namespace {

constexpr int64_t kMaxTtlSeconds = 30 * 24 * 3600;

std::optional<ApiError> ParseTtl(const json& body, int64_t* ttl_seconds) {
  auto it = body.find("ttl_seconds");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > kMaxTtlSeconds) {
    return BadRequest(
        fmt::format("'ttl_seconds' must be an integer in [1, {}] (30 days)", kMaxTtlSeconds),
        "ttl_seconds");
  }
  *ttl_seconds = it->get<int64_t>();
  return std::nullopt;
}

std::optional<ApiError> ParseCreate(const json& body, const std::string& model_name,
                                    CacheRequest* r) {
  if (!body.is_object()) return BadRequest("the body must be a JSON object");
  if (auto m = body.find("model"); m != body.end() && !m->is_null()) {
    if (!m->is_string()) return BadRequest("'model' must be a string", "model");
    if (!m->get<std::string>().empty() && *m != model_name) {
      ApiError e;
      e.status = 404;
      e.message = fmt::format("the model '{}' does not exist; this server serves '{}'",
                              m->get<std::string>(), model_name);
      e.param = "model";
      e.code = "model_not_found";
      return e;
    }
  }
  if (auto s = body.find("cache_salt"); s != body.end() && !s->is_null()) {
    if (!s->is_string()) return BadRequest("'cache_salt' must be a string", "cache_salt");
    r->cache_salt = s->get<std::string>();
  }
  if (auto e = ParseTtl(body, &r->ttl_seconds)) return e;
  const bool has_messages = body.contains("messages") && !body["messages"].is_null();
  const bool has_prompt = body.contains("prompt") && !body["prompt"].is_null();
  if (has_messages == has_prompt) {
    return BadRequest("give either 'prompt' (a string or token ids) or 'messages'", "prompt");
  }
  if (has_messages) {
    r->chat = true;
    return ParseMessages(body["messages"], &r->messages);
  }
  const json& p = body["prompt"];
  if (p.is_string()) {
    r->prompt.text = p.get<std::string>();
    return std::nullopt;
  }
  if (p.is_array() && !p.empty()) {
    r->prompt.is_ids = true;
    for (const json& t : p) {
      if (!t.is_number_integer()) break;
      r->prompt.ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    if (r->prompt.ids.size() == p.size()) return std::nullopt;
  }
  return BadRequest("'prompt' must be a string or a non-empty array of token ids", "prompt");
}

}  // namespace

json CacheJson(const ExplicitCache& c, const std::string& model) {
  return {{"id", c.id},
          {"object", "cache"},
          {"model", model},
          {"created_at", c.created_ms / 1000},
          {"expires_at", c.expires_ms / 1000},
          {"tokens", c.tokens.size()},
          {"cached_tokens", c.held_tokens}};
}

CacheApiResult ServeCaches(EngineBridge& bridge, const std::string& method, const std::string& id,
                           const std::string& body_text, const std::string& tenant) {
  CacheApiResult out;
  json body;
  if (method == "POST" || method == "PATCH") {
    try {
      body = json::parse(body_text);
    } catch (const json::exception& e) {
      out.error = BadRequest(fmt::format("the body is not valid JSON: {}", e.what()));
      return out;
    }
  }
  const std::string& model = bridge.model_name();
  ExplicitCache cache;
  if (id.empty() && method == "GET") {
    out.body = {{"object", "list"}, {"data", json::array()}};
    for (const ExplicitCache& c : bridge.ListCaches(tenant)) {
      out.body["data"].push_back(CacheJson(c, model));
    }
  } else if (id.empty()) {  // POST
    CacheRequest r;
    r.tenant = tenant;
    out.error = ParseCreate(body, model, &r);
    if (!out.error) out.error = bridge.CreateCache(r, &cache);
    if (!out.error) out.body = CacheJson(cache, model);
  } else if (method == "GET") {
    out.error = bridge.GetCache(tenant, id, &cache);
    if (!out.error) out.body = CacheJson(cache, model);
  } else if (method == "PATCH") {
    int64_t ttl = 0;
    if (!body.is_object()) {
      out.error = BadRequest("the body must be a JSON object");
    } else if (!(out.error = ParseTtl(body, &ttl)) && ttl == 0) {
      out.error = BadRequest("give 'ttl_seconds', the cache's new time to live", "ttl_seconds");
    }
    if (!out.error) out.error = bridge.UpdateCache(tenant, id, ttl, &cache);
    if (!out.error) out.body = CacheJson(cache, model);
  } else {  // DELETE
    out.error = bridge.DeleteCache(tenant, id);
    if (!out.error) out.body = {{"id", id}, {"object", "cache.deleted"}, {"deleted", true}};
  }
  return out;
}

}  // namespace kvserve
