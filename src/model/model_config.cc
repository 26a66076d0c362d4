#include "model/model_config.h"

#include <fmt/format.h>

#include <array>

namespace kvserve {
namespace {

constexpr std::array<ArchSpec, 3> kArchs = {{
    {"llama", RopeStyle::kAdjacentPairs, false, false},
    {"qwen2", RopeStyle::kHalves, true, false},
    {"qwen3", RopeStyle::kHalves, false, true},
}};

// Reads `{arch}.{suffix}` as a positive int; `fallback` < 0 means required.
Result<int> PositiveInt(const GgufFile& f, const std::string& arch, std::string_view suffix,
                        int fallback = -1) {
  const std::string key = fmt::format("{}.{}", arch, suffix);
  if (f.Find(key) == nullptr) {
    if (fallback >= 0) return fallback;
    return NotFound(fmt::format("model metadata lacks required key '{}'", key));
  }
  KV_ASSIGN_OR_RETURN(uint64_t v, f.GetUint(key));
  if (v == 0 || v > (1u << 24)) {
    return InvalidArgument(fmt::format("metadata '{}' = {} is out of range", key, v));
  }
  return static_cast<int>(v);
}

Result<double> OptionalFloat(const GgufFile& f, const std::string& key, double fallback) {
  if (f.Find(key) == nullptr) return fallback;
  return f.GetFloat(key);
}

Status ReadRope(const GgufFile& f, const std::string& arch, ModelConfig* c) {
  RopeConfig& r = c->rope;
  r.style = c->arch->rope_style;
  KV_ASSIGN_OR_RETURN(r.rotary_dim, PositiveInt(f, arch, "rope.dimension_count", c->head_dim));
  if (r.rotary_dim > c->head_dim || r.rotary_dim % 2 != 0) {
    return InvalidArgument(fmt::format("rope.dimension_count {} does not fit head_dim {}",
                                       r.rotary_dim, c->head_dim));
  }
  KV_ASSIGN_OR_RETURN(double base, OptionalFloat(f, arch + ".rope.freq_base", 10000.0));
  if (!(base > 1.0)) return InvalidArgument(fmt::format("rope.freq_base {} must be > 1", base));
  r.freq_base = static_cast<float>(base);
  std::string type = "none";
  if (f.Find(arch + ".rope.scaling.type")) {
    KV_ASSIGN_OR_RETURN(type, f.GetString(arch + ".rope.scaling.type"));
  }
  KV_ASSIGN_OR_RETURN(double factor, OptionalFloat(f, arch + ".rope.scaling.factor", 1.0));
  if (f.Find(arch + ".rope.scale_linear") && type == "none") {  // older files
    KV_ASSIGN_OR_RETURN(factor, f.GetFloat(arch + ".rope.scale_linear"));
    type = "linear";
  }
  if (type == "none") {
    r.scaling = RopeScaling::kNone;
  } else if (type == "linear") {
    r.scaling = RopeScaling::kLinear;
  } else if (type == "yarn") {
    r.scaling = RopeScaling::kYarn;
    KV_ASSIGN_OR_RETURN(r.original_context_length,
                        PositiveInt(f, arch, "rope.scaling.original_context_length", 0));
  } else {
    return Unimplemented(fmt::format("rope scaling type '{}' is not supported (none, linear, yarn)",
                                     type));
  }
  if (!(factor > 0.0)) return InvalidArgument("rope.scaling.factor must be > 0");
  r.scaling_factor = static_cast<float>(factor);
  return Status::Ok();
}

}  // namespace

const ArchSpec* FindArch(std::string_view arch) {
  for (const ArchSpec& a : kArchs) {
    if (a.name == arch) return &a;
  }
  return nullptr;
}

std::string SupportedArchNames() {
  std::string out;
  for (const ArchSpec& a : kArchs) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

Result<ModelConfig> ModelConfigFromGguf(const GgufFile& f) {
  ModelConfig c;
  KV_ASSIGN_OR_RETURN(std::string arch, f.GetString("general.architecture"));
  c.arch = FindArch(arch);
  if (c.arch == nullptr) {
    return Unimplemented(fmt::format("architecture '{}' is not supported (supported: {})", arch,
                                     SupportedArchNames()));
  }
  if (f.Find("general.name")) {
    KV_ASSIGN_OR_RETURN(c.name, f.GetString("general.name"));
  }
  KV_ASSIGN_OR_RETURN(c.num_layers, PositiveInt(f, arch, "block_count"));
  KV_ASSIGN_OR_RETURN(c.hidden, PositiveInt(f, arch, "embedding_length"));
  KV_ASSIGN_OR_RETURN(c.ffn, PositiveInt(f, arch, "feed_forward_length"));
  KV_ASSIGN_OR_RETURN(c.num_heads, PositiveInt(f, arch, "attention.head_count"));
  KV_ASSIGN_OR_RETURN(c.num_kv_heads,
                      PositiveInt(f, arch, "attention.head_count_kv", c.num_heads));
  if (c.num_heads % c.num_kv_heads != 0) {
    return InvalidArgument(fmt::format("head_count {} is not a multiple of head_count_kv {}",
                                       c.num_heads, c.num_kv_heads));
  }
  const int default_head_dim = c.hidden % c.num_heads == 0 ? c.hidden / c.num_heads : 0;
  KV_ASSIGN_OR_RETURN(c.head_dim, PositiveInt(f, arch, "attention.key_length", default_head_dim));
  KV_ASSIGN_OR_RETURN(int v_dim, PositiveInt(f, arch, "attention.value_length", c.head_dim));
  if (c.head_dim == 0 || v_dim != c.head_dim) {
    return Unimplemented(fmt::format("head dims (key {}, value {}) must be equal and non-zero",
                                     c.head_dim, v_dim));
  }
  KV_ASSIGN_OR_RETURN(c.context_length, PositiveInt(f, arch, "context_length", 4096));
  KV_ASSIGN_OR_RETURN(double eps, OptionalFloat(f, arch + ".attention.layer_norm_rms_epsilon", 1e-5));
  if (!(eps > 0.0 && eps < 1.0)) return InvalidArgument("layer_norm_rms_epsilon out of range");
  c.rms_eps = static_cast<float>(eps);
  KV_RETURN_IF_ERROR(ReadRope(f, arch, &c));
  return c;
}

}  // namespace kvserve
