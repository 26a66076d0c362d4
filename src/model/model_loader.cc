// Model::Load: binds GGUF tensors to the layer structures and checks every shape.
#include <fmt/format.h>

#include "model/model_internal.h"

namespace kvserve {
namespace {

std::string TensorName(int layer, std::string_view suffix) {
  return fmt::format("blk.{}.{}", layer, suffix);
}

std::string DimsString(const std::vector<int64_t>& d) {
  return fmt::format("[{}]", fmt::join(d, ", "));
}

Status CheckDims(const GgufTensorInfo& t, std::vector<int64_t> want) {
  if (t.dims != want) {
    return InvalidArgument(fmt::format("tensor '{}' has dims {}, expected {}", t.name,
                                       DimsString(t.dims), DimsString(want)));
  }
  return Status::Ok();
}

Result<const GgufTensorInfo*> Require(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.FindTensor(name);
  if (t == nullptr) return NotFound(fmt::format("model file lacks tensor '{}'", name));
  return t;
}

// A matrix with GGUF dims [cols, rows].
Result<WeightMatrix> Matrix(const GgufFile& f, const std::string& name, int64_t rows,
                            int64_t cols) {
  KV_ASSIGN_OR_RETURN(const GgufTensorInfo* t, Require(f, name));
  KV_RETURN_IF_ERROR(CheckDims(*t, {cols, rows}));
  WeightMatrix w;
  w.type = t->type;
  w.data = t->data;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = t->size_bytes / static_cast<uint64_t>(rows);
  return w;
}

// A vector of n floats (stored in any supported type), dequantized.
Result<std::vector<float>> Vector(const GgufFile& f, const std::string& name, int64_t n) {
  KV_ASSIGN_OR_RETURN(const GgufTensorInfo* t, Require(f, name));
  KV_RETURN_IF_ERROR(CheckDims(*t, {n}));
  std::vector<float> out(n);
  DequantizeRow(t->type, t->data, out.data(), n);
  return out;
}

Result<std::vector<float>> OptionalVector(const GgufFile& f, const std::string& name, int64_t n,
                                          bool required) {
  if (!required && f.FindTensor(name) == nullptr) return std::vector<float>{};
  return Vector(f, name, n);
}

}  // namespace

Model::Model(GgufFile file, ModelConfig config, ModelOptions options)
    : file_(std::move(file)), config_(std::move(config)), options_(options) {}

Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::Load(GgufFile file, const ModelOptions& options) {
  KV_ASSIGN_OR_RETURN(ModelConfig config, ModelConfigFromGguf(file));
  if (options.max_batch_tokens <= 0) return InvalidArgument("max_batch_tokens must be positive");
  std::unique_ptr<Model> m(new Model(std::move(file), std::move(config), options));
  KV_RETURN_IF_ERROR(m->LoadWeights());
  if (m->options_.max_context <= 0) m->options_.max_context = m->config_.context_length;
  return m;
}

Status Model::LoadWeights() {
  const GgufFile& f = file_;
  ModelConfig& c = config_;
  KV_ASSIGN_OR_RETURN(const GgufTensorInfo* embd, Require(f, "token_embd.weight"));
  if (embd->dims.size() != 2 || embd->dims[0] != c.hidden) {
    return InvalidArgument(fmt::format("tensor 'token_embd.weight' has dims {}, expected [{}, vocab]",
                                       DimsString(embd->dims), c.hidden));
  }
  c.vocab = static_cast<int>(embd->dims[1]);
  KV_ASSIGN_OR_RETURN(token_embd_, Matrix(f, "token_embd.weight", c.vocab, c.hidden));
  if (f.FindTensor("output.weight") != nullptr) {
    KV_ASSIGN_OR_RETURN(output_, Matrix(f, "output.weight", c.vocab, c.hidden));
  } else {
    output_ = token_embd_;  // tied embeddings
  }
  KV_ASSIGN_OR_RETURN(output_norm_, Vector(f, "output_norm.weight", c.hidden));
  if (const GgufTensorInfo* rf = f.FindTensor("rope_freqs.weight")) {
    KV_RETURN_IF_ERROR(CheckDims(*rf, {c.rope.rotary_dim / 2}));
    c.rope.freq_factors.resize(c.rope.rotary_dim / 2);
    DequantizeRow(rf->type, rf->data, c.rope.freq_factors.data(), c.rope.rotary_dim / 2);
  }
  rope_.emplace(c.rope);

  layers_.resize(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    Layer& l = layers_[i];
    auto name = [i](std::string_view s) { return TensorName(i, s); };
    KV_ASSIGN_OR_RETURN(l.attn_norm, Vector(f, name("attn_norm.weight"), c.hidden));
    KV_ASSIGN_OR_RETURN(l.wq, Matrix(f, name("attn_q.weight"), c.q_dim(), c.hidden));
    KV_ASSIGN_OR_RETURN(l.wk, Matrix(f, name("attn_k.weight"), c.kv_dim(), c.hidden));
    KV_ASSIGN_OR_RETURN(l.wv, Matrix(f, name("attn_v.weight"), c.kv_dim(), c.hidden));
    KV_ASSIGN_OR_RETURN(l.wo, Matrix(f, name("attn_output.weight"), c.hidden, c.q_dim()));
    const bool bias = c.arch->has_qkv_bias;
    KV_ASSIGN_OR_RETURN(l.bq, OptionalVector(f, name("attn_q.bias"), c.q_dim(), bias));
    KV_ASSIGN_OR_RETURN(l.bk, OptionalVector(f, name("attn_k.bias"), c.kv_dim(), bias));
    KV_ASSIGN_OR_RETURN(l.bv, OptionalVector(f, name("attn_v.bias"), c.kv_dim(), bias));
    const bool qk_norm = c.arch->has_qk_norm;
    KV_ASSIGN_OR_RETURN(l.q_norm, OptionalVector(f, name("attn_q_norm.weight"), c.head_dim, qk_norm));
    KV_ASSIGN_OR_RETURN(l.k_norm, OptionalVector(f, name("attn_k_norm.weight"), c.head_dim, qk_norm));
    KV_ASSIGN_OR_RETURN(l.ffn_norm, Vector(f, name("ffn_norm.weight"), c.hidden));
    KV_ASSIGN_OR_RETURN(l.w_gate, Matrix(f, name("ffn_gate.weight"), c.ffn, c.hidden));
    KV_ASSIGN_OR_RETURN(l.w_up, Matrix(f, name("ffn_up.weight"), c.ffn, c.hidden));
    KV_ASSIGN_OR_RETURN(l.w_down, Matrix(f, name("ffn_down.weight"), c.hidden, c.ffn));
  }
  for (const GgufTensorInfo& t : f.tensors()) weight_bytes_ += t.size_bytes;

  const size_t T = options_.max_batch_tokens;
  scratch_ = std::make_unique<Scratch>();
  Scratch& s = *scratch_;
  s.x = AlignedBuffer<float>(T * c.hidden);
  s.xn = AlignedBuffer<float>(T * c.hidden);
  s.q = AlignedBuffer<float>(T * c.q_dim());
  s.k = AlignedBuffer<float>(T * c.kv_dim());
  s.v = AlignedBuffer<float>(T * c.kv_dim());
  s.attn = AlignedBuffer<float>(T * c.q_dim());
  s.proj = AlignedBuffer<float>(T * c.hidden);
  s.gate = AlignedBuffer<float>(T * c.ffn);
  s.up = AlignedBuffer<float>(T * c.ffn);
  s.logit_x = AlignedBuffer<float>(T * c.hidden);
  return Status::Ok();
}

KvLayout Model::MakeKvLayout(int block_size, KvDtype k_dtype, KvDtype v_dtype) const {
  KvLayout l;
  l.num_layers = config_.num_layers;
  l.num_kv_heads = config_.num_kv_heads;
  l.head_dim = config_.head_dim;
  l.block_size = block_size;
  l.k_dtype = k_dtype;
  l.v_dtype = v_dtype;
  return l;
}

}  // namespace kvserve
