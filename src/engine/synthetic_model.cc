#include "engine/synthetic_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "engine/embedded_model.h"
#include "model/model_config.h"

namespace kvserve {
namespace {

// splitmix64: a tiny, fully specified generator (same stream everywhere).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float Uniform() { return static_cast<float>((Next() >> 40) * 0x1p-24 * 2.0 - 1.0); }

 private:
  uint64_t state_;
};

std::vector<float> RandomVector(Rng& rng, int64_t n, float center, float half_width) {
  std::vector<float> v(n);
  for (float& x : v) x = center + half_width * rng.Uniform();
  return v;
}

GgmlType FitType(GgmlType want, int64_t cols) {
  for (GgmlType t : {want, GgmlType::kQ8_0, GgmlType::kF16}) {
    if (cols % Traits(t).block_elems == 0) return t;
  }
  return GgmlType::kF32;
}

Status AddFloats(GgufWriter& w, const std::string& name, std::vector<int64_t> dims,
                 GgmlType type, const std::vector<float>& values) {
  const int64_t cols = dims[0];
  const int64_t rows = static_cast<int64_t>(values.size()) / cols;
  const uint64_t row_bytes = *RowBytes(type, cols);
  std::vector<uint8_t> bytes(row_bytes * rows);
  for (int64_t r = 0; r < rows; ++r) {
    if (!QuantizeRow(type, values.data() + r * cols, bytes.data() + r * row_bytes, cols)) {
      return Internal(fmt::format("cannot quantize '{}' to {}", name, Traits(type).name));
    }
  }
  return w.AddTensor(name, std::move(dims), type, std::move(bytes));
}

// A [rows, cols] matrix (GGUF dims [cols, rows]) with std 1/sqrt(cols).
Status AddMatrix(GgufWriter& w, Rng& rng, const std::string& name, int64_t rows, int64_t cols,
                 GgmlType type) {
  const float half_width = std::sqrt(3.0f / static_cast<float>(cols));
  return AddFloats(w, name, {cols, rows}, FitType(type, cols),
                   RandomVector(rng, rows * cols, 0.f, half_width));
}

Status AddVector(GgufWriter& w, Rng& rng, const std::string& name, int64_t n, float center) {
  return AddFloats(w, name, {n}, GgmlType::kF32, RandomVector(rng, n, center, 0.1f));
}

// Output rows of unused, control and byte tokens are zero (logit 0 whatever the input), so a
// synthetic model's text is made mostly of real vocabulary pieces.
void ZeroSilentRows(const TokenizerSpec& tok, int hidden, std::vector<float>& rows) {
  for (size_t id = 0; id < tok.types.size(); ++id) {
    const TokenType t = tok.types[id];
    if (t == TokenType::kUnused || t == TokenType::kControl || t == TokenType::kByte) {
      std::fill_n(rows.begin() + static_cast<int64_t>(id) * hidden, hidden, 0.f);
    }
  }
}

// A [rows, cols] matrix with elements uniform of the given std (any GGUF dims, e.g. 3-D).
Status AddScaled(GgufWriter& w, Rng& rng, const std::string& name, std::vector<int64_t> dims,
                 float std_dev, GgmlType type) {
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  const GgmlType t = FitType(type, dims[0]);
  return AddFloats(w, name, std::move(dims), t,
                   RandomVector(rng, count, 0.f, std_dev * std::sqrt(3.0f)));
}

void WriteMoeMetadata(const SyntheticModelSpec& s, GgufWriter& w) {
  const std::string& a = s.arch;
  const SyntheticMoeSpec& m = s.moe;
  if (m.num_experts == 0) return;
  w.SetUint32(a + ".expert_count", m.num_experts);
  w.SetUint32(a + ".expert_used_count", m.num_used);
  if (a != "llama") w.SetUint32(a + ".expert_feed_forward_length", m.expert_ffn > 0 ? m.expert_ffn : s.ffn);
  if (a == "deepseek2") {
    w.SetUint32(a + ".expert_shared_count", m.num_shared);
    w.SetUint32(a + ".leading_dense_block_count", m.leading_dense);
    w.SetUint32(a + ".expert_gating_func", m.gating);
    w.SetBool(a + ".expert_weights_norm", m.weights_norm);
    w.SetFloat32(a + ".expert_weights_scale", m.weights_scale);
    if (m.num_groups > 0) {
      w.SetUint32(a + ".expert_group_count", m.num_groups);
      w.SetUint32(a + ".expert_group_used_count", m.num_groups_used);
    }
  }
}

void WriteMlaMetadata(const SyntheticModelSpec& s, GgufWriter& w) {
  const std::string& a = s.arch;
  const SyntheticMlaSpec& m = s.mla;
  // Written even when 0 (a full attn_q): converted V2-Lite files omit it, and llama.cpp then
  // takes only a 26- or 27-layer file for a full-query one; with the key it loads any depth.
  w.SetUint32(a + ".attention.q_lora_rank", m.q_lora_rank);
  w.SetUint32(a + ".attention.kv_lora_rank", m.kv_lora_rank);
  w.SetUint32(a + ".rope.dimension_count", m.qk_rope);
  if (m.split_kv_b) {
    w.SetUint32(a + ".attention.head_count_kv", 1);
    w.SetUint32(a + ".attention.key_length", m.kv_lora_rank + m.qk_rope);
    w.SetUint32(a + ".attention.value_length", m.kv_lora_rank);
    w.SetUint32(a + ".attention.key_length_mla", m.qk_nope + m.qk_rope);
    w.SetUint32(a + ".attention.value_length_mla", m.v_head);
  } else {
    w.SetUint32(a + ".attention.head_count_kv", s.num_heads);
    w.SetUint32(a + ".attention.key_length", m.qk_nope + m.qk_rope);
    w.SetUint32(a + ".attention.value_length", m.v_head);
  }
  if (m.yarn_factor > 0.f) {
    w.SetString(a + ".rope.scaling.type", "yarn");
    w.SetFloat32(a + ".rope.scaling.factor", m.yarn_factor);
    w.SetUint32(a + ".rope.scaling.original_context_length", m.yarn_original_context);
    w.SetFloat32(a + ".rope.scaling.yarn_log_multiplier", 0.0707f);
  }
}

void WriteMetadata(const SyntheticModelSpec& s, int head_dim, GgufWriter& w) {
  const std::string& a = s.arch;
  w.SetString("general.architecture", a);
  w.SetString("general.name", s.name);
  w.SetUint32("general.alignment", 32);
  w.SetUint32(a + ".block_count", s.num_layers);
  w.SetUint32(a + ".context_length", s.context_length);
  w.SetUint32(a + ".embedding_length", s.hidden);
  w.SetUint32(a + ".feed_forward_length", s.ffn);
  w.SetUint32(a + ".attention.head_count", s.num_heads);
  w.SetUint32(a + ".attention.head_count_kv", s.num_kv_heads);
  w.SetUint32(a + ".attention.key_length", head_dim);
  w.SetUint32(a + ".attention.value_length", head_dim);
  w.SetUint32(a + ".rope.dimension_count", head_dim);
  w.SetFloat32(a + ".rope.freq_base", s.rope_base);
  w.SetFloat32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  if (s.sliding_window > 0 || a == "phi3") {
    w.SetUint32(a + ".attention.sliding_window", s.sliding_window);
  }
  if (s.yarn_factor > 0.f && a != "deepseek2") {
    w.SetString(a + ".rope.scaling.type", "yarn");
    w.SetFloat32(a + ".rope.scaling.factor", s.yarn_factor);
    w.SetUint32(a + ".rope.scaling.original_context_length", s.yarn_original_context);
  }
  if (s.rope_original_context > 0) {
    w.SetUint32(a + ".rope.scaling.original_context_length", s.rope_original_context);
    const double scale = static_cast<double>(s.context_length) / s.rope_original_context;
    if (scale > 1.0) {
      w.SetFloat32(
          a + ".rope.scaling.attn_factor",
          static_cast<float>(std::sqrt(1.0 + std::log(scale) / std::log(s.rope_original_context))));
    }
  }
  if (s.attn_softcap > 0.f) w.SetFloat32(a + ".attn_logit_softcapping", s.attn_softcap);
  if (s.final_softcap > 0.f) w.SetFloat32(a + ".final_logit_softcapping", s.final_softcap);
  WriteMoeMetadata(s, w);
  if (a == "deepseek2") WriteMlaMetadata(s, w);  // overrides the per-head keys
  WriteTokenizerSpec(s.tokenizer, w);
}

Status AddMlaAttention(const SyntheticModelSpec& s, int i, Rng& rng, GgufWriter& w) {
  auto n = [i](const char* suffix) { return fmt::format("blk.{}.{}", i, suffix); };
  const SyntheticMlaSpec& m = s.mla;
  const int64_t H = s.num_heads, qh = m.qk_nope + m.qk_rope, lora = m.kv_lora_rank;
  if (m.q_lora_rank > 0) {
    KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("attn_q_a.weight"), m.q_lora_rank, s.hidden, s.type));
    KV_RETURN_IF_ERROR(AddVector(w, rng, n("attn_q_a_norm.weight"), m.q_lora_rank, 1.f));
    KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("attn_q_b.weight"), H * qh, m.q_lora_rank, s.type));
  } else {
    KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("attn_q.weight"), H * qh, s.hidden, s.type));
  }
  KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("attn_kv_a_mqa.weight"), lora + m.qk_rope, s.hidden, s.type));
  KV_RETURN_IF_ERROR(AddVector(w, rng, n("attn_kv_a_norm.weight"), lora, 1.f));
  const float std_lora = 1.f / std::sqrt(static_cast<float>(lora));
  if (m.split_kv_b) {
    // attn_k_b holds W_kb,h transposed: [H][lora rows][nope cols]; attn_v_b [H][v][lora].
    KV_RETURN_IF_ERROR(AddScaled(w, rng, n("attn_k_b.weight"), {m.qk_nope, lora, H}, std_lora, s.type));
    KV_RETURN_IF_ERROR(AddScaled(w, rng, n("attn_v_b.weight"), {lora, m.v_head, H}, std_lora, s.type));
  } else {
    KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("attn_kv_b.weight"), H * (m.qk_nope + m.v_head), lora, s.type));
  }
  return AddMatrix(w, rng, n("attn_output.weight"), s.hidden, H * m.v_head, s.type);
}

