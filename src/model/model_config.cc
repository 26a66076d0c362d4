#include "model/model_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>

namespace kvserve {
namespace {

constexpr std::array<ArchSpec, 9> kArchs = {{
    {.name = "llama"},  // with experts: Mixtral; with attention.sliding_window: Mistral v0.1
    {.name = "qwen2", .rope_style = RopeStyle::kHalves, .has_qkv_bias = true},
    {.name = "qwen3", .rope_style = RopeStyle::kHalves, .has_qk_norm = true},
    {.name = "qwen3moe",
     .rope_style = RopeStyle::kHalves,
     .has_qk_norm = true,
     .needs_experts = true},
    {.name = "deepseek2", .mla = true, .moe_weights_norm = false, .needs_experts = true},
    {.name = "gemma2",
     .rope_style = RopeStyle::kHalves,
     .gemma = true,
     .ffn_act = FfnActivation::kGeluTanh,
     .swa_period = 2,
     .default_window = 4096,
     .hidden_scale_layers = 46,
     .default_attn_softcap = 50.f,
     .default_final_softcap = 30.f},
    {.name = "phi3", .rope_style = RopeStyle::kHalves, .phi3_window_defaults = true},
    {.name = "gpt-oss",
     .rope_style = RopeStyle::kHalves,
     .has_qkv_bias = true,
     .moe_weights_norm = false,
     .ffn_act = FfnActivation::kSwigluOai,
     .swa_period = 2,
     .attn_out_bias = true,
     .attn_sinks = true,
     .moe_biases = true,
     .needs_experts = true,
     .moe_softmax_weight = true,
     .ffn_norm_tensor = "post_attention_norm"},
    {.name = "gemma3",
     .rope_style = RopeStyle::kHalves,
     .has_qk_norm = true,
     .gemma = true,
     .ffn_act = FfnActivation::kGeluTanh,
     .swa_period = 6,
     .local_rope_base = 10000.f,
     .hidden_scale_layers = 62},
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

// Reads `{arch}.{suffix}` as an int >= 0 (absent: fallback).
Result<int> CountOr(const GgufFile& f, const std::string& arch, std::string_view suffix,
                    int fallback) {
  const std::string key = fmt::format("{}.{}", arch, suffix);
  if (f.Find(key) == nullptr) return fallback;
  KV_ASSIGN_OR_RETURN(uint64_t v, f.GetUint(key));
  if (v > (1u << 24)) return InvalidArgument(fmt::format("metadata '{}' = {} is out of range", key, v));
  return static_cast<int>(v);
}

Status ReadMoe(const GgufFile& f, const std::string& arch, ModelConfig* c) {
  MoeConfig& m = c->moe;
  KV_ASSIGN_OR_RETURN(m.num_experts, CountOr(f, arch, "expert_count", 0));
  if (m.num_experts == 0) {
    if (c->arch->needs_experts) {
      return NotFound(fmt::format("model metadata lacks required key '{}.expert_count'", arch));
    }
    return Status::Ok();
  }
  KV_ASSIGN_OR_RETURN(m.num_used, PositiveInt(f, arch, "expert_used_count"));
  if (m.num_used > m.num_experts) {
    return InvalidArgument(fmt::format("expert_used_count {} exceeds expert_count {}", m.num_used,
                                       m.num_experts));
  }
  // Mixtral (llama) has none: its experts are feed_forward_length wide. qwen3moe files without
  // the key split feed_forward_length among the used experts.
  const int default_ffn = arch == "qwen3moe" ? std::max(1, c->ffn / m.num_used) : c->ffn;
  KV_ASSIGN_OR_RETURN(m.expert_ffn, PositiveInt(f, arch, "expert_feed_forward_length", default_ffn));
  KV_ASSIGN_OR_RETURN(m.num_shared, CountOr(f, arch, "expert_shared_count", 0));
  KV_ASSIGN_OR_RETURN(m.leading_dense, CountOr(f, arch, "leading_dense_block_count", 0));
  if (m.leading_dense > c->num_layers) {
    return InvalidArgument(fmt::format("leading_dense_block_count {} exceeds block_count {}",
                                       m.leading_dense, c->num_layers));
  }
  KV_ASSIGN_OR_RETURN(int gating, CountOr(f, arch, "expert_gating_func", 1));
  if (gating == 0 || gating == 1) {  // 0: older files without the key's value (softmax)
    m.gating = MoeGating::kSoftmax;
  } else if (gating == 2) {
    m.gating = MoeGating::kSigmoid;
  } else if (gating == 3) {
    m.gating = MoeGating::kSoftmaxWeight;
  } else {
    return Unimplemented(fmt::format(
        "expert_gating_func {} is not supported (1 softmax, 2 sigmoid, 3 softmax of the chosen)",
        gating));
  }
  if (c->arch->moe_softmax_weight) m.gating = MoeGating::kSoftmaxWeight;
  m.norm_weights = c->arch->moe_weights_norm;
  if (const std::string key = arch + ".expert_weights_norm"; f.Find(key) != nullptr) {
    KV_ASSIGN_OR_RETURN(m.norm_weights, f.GetBool(key));
  }
  // Only deepseek2 reads the scale (0, absent or 1: none).
  if (arch == "deepseek2") {
    KV_ASSIGN_OR_RETURN(double scale, OptionalFloat(f, arch + ".expert_weights_scale", 0.0));
    if (!(scale >= 0.0 && scale < 1e6)) {
      return InvalidArgument(fmt::format("expert_weights_scale {} is out of range", scale));
    }
    m.weights_scale = scale == 0.0 ? 1.f : static_cast<float>(scale);
  }
  KV_ASSIGN_OR_RETURN(m.num_groups, CountOr(f, arch, "expert_group_count", 1));
  KV_ASSIGN_OR_RETURN(m.num_groups_used, CountOr(f, arch, "expert_group_used_count", m.num_groups));
  if (m.num_groups == 0) m.num_groups = m.num_groups_used = 1;
  if (m.num_experts % m.num_groups != 0 || m.num_groups_used == 0 ||
      m.num_groups_used > m.num_groups ||
      m.num_groups_used * (m.num_experts / m.num_groups) < m.num_used) {
    return InvalidArgument(fmt::format(
        "expert groups ({} used of {}) do not fit {} experts with {} used", m.num_groups_used,
        m.num_groups, m.num_experts, m.num_used));
  }
  return Status::Ok();
}

// deepseek2: the latent attention's dimensions. Newer files write key_length = kv_lora_rank +
// rope, value_length = kv_lora_rank, head_count_kv = 1 and the per-head sizes in the `_mla`
// keys; older ones key_length / value_length per head and head_count_kv = head_count.
Status ReadMla(const GgufFile& f, const std::string& arch, ModelConfig* c) {
  MlaConfig& m = c->mla;
  KV_ASSIGN_OR_RETURN(m.kv_lora_rank, PositiveInt(f, arch, "attention.kv_lora_rank"));
  KV_ASSIGN_OR_RETURN(m.q_lora_rank, CountOr(f, arch, "attention.q_lora_rank", 0));
  KV_ASSIGN_OR_RETURN(m.qk_rope, PositiveInt(f, arch, "rope.dimension_count"));
  KV_ASSIGN_OR_RETURN(int key_length, PositiveInt(f, arch, "attention.key_length"));
  KV_ASSIGN_OR_RETURN(int value_length, PositiveInt(f, arch, "attention.value_length"));
  KV_ASSIGN_OR_RETURN(int qk_head, PositiveInt(f, arch, "attention.key_length_mla", key_length));
  KV_ASSIGN_OR_RETURN(m.v_head, PositiveInt(f, arch, "attention.value_length_mla", value_length));
  if (qk_head <= m.qk_rope || m.qk_rope % 2 != 0) {
    return InvalidArgument(fmt::format("MLA key length {} does not leave room for rope {}",
                                       qk_head, m.qk_rope));
  }
  m.qk_nope = qk_head - m.qk_rope;
  c->num_kv_heads = 1;  // the cache: one latent vector per token
  c->head_dim = m.latent_dim();
  return Status::Ok();
}

// After ReadRope.
Status ReadMlaScale(const GgufFile& f, const std::string& arch, ModelConfig* c) {
  MlaConfig& m = c->mla;
  c->rope.yarn_magnitude = false;
  // DeepSeek's YaRN: the attention magnitude goes into the softmax scale (squared, as it applies
  // to both q and k), the rotation itself is not scaled.
  // The file's multiplier is 0.1 * DeepSeek's mscale_all_dim. Files with YaRN but without it
  // keep YaRN's own magnitude on the rotation and square it into the scale as well.
  float mscale = 1.f;
  if (c->rope.scaling == RopeScaling::kYarn) {
    const float ln_s = std::log(c->rope.scaling_factor);
    if (f.Find(arch + ".rope.scaling.yarn_log_multiplier") != nullptr) {
      KV_ASSIGN_OR_RETURN(double log_mul, f.GetFloat(arch + ".rope.scaling.yarn_log_multiplier"));
      mscale = 1.f + static_cast<float>(log_mul) * ln_s;
    } else {
      c->rope.yarn_magnitude = true;
      mscale = 1.f + 0.1f * ln_s;
    }
  }
  m.kq_scale = mscale * mscale / std::sqrt(static_cast<float>(m.q_head()));
  return Status::Ok();
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
  } else {
    return Unimplemented(fmt::format("rope scaling type '{}' is not supported (none, linear, yarn)",
                                     type));
  }
  // YaRN's, and the context LongRoPE's factor sets are chosen against (phi3).
  KV_ASSIGN_OR_RETURN(r.original_context_length,
                      CountOr(f, arch, "rope.scaling.original_context_length", 0));
  if (!(factor > 0.0)) return InvalidArgument("rope.scaling.factor must be > 0");
  r.scaling_factor = static_cast<float>(factor);
  if (!c->arch->mla) {  // deepseek2 folds its own factors into the softmax scale (ReadMlaScale)
    KV_ASSIGN_OR_RETURN(double attn, OptionalFloat(f, arch + ".rope.scaling.attn_factor", 1.0));
    if (!(attn > 0.0 && attn < 1e3)) {
      return InvalidArgument(fmt::format("rope.scaling.attn_factor {} is out of range", attn));
    }
    r.attn_factor = static_cast<float>(attn);
  }
  return Status::Ok();
}

// llama.cpp's sliding window for phi3 files without attention.sliding_window: Phi-3-mini-4k and
// Phi-3-medium-4k 2047, Phi-3-mini-128k 262144, Phi-3-medium-128k 131072.
Result<int> Phi3DefaultWindow(const ModelConfig& c) {
  if ((c.num_layers == 32 || c.num_layers == 40) && c.context_length == 4096) return 2047;
  if (c.num_layers == 32 && c.num_kv_heads == 32 && c.context_length == 131072) return 262144;
  if (c.num_layers == 40 && c.context_length == 131072) return 131072;
  return InvalidArgument("phi3 model metadata lacks 'phi3.attention.sliding_window'");
}

// Sliding windows, the softmax scale, soft-caps and the embedding scale (after ReadRope).
Status ReadWindowsAndScales(const GgufFile& f, const std::string& arch, ModelConfig* c) {
  const ArchSpec& a = *c->arch;
  int default_window = a.default_window;
  if (a.phi3_window_defaults && f.Find(arch + ".attention.sliding_window") == nullptr) {
    KV_ASSIGN_OR_RETURN(default_window, Phi3DefaultWindow(*c));
  }
  KV_ASSIGN_OR_RETURN(c->sliding_window,
                      CountOr(f, arch, "attention.sliding_window", default_window));
  const std::string pattern_key = arch + ".attention.sliding_window_pattern";
  const GgufValue* pattern = f.Find(pattern_key);
  if (pattern != nullptr && pattern->AsArray() != nullptr) {
    // One flag per layer (llama.cpp's get_key_or_arr).
    const GgufArray& flags = *pattern->AsArray();
    if (flags.items.size() != static_cast<size_t>(c->num_layers)) {
      return InvalidArgument(fmt::format("metadata '{}' has {} entries for {} layers", pattern_key,
                                         flags.items.size(), c->num_layers));
    }
    for (const GgufValue& item : flags.items) {
      const std::optional<bool> b = item.AsBool();
      const std::optional<int64_t> i = item.AsInt();
      if (!b && !i) {
        return InvalidArgument(
            fmt::format("metadata '{}' holds a value that is no flag", pattern_key));
      }
      c->swa_layers.push_back(b ? *b : *i != 0);
    }
    c->swa_period = 0;
  } else {
    KV_ASSIGN_OR_RETURN(c->swa_period,
                        CountOr(f, arch, "attention.sliding_window_pattern", a.swa_period));
  }
  c->rope_local = c->rope;
  if (c->sliding_window > 0 && a.local_rope_base > 0.f) {
    KV_ASSIGN_OR_RETURN(double base,
                        OptionalFloat(f, arch + ".rope.freq_base_swa", a.local_rope_base));
    if (!(base > 1.0)) {
      return InvalidArgument(fmt::format("rope.freq_base_swa {} must be > 1", base));
    }
    c->rope_local.freq_base = static_cast<float>(base);
    c->rope_local.scaling = RopeScaling::kNone;
    c->rope_local.scaling_factor = 1.f;
  }
  float pre_attn = static_cast<float>(c->head_dim);
  if (a.hidden_scale_layers > 0 && c->num_layers == a.hidden_scale_layers) {
    pre_attn = static_cast<float>(c->hidden) / static_cast<float>(c->num_heads);
  }
  c->attn_scale = 1.f / std::sqrt(pre_attn);
  if (!a.gemma) return Status::Ok();
  // Gemma: an explicit query scale if the file has one, the soft-caps and the embedding scale.
  if (f.Find(arch + ".attention.scale") != nullptr) {
    KV_ASSIGN_OR_RETURN(double s, f.GetFloat(arch + ".attention.scale"));
    if (!(s > 0.0 && s < 1e6)) {
      return InvalidArgument(fmt::format("attention.scale {} is out of range", s));
    }
    c->attn_scale = static_cast<float>(s);
  }
  c->embed_scale = std::sqrt(static_cast<float>(c->hidden));
  for (auto [key, fallback, out] :
       {std::tuple{".attn_logit_softcapping", a.default_attn_softcap, &c->attn_softcap},
        std::tuple{".final_logit_softcapping", a.default_final_softcap, &c->final_softcap}}) {
    KV_ASSIGN_OR_RETURN(double cap, OptionalFloat(f, arch + key, fallback));
    if (!(cap < 1e6)) {
      return InvalidArgument(fmt::format("{}{} = {} is out of range", arch, key, cap));
    }
    *out = cap > 0.0 ? static_cast<float>(cap) : 0.f;  // <= 0: none
  }
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
  KV_ASSIGN_OR_RETURN(c.context_length, PositiveInt(f, arch, "context_length", 4096));
  KV_ASSIGN_OR_RETURN(double eps, OptionalFloat(f, arch + ".attention.layer_norm_rms_epsilon", 1e-5));
  if (!(eps > 0.0 && eps < 1.0)) return InvalidArgument("layer_norm_rms_epsilon out of range");
  c.rms_eps = static_cast<float>(eps);
  if (c.arch->mla) {
    // DeepSeek-V3's multi-token-prediction layers come last; inference runs the others.
    KV_ASSIGN_OR_RETURN(int nextn, CountOr(f, arch, "nextn_predict_layers", 0));
    if (nextn >= c.num_layers) return InvalidArgument("nextn_predict_layers leaves no layer");
    c.num_layers -= nextn;
    KV_RETURN_IF_ERROR(ReadMla(f, arch, &c));
    KV_RETURN_IF_ERROR(ReadRope(f, arch, &c));
    if (c.rope.rotary_dim != c.mla.qk_rope) return InvalidArgument("MLA rope dims disagree");
    KV_RETURN_IF_ERROR(ReadMlaScale(f, arch, &c));
    KV_RETURN_IF_ERROR(ReadMoe(f, arch, &c));
    return c;
  }
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
  KV_RETURN_IF_ERROR(ReadRope(f, arch, &c));
  KV_RETURN_IF_ERROR(ReadMoe(f, arch, &c));
  KV_RETURN_IF_ERROR(ReadWindowsAndScales(f, arch, &c));
  return c;
}

}  // namespace kvserve
