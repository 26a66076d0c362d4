#include "server/openai_codec.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <limits>

namespace kvserve {

using nlohmann::json;

ApiError BadRequest(std::string message, std::string param) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string ErrorBody(const ApiError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return Dump(json{{"error", std::move(err)}});
}

namespace {

const char* TypeName(const json& v) { return v.type_name(); }

// Each reader leaves *out untouched when the field is absent or null.
class Reader {
 public:
  explicit Reader(const json& body) : body_(body) {}

  const json* Find(const char* key) const {
    auto it = body_.find(key);
    if (it == body_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::optional<ApiError> Bool(const char* key, bool* out) const {
    const json* v = Find(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) return WrongType(key, "a boolean", *v);
    *out = v->get<bool>();
    return std::nullopt;
  }

  std::optional<ApiError> Number(const char* key, double lo, double hi, bool lo_open, float* out,
                                 std::string_view range) const {
    const json* v = Find(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) return WrongType(key, "a number", *v);
    const double d = v->get<double>();
    if (!(lo_open ? d > lo : d >= lo) || !(d <= hi)) {
      return BadRequest(fmt::format("'{}' is {}; it must be in {}", key, d, range), key);
    }
    // The engine computes in 32-bit floats: a value that rounds to the open bound there (a
    // repetition_penalty of 1e-320 becomes 0) is out of range too, and named as such here.
    const auto f = static_cast<float>(d);
    if (lo_open && !(f > static_cast<float>(lo))) {
      return BadRequest(fmt::format("'{}' is {}, which rounds to {} as a 32-bit float; it must "
                                    "be in {}",
                                    key, d, f, range),
                        key);
    }
    *out = f;
    return std::nullopt;
  }

  std::optional<ApiError> Int(const char* key, int64_t lo, int64_t hi, int64_t* out) const {
    const json* v = Find(key);
    if (!v) return std::nullopt;
    int64_t i = 0;
    if (v->is_number_integer()) {
      if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX}) {
        return BadRequest(fmt::format("'{}' is out of range", key), key);
      }
      i = v->get<int64_t>();
    } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>()) {
      if (!(std::fabs(v->get<double>()) < 9e15)) {
        return BadRequest(fmt::format("'{}' is {}, out of range", key, v->get<double>()), key);
      }
      i = static_cast<int64_t>(v->get<double>());
    } else {
      return WrongType(key, "an integer", *v);
    }
    if (i < lo || i > hi) {
      return BadRequest(fmt::format("'{}' is {}; it must be in [{}, {}]", key, i, lo, hi), key);
    }
    *out = i;
    return std::nullopt;
  }

  std::optional<ApiError> String(const char* key, std::string* out) const {
    const json* v = Find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) return WrongType(key, "a string", *v);
    *out = v->get<std::string>();
    return std::nullopt;
  }

  static ApiError WrongType(std::string_view key, std::string_view want, const json& got) {
    return BadRequest(fmt::format("'{}' must be {}, not {}", key, want, TypeName(got)),
                      std::string(key));
  }

 private:
  const json& body_;
};

// kv_eviction: a policy name, or an object with the policy and any of budget, sink_tokens,
// evict_batch, h2o_recent_fraction, snapkv_window and snapkv_kernel.
std::optional<ApiError> ParseKvEviction(const json& v, GenerationParams* p) {
  GenerationParams::KvEvictionRequest req;
  const json* name = &v;
  if (v.is_object()) {
    for (const auto& [key, value] : v.items()) {
      if (key != "policy" && key != "budget" && key != "sink_tokens" && key != "evict_batch" &&
          key != "h2o_recent_fraction" && key != "snapkv_window" && key != "snapkv_kernel") {
        return BadRequest(fmt::format("'kv_eviction' has an unknown field '{}'", key),
                          "kv_eviction." + key);
      }
    }
    name = v.contains("policy") ? &v["policy"] : nullptr;
    if (!name) return BadRequest("'kv_eviction' needs a 'policy'", "kv_eviction.policy");
    const Reader r(v);
    int64_t i = 0;
    for (auto [key, out] : {std::pair{"budget", &req.budget},
                            std::pair{"sink_tokens", &req.sink_tokens},
                            std::pair{"evict_batch", &req.evict_batch},
                            std::pair{"snapkv_window", &req.snapkv_window},
                            std::pair{"snapkv_kernel", &req.snapkv_kernel}}) {
      if (!r.Find(key)) continue;
      const std::string_view k(key);
      const int lo = k == "budget" || k == "snapkv_window" || k == "snapkv_kernel" ? 1 : 0;
      if (auto e = r.Int(key, lo, 1 << 30, &i)) {
        e->param = std::string("kv_eviction.") + key;
        return e;
      }
      *out = static_cast<int>(i);
    }
    float f = 0;
    if (r.Find("h2o_recent_fraction")) {
      if (auto e = r.Number("h2o_recent_fraction", 0, 0.99, false, &f, "[0, 0.99]")) {
        e->param = "kv_eviction.h2o_recent_fraction";
        return e;
      }
      req.h2o_recent_fraction = f;
    }
  }
  if (!name->is_string()) {
    return Reader::WrongType("kv_eviction", "a policy name or an object", *name);
  }
  Result<KvEvictionPolicy> policy = ParseKvEvictionPolicy(name->get<std::string>(), "kv_eviction");
  if (!policy.ok()) return BadRequest(policy.status().message(), "kv_eviction");
  req.policy = *policy;
  p->kv_eviction = req;
  return std::nullopt;
}