Status AddMoe(const SyntheticModelSpec& s, int i, Rng& rng, GgufWriter& w) {
  auto n = [i](const char* suffix) { return fmt::format("blk.{}.{}", i, suffix); };
  const SyntheticMoeSpec& m = s.moe;
  // llama files (Mixtral) carry no expert_feed_forward_length: experts are ffn rows.
  const int64_t E = m.num_experts, ff = m.expert_ffn > 0 && s.arch != "llama" ? m.expert_ffn : s.ffn;
  KV_RETURN_IF_ERROR(AddScaled(w, rng, n("ffn_gate_inp.weight"), {s.hidden, E},
                               1.f / std::sqrt(static_cast<float>(s.hidden)), GgmlType::kF32));
  if (m.selection_bias) KV_RETURN_IF_ERROR(AddVector(w, rng, n("exp_probs_b.bias"), E, 0.f));
  if (FindArch(s.arch)->moe_biases) {
    KV_RETURN_IF_ERROR(AddVector(w, rng, n("ffn_gate_inp.bias"), E, 0.f));
    KV_RETURN_IF_ERROR(AddScaled(w, rng, n("ffn_gate_exps.bias"), {ff, E}, 0.1f, GgmlType::kF32));
    KV_RETURN_IF_ERROR(AddScaled(w, rng, n("ffn_up_exps.bias"), {ff, E}, 0.1f, GgmlType::kF32));
    KV_RETURN_IF_ERROR(
        AddScaled(w, rng, n("ffn_down_exps.bias"), {s.hidden, E}, 0.1f, GgmlType::kF32));
  }
  const float std_h = 1.f / std::sqrt(static_cast<float>(s.hidden));
  KV_RETURN_IF_ERROR(AddScaled(w, rng, n("ffn_gate_exps.weight"), {s.hidden, ff, E}, std_h, s.type));
  KV_RETURN_IF_ERROR(AddScaled(w, rng, n("ffn_up_exps.weight"), {s.hidden, ff, E}, std_h, s.type));
  KV_RETURN_IF_ERROR(AddScaled(w, rng, n("ffn_down_exps.weight"), {ff, s.hidden, E},
                               1.f / std::sqrt(static_cast<float>(ff)), s.type));
  if (m.num_shared > 0) {
    const int64_t sf = ff * m.num_shared;
    KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("ffn_gate_shexp.weight"), sf, s.hidden, s.type));
    KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("ffn_up_shexp.weight"), sf, s.hidden, s.type));
    KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("ffn_down_shexp.weight"), s.hidden, sf, s.type));
  }
  return Status::Ok();
}

}  // namespace

