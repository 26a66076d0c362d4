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
  WriteTokenizerSpec(s.tokenizer, w);
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
  for (int i = 0; i < s.num_layers; ++i) {
    auto n = [i](const char* suffix) { return fmt::format("blk.{}.{}", i, suffix); };
    KV_RETURN_IF_ERROR(AddVector(w, rng, n("attn_norm.weight"), s.hidden, 1.f));
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
    KV_RETURN_IF_ERROR(AddVector(w, rng, n("ffn_norm.weight"), s.hidden, 1.f));
    KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("ffn_gate.weight"), s.ffn, s.hidden, s.type));
    KV_RETURN_IF_ERROR(AddMatrix(w, rng, n("ffn_up.weight"), s.ffn, s.hidden, s.type));
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