std::optional<ApiError> ReadIdArray(const json& v, const char* param, std::vector<int32_t>* out) {
  out->clear();
  for (const json& e : v) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0 ||
        e.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return BadRequest(fmt::format("'{}' token ids must be non-negative integers", param), param);
    }
    out->push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  return std::nullopt;
}

std::optional<ApiError> ParsePrompt(const json& v, std::vector<PromptInput>* out) {
  auto bad = [] {
    return BadRequest(
        "'prompt' must be a string, an array of strings, an array of token ids or an array of "
        "arrays of token ids",
        "prompt");
  };
  if (v.is_string()) {
    out->push_back({false, v.get<std::string>(), {}});
    return std::nullopt;
  }
  if (!v.is_array() || v.empty()) {
    if (v.is_array()) return BadRequest("'prompt' must not be empty", "prompt");
    return bad();
  }
  if (v[0].is_number()) {
    PromptInput p{true, {}, {}};
    if (auto e = ReadIdArray(v, "prompt", &p.ids)) return e;
    out->push_back(std::move(p));
    return std::nullopt;
  }
  for (const json& e : v) {
    if (e.is_string()) {
      out->push_back({false, e.get<std::string>(), {}});
    } else if (e.is_array() && !e.empty()) {
      PromptInput p{true, {}, {}};
      if (auto err = ReadIdArray(e, "prompt", &p.ids)) return err;
      out->push_back(std::move(p));
    } else {
      return bad();
    }
  }
  return std::nullopt;
}

}  // namespace