Result<GgufWriter> BuildSyntheticModel(const SyntheticModelSpec& s) {
  const ArchSpec* arch = FindArch(s.arch);
  if (arch == nullptr) {
    return InvalidArgument(fmt::format("unknown architecture '{}' (supported: {})", s.arch,
                                       SupportedArchNames()));
  }
  if (s.num_layers <= 0 || s.hidden <= 0 || s.num_heads <= 0 || s.num_kv_heads <= 0 ||
      s.ffn <= 0 || s.num_heads % s.num_kv_heads != 0) {
    return InvalidArgument("layers, hidden, heads, kv-heads and ffn must be positive, and heads a "
                           "multiple of kv-heads");
  }
  const int head_dim = s.head_dim > 0 ? s.head_dim : s.hidden / s.num_heads;
  if (head_dim <= 0 || head_dim % 2 != 0) return InvalidArgument("head dim must be even");
  if (arch->needs_experts && s.moe.num_experts <= 0) {
    return InvalidArgument(fmt::format("{} needs experts (--experts)", s.arch));
  }
  if (s.moe.num_experts > 0 && (s.moe.num_used <= 0 || s.moe.num_used > s.moe.num_experts ||
                                s.moe.leading_dense > s.num_layers)) {
    return InvalidArgument("experts used must be in [1, experts], leading dense layers at most "
                           "the layer count");
  }
  if (arch->mla && (s.mla.kv_lora_rank <= 0 || s.mla.qk_nope <= 0 || s.mla.qk_rope <= 0 ||
                    s.mla.qk_rope % 2 != 0 || s.mla.v_head <= 0 || s.mla.q_lora_rank < 0)) {
    return InvalidArgument("MLA ranks and head sizes must be positive (rope even)");
  }
  const int64_t vocab = static_cast<int64_t>(s.tokenizer.tokens.size());
  if (vocab <= 0) return InvalidArgument("the tokenizer has no tokens");
  if (!CanQuantize(s.type)) {
    return InvalidArgument(fmt::format("cannot write weights of type {}", Traits(s.type).name));
  }
  GgufWriter w;
  WriteMetadata(s, head_dim, w);
  Rng rng(s.seed);
  const int64_t q_dim = static_cast<int64_t>(s.num_heads) * head_dim;
  const int64_t kv_dim = static_cast<int64_t>(s.num_kv_heads) * head_dim;
  // Untied embeddings have std 1 (rows are only looked up). Tied ones also produce the logits, so
  // they get the output scale, std 3/sqrt(hidden), and the silent rows are zeroed: with std 1
  // each token's logit would be dominated by its match with itself and greedy text would repeat.
  const float output_half_width = 3.f * std::sqrt(3.0f / static_cast<float>(s.hidden));
  std::vector<float> embd = RandomVector(rng, vocab * s.hidden, 0.f,
                                         s.tie_embeddings ? output_half_width : 1.7f);
  if (s.tie_embeddings) ZeroSilentRows(s.tokenizer, s.hidden, embd);
  KV_RETURN_IF_ERROR(
      AddFloats(w, "token_embd.weight", {s.hidden, vocab}, FitType(s.type, s.hidden), embd));
  if (s.rope_original_context > 0) {
    for (const char* set : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
      KV_RETURN_IF_ERROR(AddFloats(w, set, {head_dim / 2}, GgmlType::kF32,
                                   RandomVector(rng, head_dim / 2, 2.5f, 1.5f)));
    }
  }
  const bool fused = s.arch == "phi3";  // attn_qkv and a gate|up ffn_up, as phi3 files have
  const bool mla = arch->mla;
  for (int i = 0; i < s.num_layers; ++i) {
    auto n = [i](const char* suffix) { return fmt::format("blk.{}.{}", i, suffix); };
    KV_RETURN_IF_ERROR(AddVector(w, rng, n("attn_norm.weight"), s.hidden, 1.f));
    if (mla) {
      KV_RETURN_IF_ERROR(AddMlaAttention(s, i, rng, w));
    } else if (fused) {
      KV_RETURN_IF_ERROR(
          AddMatrix(w, rng, n("attn_qkv.weight"), q_dim + 2 * kv_dim, s.hidden, s.type));
      KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("attn_output.weight"), s.hidden, q_dim, s.type));
    } else {
      KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("attn_q.weight"), q_dim, s.hidden, s.type));
      KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("attn_k.weight"), kv_dim, s.hidden, s.type));
      KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("attn_v.weight"), kv_dim, s.hidden, s.type));
      KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("attn_output.weight"), s.hidden, q_dim, s.type));
      if (arch->has_qkv_bias) {
        KV_RETURN_IF_ERROR(AddVector(w, rng, n("attn_q.bias"), q_dim, 0.f));
        KV_RETURN_IF_ERROR(AddVector(w, rng, n("attn_k.bias"), kv_dim, 0.f));
        KV_RETURN_IF_ERROR(AddVector(w, rng, n("attn_v.bias"), kv_dim, 0.f));
      }
      if (arch->has_qk_norm) {
        KV_RETURN_IF_ERROR(AddVector(w, rng, n("attn_q_norm.weight"), head_dim, 1.f));
        KV_RETURN_IF_ERROR(AddVector(w, rng, n("attn_k_norm.weight"), head_dim, 1.f));
      }
    }
    if (arch->gemma) {
      KV_RETURN_IF_ERROR(AddVector(w, rng, n("post_attention_norm.weight"), s.hidden, 1.f));
      KV_RETURN_IF_ERROR(AddVector(w, rng, n("post_ffw_norm.weight"), s.hidden, 1.f));
    }
    if (arch->attn_out_bias) {
      KV_RETURN_IF_ERROR(AddVector(w, rng, n("attn_output.bias"), s.hidden, 0.f));
    }
    if (arch->attn_sinks) {  // logits of the order of the scores'
      KV_RETURN_IF_ERROR(AddFloats(w, n("attn_sinks.weight"), {s.num_heads}, GgmlType::kF32,
                                   RandomVector(rng, s.num_heads, 0.f, 2.f)));
    }
    KV_RETURN_IF_ERROR(AddVector(w, rng, n(fmt::format("{}.weight", arch->ffn_norm_tensor).c_str()),
                                 s.hidden, 1.f));
    if (s.moe.num_experts > 0 && i >= s.moe.leading_dense) {
      KV_RETURN_IF_ERROR(AddMoe(s, i, rng, w));
      continue;
    }
    if (fused) {
      KV_RETURN_IF_ERROR(
          AddMatrix(w, rng, n("ffn_up.weight"), 2 * int64_t{s.ffn}, s.hidden, s.type));
    } else {
      KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("ffn_gate.weight"), s.ffn, s.hidden, s.type));
      KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("ffn_up.weight"), s.ffn, s.hidden, s.type));
    }
    KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("ffn_down.weight"), s.hidden, s.ffn, s.type));
  }
  KV_RETURN_IF_ERROR(AddVector(w, rng, "output_norm.weight", s.hidden, 1.f));
  if (!s.tie_embeddings) {
    // Output rows with std 3/sqrt(hidden): logits of std ~3, so greedy choices are clear-cut.
    std::vector<float> out = RandomVector(rng, vocab * s.hidden, 0.f, output_half_width);
    ZeroSilentRows(s.tokenizer, s.hidden, out);
    KV_RETURN_IF_ERROR(AddFloats(w, "output.weight", {s.hidden, vocab}, FitType(s.type, s.hidden),
                                 out));
  }
  return w;
}

SyntheticModelSpec SmallSyntheticModelSpec() {
  SyntheticModelSpec s;
  s.arch = "llama";
  s.num_layers = 4;
  s.hidden = 256;
  s.num_heads = 8;
  s.num_kv_heads = 2;
  s.ffn = 768;
  s.context_length = 4096;
  s.type = GgmlType::kF32;
  s.seed = 20261122;
  s.name = "kvserve-default-synthetic";
  s.tokenizer = MakeSyntheticSpec(1024);
  return s;
}

Result<GgufFile> OpenModelOrDefault(const std::string& path) {
  if (!path.empty()) return GgufFile::Open(path, /*populate=*/true);
  const std::span<const uint8_t> embedded = EmbeddedModelBytes();
  return GgufFile::FromBytes(std::vector<uint8_t>(embedded.begin(), embedded.end()));
}

}  // namespace kvserve