namespace {

// Function names as OpenAI allows them: [a-zA-Z0-9_-]{1,64}.
bool ValidToolName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

// An assistant message's tool_calls: [{id, type: "function", function: {name, arguments}}].
std::optional<ApiError> ParseToolCalls(const json& m, const std::string& where,
                                       std::vector<ToolCall>* out) {
  auto calls = m.find("tool_calls");
  if (calls == m.end() || calls->is_null()) return std::nullopt;
  const std::string param = where + ".tool_calls";
  if (!calls->is_array()) return Reader::WrongType(param, "an array", *calls);
  for (size_t i = 0; i < calls->size(); ++i) {
    const json& c = (*calls)[i];
    const std::string at = fmt::format("{}[{}]", param, i);
    auto fn = c.is_object() ? c.find("function") : c.end();
    if (!c.is_object() || fn == c.end() || !fn->is_object()) {
      return BadRequest(fmt::format("'{}' must be {{\"id\", \"type\": \"function\", "
                                    "\"function\": {{\"name\", \"arguments\"}}}}",
                                    at),
                        at);
    }
    ToolCall call;
    if (auto id = c.find("id"); id != c.end() && id->is_string()) call.id = id->get<std::string>();
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || !ValidToolName(name->get<std::string>())) {
      return BadRequest(fmt::format("'{}.function.name' must be a function name", at),
                        at + ".function.name");
    }
    call.name = name->get<std::string>();
    auto args = fn->find("arguments");
    if (args == fn->end() || !args->is_string() ||
        json::parse(args->get<std::string>(), nullptr, false).is_discarded()) {
      return BadRequest(fmt::format("'{}.function.arguments' must be a string of JSON", at),
                        at + ".function.arguments");
    }
    call.arguments = args->get<std::string>();
    out->push_back(std::move(call));
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> AddToolSpec(const json& tool, const std::string& at, const char* params_key,
                                    GenerationParams* p) {
  structured::ToolSpec spec;
  auto name = tool.find("name");
  if (name == tool.end() || !name->is_string() || !ValidToolName(name->get<std::string>())) {
    return BadRequest(fmt::format("'{}.name' must be 1 to 64 letters, digits, '_' or '-'", at),
                      at + ".name");
  }
  spec.name = name->get<std::string>();
  for (const structured::ToolSpec& other : p->tool_specs) {
    if (other.name == spec.name) {
      return BadRequest(fmt::format("'{}.name': two tools are named '{}'", at, spec.name),
                        at + ".name");
    }
  }
  if (auto d = tool.find("description"); d != tool.end() && !d->is_null() && !d->is_string()) {
    return Reader::WrongType(at + ".description", "a string", *d);
  }
  const std::string params_param = at + "." + params_key;
  auto params = tool.find(params_key);
  if (params == tool.end() || params->is_null()) {
    spec.parameters = R"({"type":"object","properties":{}})";
  } else if (!params->is_object()) {
    return Reader::WrongType(params_param, "a JSON schema object", *params);
  } else {
    spec.parameters = params->dump();
  }
  p->tool_specs.push_back(std::move(spec));
  return std::nullopt;
}

void KeepClientOrder(const std::string& body_text, GenerationParams* p) {
  const bool schema = p->constraint && p->constraint->kind == structured::ConstraintKind::kJsonSchema;
  if (p->tools.empty() && !schema) return;
  using ordered_json = nlohmann::ordered_json;
  const ordered_json body = ordered_json::parse(body_text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return;
  // The value at `path` in the raw body, or nullptr.
  const auto at = [&](std::initializer_list<const char*> path) -> const ordered_json* {
    const ordered_json* v = &body;
    for (const char* key : path) {
      if (!v->is_object()) return nullptr;
      auto it = v->find(key);
      if (it == v->end()) return nullptr;
      v = &*it;
    }
    return v;
  };
  if (const ordered_json* tools = at({"tools"});
      tools && tools->is_array() && tools->size() == p->tools.size()) {
    for (size_t i = 0; i < p->tools.size(); ++i) {
      p->tools[i] = (*tools)[i];
      const ordered_json* fn = (*tools)[i].is_object() && (*tools)[i].contains("function")
                                   ? &(*tools)[i]["function"]
                                   : nullptr;
      if (fn && fn->is_object() && fn->contains("parameters") && (*fn)["parameters"].is_object() &&
          i < p->tool_specs.size()) {
        p->tool_specs[i].parameters = (*fn)["parameters"].dump();
      }
    }
  }
  if (!schema) return;
  const ordered_json* v = p->constraint_param == "response_format"
                              ? at({"response_format", "json_schema", "schema"})
                          : p->constraint_param == "structured_outputs" ? at({"structured_outputs", "json"})
                          : p->constraint_param == "guided_json"        ? at({"guided_json"})
                                                                        : nullptr;
  if (v == nullptr) return;
  if (v->is_object()) {
    p->constraint->text = v->dump();
  } else if (v->is_string()) {
    const ordered_json parsed = ordered_json::parse(v->get<std::string>(), nullptr, false);
    if (parsed.is_object()) p->constraint->text = parsed.dump();
  }
}

std::optional<ApiError> ParseMessages(const json& v, std::vector<ChatMessage>* out) {
  if (!v.is_array()) return Reader::WrongType("messages", "an array", v);
  if (v.empty()) return BadRequest("'messages' must not be empty", "messages");
  for (size_t i = 0; i < v.size(); ++i) {
    const json& m = v[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) return Reader::WrongType(where, "an object", m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return BadRequest(fmt::format("'{}.role' must be a string", where), where + ".role");
    }
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      return BadRequest(fmt::format("'{}.role' is '{}'; supported roles are system, developer, "
                                    "user, assistant and tool",
                                    where, role->get<std::string>()),
                        where + ".role");
    }
    ChatMessage msg;
    msg.role = r;
    if (r == "assistant") {
      if (auto e = ParseToolCalls(m, where, &msg.tool_calls)) return e;
    }
    if (r == "tool") {
      auto id = m.find("tool_call_id");
      if (id == m.end() || !id->is_string()) {
        return BadRequest(fmt::format("'{}.tool_call_id' must be a string", where),
                          where + ".tool_call_id");
      }
      msg.tool_call_id = id->get<std::string>();
    }
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (!msg.tool_calls.empty()) {  // an assistant turn that only called tools
        out->push_back(std::move(msg));
        continue;
      }
      return BadRequest(fmt::format("'{}.content' is required", where), where + ".content");
    }
    if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (const json& part : *content) {
        auto type = part.is_object() ? part.find("type") : part.end();
        auto text = part.is_object() ? part.find("text") : part.end();
        if (!part.is_object() || type == part.end() || *type != "text" || text == part.end() ||
            !text->is_string()) {
          return BadRequest(fmt::format("'{}.content' parts must be {{\"type\": \"text\", "
                                        "\"text\": string}}; other part types are not supported",
                                        where),
                            where + ".content");
        }
        msg.content += text->get<std::string>();
      }
    } else {
      return Reader::WrongType(where + ".content", "a string or an array of text parts",
                               *content);
    }
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

namespace {

using structured::ConstraintKind;
using structured::ConstraintSpec;

// A schema given as an object, or as a JSON string holding one (vLLM accepts both).
std::optional<ApiError> SchemaText(const json& v, const std::string& param, std::string* out) {
  if (v.is_object() || v.is_boolean()) {
    *out = v.dump();
    return std::nullopt;
  }
  if (v.is_string()) {
    const json parsed = json::parse(v.get<std::string>(), nullptr, false);
    if (parsed.is_discarded() || !(parsed.is_object() || parsed.is_boolean())) {
      return BadRequest(fmt::format("'{}' is a string that does not hold a JSON schema object", param),
                        param);
    }
    *out = parsed.dump();
    return std::nullopt;
  }
  return BadRequest(fmt::format("'{}' must be a JSON schema object", param), param);
}

std::optional<ApiError> ChoiceList(const json& v, const std::string& param,
                                   std::vector<std::string>* out) {
  if (!v.is_array() || v.empty()) {
    return BadRequest(fmt::format("'{}' must be a non-empty array of strings", param), param);
  }
  for (const json& c : v) {
    if (!c.is_string() || c.get<std::string>().empty()) {
      return BadRequest(fmt::format("'{}' must hold only non-empty strings", param), param);
    }
    out->push_back(c.get<std::string>());
  }
  return std::nullopt;
}

std::optional<ApiError> StringField(const json& v, const std::string& param, std::string* out) {
  if (!v.is_string() || v.get<std::string>().empty()) {
    return BadRequest(fmt::format("'{}' must be a non-empty string", param), param);
  }
  *out = v.get<std::string>();
  return std::nullopt;
}

// One constraint value under vLLM's names: json (a schema), regex, choice or grammar.
bool IsConstraintKey(std::string_view key) {
  return key == "json" || key == "regex" || key == "choice" || key == "grammar";
}

// REQUIRES: IsConstraintKey(key).
std::optional<ApiError> ParseConstraintValue(std::string_view key, const json& v,
                                             const std::string& param, ConstraintSpec* spec) {
  if (key == "json") {
    spec->kind = ConstraintKind::kJsonSchema;
    return SchemaText(v, param, &spec->text);
  }
  if (key == "choice") {
    spec->kind = ConstraintKind::kChoice;
    return ChoiceList(v, param, &spec->choices);
  }
  spec->kind = key == "regex" ? ConstraintKind::kRegex : ConstraintKind::kGrammar;
  return StringField(v, param, &spec->text);
}

// OpenAI's response_format: text, json_object, or json_schema {name, description?, schema?,
// strict?}.
std::optional<ApiError> ParseResponseFormat(const json& fmt, GenerationParams* p) {
  const std::string param = "response_format";
  if (!fmt.is_object()) return BadRequest("'response_format' must be an object", param);
  auto type = fmt.find("type");
  if (type == fmt.end() || !type->is_string()) {
    return BadRequest("'response_format' needs a string 'type': text, json_object or json_schema",
                      param);
  }
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  ConstraintSpec spec;
  if (t == "json_object") {
    spec.kind = ConstraintKind::kJsonObject;
  } else if (t == "json_schema") {
    auto js = fmt.find("json_schema");
    if (js == fmt.end() || !js->is_object()) {
      return BadRequest("'response_format.json_schema' must be an object with 'name' and 'schema'",
                        "response_format.json_schema");
    }
    auto name = js->find("name");
    if (name == js->end() || !name->is_string() || name->get<std::string>().empty() ||
        name->get<std::string>().size() > 64) {
      return BadRequest("'response_format.json_schema.name' must be a string of 1 to 64 characters",
                        "response_format.json_schema.name");
    }
    auto strict = js->find("strict");
    if (strict != js->end() && !strict->is_null()) {
      if (!strict->is_boolean()) {
        return BadRequest("'response_format.json_schema.strict' must be a boolean",
                          "response_format.json_schema.strict");
      }
      spec.json.strict = strict->get<bool>();
    }
    auto schema = js->find("schema");
    if (schema == js->end() || schema->is_null()) {
      spec.kind = ConstraintKind::kJsonObject;  // no schema: any object
    } else {
      spec.kind = ConstraintKind::kJsonSchema;
      if (auto e = SchemaText(*schema, "response_format.json_schema.schema", &spec.text)) return e;
    }
  } else {
    return BadRequest(fmt::format("'response_format.type' is '{}'; it must be text, json_object "
                                  "or json_schema", t),
                      "response_format.type");
  }
  p->constraint = std::move(spec);
  p->constraint_param = param;
  return std::nullopt;
}

// vLLM's structured_outputs object: exactly one of json, regex, choice, grammar, json_object.
std::optional<ApiError> ParseStructuredOutputs(const json& so, GenerationParams* p) {
  const std::string param = "structured_outputs";
  if (!so.is_object()) return BadRequest("'structured_outputs' must be an object", param);
  ConstraintSpec spec;
  int found = 0;
  for (const auto& [key, v] : so.items()) {
    if (v.is_null()) continue;
    const std::string name = param + "." + key;
    if (IsConstraintKey(key)) {
      if (auto e = ParseConstraintValue(key, v, name, &spec)) return e;
    } else if (key == "json_object") {
      if (!v.is_boolean()) return BadRequest("'structured_outputs.json_object' must be a boolean", name);
      if (!v.get<bool>()) continue;
      spec.kind = ConstraintKind::kJsonObject;
    } else if (key == "disable_any_whitespace" || key == "disable_fallback" ||
               key == "disable_additional_properties" || key == "whitespace_pattern" ||
               key == "backend") {
      if (key == "whitespace_pattern") {
        return BadRequest("'structured_outputs.whitespace_pattern' is not supported; kvserve "
                          "writes compact JSON", name);
      }
      if (key == "disable_additional_properties" && v.is_boolean()) spec.json.strict = v.get<bool>();
      if (key == "disable_any_whitespace") {
        // vLLM's whitespace switch: false lets JSON carry whitespace between tokens (up to
        // JsonSchemaOptions::kMaxWhitespace bytes each); kvserve's default is compact.
        if (!v.is_boolean()) return Reader::WrongType(name, "a boolean", v);
        spec.json.flexible_whitespace = !v.get<bool>();
      }
      continue;
    } else {
      return BadRequest(fmt::format("unknown field '{}' in 'structured_outputs'", key), name);
    }
    ++found;
  }
  if (found != 1) {
    return BadRequest("'structured_outputs' must set exactly one of json, regex, choice, grammar "
                      "or json_object", param);
  }
  p->constraint = std::move(spec);
  p->constraint_param = param;
  return std::nullopt;
}

// Every way a request can ask for structured output; at most one may be used.
std::optional<ApiError> ParseConstraint(const Reader& r, GenerationParams* p) {
  int ways = 0;
  std::string first;
  auto count = [&](const char* key) {
    if (r.Find(key)) {
      if (ways++ == 0) first = key;
    }
  };
  count("structured_outputs");
  for (const char* key : {"guided_json", "guided_regex", "guided_choice", "guided_grammar"}) count(key);
  if (const json* rf = r.Find("response_format")) {
    auto t = rf->is_object() ? rf->find("type") : rf->end();
    if (!rf->is_object() || t == rf->end() || *t != "text") count("response_format");
  }
  if (ways > 1) {
    return BadRequest(fmt::format("'{}' cannot be combined with another structured output field "
                                  "(response_format, structured_outputs, guided_*)", first), first);
  }
  if (const json* rf = r.Find("response_format")) {
    if (auto e = ParseResponseFormat(*rf, p)) return e;
  }
  if (const json* so = r.Find("structured_outputs")) return ParseStructuredOutputs(*so, p);
  for (const char* key : {"json", "regex", "choice", "grammar"}) {
    const std::string param = std::string("guided_") + key;
    const json* v = r.Find(param.c_str());
    if (v == nullptr) continue;
    ConstraintSpec spec;
    if (auto e = ParseConstraintValue(key, *v, param, &spec)) return e;
    p->constraint = std::move(spec);
    p->constraint_param = param;
    break;
  }
  return std::nullopt;
}

// tools, tool_choice and parallel_tool_calls (chat).
std::optional<ApiError> ParseTools(const Reader& r, Endpoint endpoint, GenerationParams* p) {
  const json* tools = r.Find("tools");
  const json* choice = r.Find("tool_choice");
  const bool any_tools = tools != nullptr && !(tools->is_array() && tools->empty());
  if (any_tools && endpoint != Endpoint::kChat) {
    return BadRequest("'tools' belongs to /v1/chat/completions", "tools");
  }
  if (tools != nullptr && !tools->is_array()) return Reader::WrongType("tools", "an array", *tools);
  if (any_tools) {
    if (tools->size() > 128) return BadRequest("'tools' may list at most 128 functions", "tools");
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string at = fmt::format("tools[{}]", i);
      auto type = t.is_object() ? t.find("type") : t.end();
      auto fn = t.is_object() ? t.find("function") : t.end();
      if (!t.is_object() || type == t.end() || *type != "function" || fn == t.end() ||
          !fn->is_object()) {
        return BadRequest(fmt::format("'{}' must be {{\"type\": \"function\", \"function\": "
                                      "{{\"name\", \"description\"?, \"parameters\"?}}}}",
                                      at),
                          at);
      }
      if (auto st = fn->find("strict"); st != fn->end() && !st->is_null() && !st->is_boolean()) {
        return Reader::WrongType(at + ".function.strict", "a boolean", *st);
      }
      if (auto e = AddToolSpec(*fn, at + ".function", "parameters", p)) return e;
      p->tools.push_back(nlohmann::ordered_json::parse(t.dump()));
    }
    p->tool_choice = GenerationParams::ToolChoice::kAuto;
  }
  if (choice != nullptr) {
    using TC = GenerationParams::ToolChoice;
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "none") {
        p->tool_choice = TC::kNone;
      } else if (c == "auto" || c == "required") {
        if (!any_tools) {
          return BadRequest(fmt::format("'tool_choice' is '{}' but no 'tools' are given", c),
                            "tool_choice");
        }
        p->tool_choice = c == "auto" ? TC::kAuto : TC::kRequired;
      } else {
        return BadRequest(fmt::format("'tool_choice' is '{}'; it must be none, auto, required or "
                                      "{{\"type\": \"function\", \"function\": {{\"name\"}}}}",
                                      c),
                          "tool_choice");
      }
    } else if (choice->is_object()) {
      auto fn = choice->find("function");
      auto name = fn != choice->end() && fn->is_object() ? fn->find("name") : choice->end();
      if (fn == choice->end() || !fn->is_object() || name == fn->end() || !name->is_string()) {
        return BadRequest("'tool_choice' must name a function: {\"type\": \"function\", "
                          "\"function\": {\"name\": ...}}",
                          "tool_choice");
      }
      const std::string want = name->get<std::string>();
      bool known = false;
      for (const structured::ToolSpec& t : p->tool_specs) known |= t.name == want;
      if (!known) {
        return BadRequest(fmt::format("'tool_choice' names '{}', which is not in 'tools'", want),
                          "tool_choice");
      }
      p->tool_choice = TC::kNamed;
      p->tool_choice_name = want;
    } else {
      return Reader::WrongType("tool_choice", "a string or an object", *choice);
    }
  }
  if (const json* par = r.Find("parallel_tool_calls")) {
    if (!par->is_boolean()) return Reader::WrongType("parallel_tool_calls", "a boolean", *par);
    p->parallel_tool_calls = par->get<bool>();
  }
  if (p->tool_choice != GenerationParams::ToolChoice::kNone && p->constraint) {
    return BadRequest(fmt::format("'{}' cannot be combined with tool calls; send tool_choice "
                                  "\"none\" or leave out one of them",
                                  p->constraint_param),
                      p->constraint_param);
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseReasoningEffort(const json& body, std::string* out) {
  const Reader r(body);
  if (!r.Find("reasoning_effort")) return std::nullopt;
  std::string effort;
  if (auto e = r.String("reasoning_effort", &effort)) return e;
  if (effort != "low" && effort != "medium" && effort != "high") {
    return BadRequest(
        fmt::format("'reasoning_effort' is '{}'; it must be low, medium or high", effort),
        "reasoning_effort");
  }
  *out = std::move(effort);
  return std::nullopt;
}

std::optional<ApiError> ParseTokenizeTools(const json& body, const std::string& body_text,
                                           std::vector<nlohmann::ordered_json>* tools) {
  GenerationParams p;
  if (auto e = ParseTools(Reader(body), Endpoint::kChat, &p)) return e;
  KeepClientOrder(body_text, &p);
  *tools = std::move(p.tools);
  return std::nullopt;
}

std::optional<ApiError> ParseGenerationParams(const json& body, Endpoint endpoint,
                                              GenerationParams* out) {
  if (!body.is_object()) return BadRequest("the request body must be a JSON object");
  const Reader r(body);
  GenerationParams& p = *out;
  p.endpoint = endpoint;
  SamplingParams& s = p.sampling;
  std::optional<ApiError> e;
#define KV_TRY(expr) \
  if ((e = (expr))) return e
  KV_TRY(r.String("model", &p.model));
  if (endpoint == Endpoint::kCompletions) {
    const json* prompt = r.Find("prompt");
    if (!prompt) return BadRequest("'prompt' is required", "prompt");
    KV_TRY(ParsePrompt(*prompt, &p.prompts));
    KV_TRY(r.Bool("echo", &p.echo));
  } else {
    const json* messages = r.Find("messages");
    if (!messages) return BadRequest("'messages' is required", "messages");
    KV_TRY(ParseMessages(*messages, &p.messages));
    KV_TRY(ParseReasoningEffort(body, &p.reasoning_effort));
  }
  int64_t i = 0;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (r.Find(key)) {
      KV_TRY(r.Int(key, 1, std::numeric_limits<int32_t>::max(), &i));
      p.max_tokens = static_cast<int>(i);
    }
  }
  KV_TRY(r.Number("temperature", 0, 2, false, &s.temperature, "[0, 2]"));
  KV_TRY(r.Number("top_p", 0, 1, true, &s.top_p, "(0, 1]"));
  KV_TRY(r.Number("min_p", 0, 1, false, &s.min_p, "[0, 1]"));
  KV_TRY(r.Number("presence_penalty", -2, 2, false, &s.presence_penalty, "[-2, 2]"));
  KV_TRY(r.Number("frequency_penalty", -2, 2, false, &s.frequency_penalty, "[-2, 2]"));
  KV_TRY(r.Number("repetition_penalty", 0, 100, true, &s.repetition_penalty, "(0, 100]"));
  if (r.Find("top_k")) {
    KV_TRY(r.Int("top_k", -1, std::numeric_limits<int32_t>::max(), &i));
    s.top_k = i < 0 ? 0 : static_cast<int32_t>(i);
  }
  if (r.Find("n")) {
    KV_TRY(r.Int("n", 1, 128, &i));
    p.n = static_cast<int>(i);
  }
  if (r.Find("seed")) {
    KV_TRY(r.Int("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                 &i));
    s.seed = static_cast<uint64_t>(i);
    s.has_seed = true;
  }
  if (r.Find("priority")) {
    KV_TRY(r.Int("priority", std::numeric_limits<int32_t>::min(),
                 std::numeric_limits<int32_t>::max(), &i));
    p.priority = static_cast<int32_t>(i);
  }
  KV_TRY(r.String("cache_salt", &p.cache_salt));
  // Prompt caching: OpenAI's key (reported back) and retention, and an explicit cache to start
  // from (POST /v1/caches).
  KV_TRY(r.String("prompt_cache_key", &p.prompt_cache_key));
  std::string retention;
  KV_TRY(r.String("prompt_cache_retention", &retention));
  if (!retention.empty() && retention != "in_memory" && retention != "24h") {
    return BadRequest("'prompt_cache_retention' must be \"in_memory\" or \"24h\"",
                      "prompt_cache_retention");
  }
  p.retention_24h = retention == "24h";
  KV_TRY(r.String("cached_content", &p.cached_content));
  KV_TRY(r.Bool("speculative", &p.speculative));
  if (const json* ev = r.Find("kv_eviction")) {
    if (auto bad = ParseKvEviction(*ev, &p)) return bad;
  }
  KV_TRY(r.Bool("ignore_eos", &p.ignore_eos));
  std::string user;
  KV_TRY(r.String("user", &user));
  if (const json* stop = r.Find("stop")) {
    if (stop->is_string()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > 16) return BadRequest("'stop' may hold at most 16 strings", "stop");
      for (const json& s1 : *stop) {
        if (!s1.is_string()) return Reader::WrongType("stop", "a string or array of strings", s1);
        p.stop.push_back(s1.get<std::string>());
      }
    } else {
      return Reader::WrongType("stop", "a string or an array of strings", *stop);
    }
    for (const std::string& s1 : p.stop) {
      if (s1.empty()) return BadRequest("'stop' strings must not be empty", "stop");
    }
  }
  if (const json* ids = r.Find("stop_token_ids")) {
    if (!ids->is_array()) return Reader::WrongType("stop_token_ids", "an array", *ids);
    KV_TRY(ReadIdArray(*ids, "stop_token_ids", &p.stop_token_ids));
  }
  KV_TRY(r.Bool("stream", &p.stream));
  if (const json* so = r.Find("stream_options")) {
    if (!so->is_object()) return Reader::WrongType("stream_options", "an object", *so);
    if (!p.stream) {
      return BadRequest("'stream_options' is only allowed when 'stream' is true",
                        "stream_options");
    }
    KV_TRY(Reader(*so).Bool("include_usage", &p.include_usage));
  }
  if (endpoint == Endpoint::kCompletions) {
    if (r.Find("logprobs")) {
      KV_TRY(r.Int("logprobs", 0, SamplingParams::kMaxTopLogprobs, &i));
      p.logprobs = static_cast<int>(i);
    }
  } else {
    bool want = false;
    KV_TRY(r.Bool("logprobs", &want));
    if (r.Find("top_logprobs")) {
      KV_TRY(r.Int("top_logprobs", 0, SamplingParams::kMaxTopLogprobs, &i));
      if (!want) {
        return BadRequest("'top_logprobs' needs 'logprobs' set to true", "top_logprobs");
      }
    } else {
      i = 0;
    }
    p.logprobs = want ? static_cast<int>(i) : -1;
  }
  // Known OpenAI fields kvserve cannot honour yet are refused rather than silently ignored.
  if (const json* bias = r.Find("logit_bias"); bias && !(bias->is_object() && bias->empty())) {
    return BadRequest("'logit_bias' is not supported", "logit_bias");
  }
  KV_TRY(ParseConstraint(r, &p));
  KV_TRY(ParseTools(r, endpoint, &p));
  if (const json* suffix = r.Find("suffix"); suffix && !(suffix->is_string() && suffix->get<std::string>().empty())) {
    return BadRequest("'suffix' is not supported", "suffix");
  }
  if (r.Find("best_of")) {
    KV_TRY(r.Int("best_of", 1, 128, &i));
    if (i != p.n) return BadRequest("'best_of' other than n is not supported", "best_of");
  }
#undef KV_TRY
  if (p.logprobs >= 0) {
    s.logprobs = true;
    s.top_logprobs = p.logprobs;
  }
  return std::nullopt;
}

namespace {

constexpr float kMinLogprob = -9999.0f;  // JSON has no -inf

float Finite(float lp) { return std::isfinite(lp) ? lp : kMinLogprob; }

json Bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

json LogprobsJson(Endpoint endpoint, const ChoiceOut& c) {
  if (!c.with_logprobs) return nullptr;
  if (endpoint == Endpoint::kChat) {
    json content = json::array();
    for (const TokenLogprobOut& t : c.logprobs) {
      json top = json::array();
      for (const auto& [tok, lp] : t.top) {
        top.push_back({{"token", tok}, {"logprob", Finite(lp)}, {"bytes", Bytes(tok)}});
      }
      content.push_back({{"token", t.token},
                         {"logprob", Finite(t.logprob)},
                         {"bytes", Bytes(t.token)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  size_t offset = c.text_offset;
  for (const TokenLogprobOut& t : c.logprobs) {
    tokens.push_back(t.token);
    token_logprobs.push_back(Finite(t.logprob));
    json alts = json::object();
    for (const auto& [tok, lp] : t.top) alts[tok] = Finite(lp);
    top.push_back(std::move(alts));
    offsets.push_back(offset);
    offset += t.token.size();
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top)},
          {"text_offset", std::move(offsets)}};
}

json FinishJson(const ChoiceOut& c) {
  return c.finish_reason.empty() ? json(nullptr) : json(c.finish_reason);
}

json HeaderJson(const ResponseHeader& h, const char* object) {
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

}  // namespace

json UsageJson(const UsageOut& u) {
  json details = {{"cached_tokens", u.cached_tokens}};
  if (!u.cached_tokens_by_tier.empty()) {
    json by_tier = json::object();
    for (const auto& [tier, tokens] : u.cached_tokens_by_tier) by_tier[tier] = tokens;
    details["cached_tokens_by_tier"] = std::move(by_tier);
  }
  // DeepSeek's names for the same split, which its clients read.
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", std::move(details)},
          {"prompt_cache_hit_tokens", u.cached_tokens},
          {"prompt_cache_miss_tokens", u.prompt_tokens - u.cached_tokens}};
}

namespace {

json ToolCallsJson(const std::vector<ToolCallOut>& calls, bool with_index) {
  json list = json::array();
  for (const ToolCallOut& call : calls) {
    json j = {{"id", call.id},
              {"type", "function"},
              {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
    if (with_index) j["index"] = call.index;
    list.push_back(std::move(j));
  }
  return list;
}

}  // namespace

json Response(const ResponseHeader& h, const std::vector<ChoiceOut>& choices,
              const UsageOut& usage) {
  const bool chat = h.endpoint == Endpoint::kChat;
  json out = HeaderJson(h, chat ? "chat.completion" : "text_completion");
  json list = json::array();
  for (const ChoiceOut& c : choices) {
    if (chat) {
      json message = {{"role", "assistant"}, {"content", c.text}};
      if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
      if (!c.tool_calls.empty()) {
        if (c.text.empty()) message["content"] = nullptr;
        message["tool_calls"] = ToolCallsJson(c.tool_calls, false);
      }
      list.push_back({{"index", c.index},
                      {"message", std::move(message)},
                      {"logprobs", LogprobsJson(h.endpoint, c)},
                      {"finish_reason", FinishJson(c)}});
    } else {
      list.push_back({{"index", c.index},
                      {"text", c.text},
                      {"logprobs", LogprobsJson(h.endpoint, c)},
                      {"finish_reason", FinishJson(c)}});
    }
  }
  out["choices"] = std::move(list);
  out["usage"] = UsageJson(usage);
  if (!usage.prompt_cache_key.empty()) out["prompt_cache_key"] = usage.prompt_cache_key;
  return out;
}

json Chunk(const ResponseHeader& h, const ChoiceOut& c, bool first, bool include_usage) {
  const bool chat = h.endpoint == Endpoint::kChat;
  json out = HeaderJson(h, chat ? "chat.completion.chunk" : "text_completion");
  json choice;
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (first || !c.text.empty()) delta["content"] = c.text;
    if (!c.reasoning.empty()) delta["reasoning_content"] = c.reasoning;
    if (!c.tool_calls.empty()) delta["tool_calls"] = ToolCallsJson(c.tool_calls, true);
    choice = {{"index", c.index},
              {"delta", std::move(delta)},
              {"logprobs", LogprobsJson(h.endpoint, c)},
              {"finish_reason", FinishJson(c)}};
  } else {
    choice = {{"index", c.index},
              {"text", c.text},
              {"logprobs", LogprobsJson(h.endpoint, c)},
              {"finish_reason", FinishJson(c)}};
  }
  out["choices"] = json::array({std::move(choice)});
  if (include_usage) out["usage"] = nullptr;
  return out;
}

json UsageChunk(const ResponseHeader& h, const UsageOut& usage) {
  json out = HeaderJson(h, h.endpoint == Endpoint::kChat ? "chat.completion.chunk"
                                                         : "text_completion");
  out["choices"] = json::array();
  out["usage"] = UsageJson(usage);
  if (!usage.prompt_cache_key.empty()) out["prompt_cache_key"] = usage.prompt_cache_key;
  return out;
}

}  // namespace kvserve
