// Model::Load: binds GGUF tensors to the layer structures and checks every shape.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <tuple>
#include <utility>

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

// The 3-D expert tensor `name` (GGUF dims [cols, rows, experts]) as one matrix per expert.
Result<std::vector<WeightMatrix>> Experts(const GgufFile& f, const std::string& name,
                                          int64_t rows, int64_t cols, int64_t experts) {
  KV_ASSIGN_OR_RETURN(const GgufTensorInfo* t, Require(f, name));
  KV_RETURN_IF_ERROR(CheckDims(*t, {cols, rows, experts}));
  std::vector<WeightMatrix> out(static_cast<size_t>(experts));
  const size_t row_bytes = t->size_bytes / static_cast<uint64_t>(rows * experts);
  for (int64_t e = 0; e < experts; ++e) {
    WeightMatrix& w = out[static_cast<size_t>(e)];
    w.type = t->type;
    w.data = t->data + static_cast<size_t>(e * rows) * row_bytes;
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = row_bytes;
  }
  return out;
}

// Rows [first, first + count) of a matrix, as a matrix.
WeightMatrix Rows(const WeightMatrix& w, int64_t first, int64_t count) {
  WeightMatrix r = w;
  r.data = w.row(first);
  r.packed = nullptr;
  r.rows = count;
  return r;
}

// An f32 matrix over `data` (owned by the layer).
WeightMatrix F32Matrix(const std::vector<float>& data, int64_t rows, int64_t cols) {
  WeightMatrix w;
  w.type = GgmlType::kF32;
  w.data = reinterpret_cast<const uint8_t*>(data.data());
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = static_cast<size_t>(cols) * sizeof(float);
  return w;
}

// The transpose of w's rows [first, first + rows) as floats: out[c * rows + r] = w[first + r][c].
std::vector<float> Transposed(const WeightMatrix& w, int64_t first, int64_t rows) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  std::vector<float> out(static_cast<size_t>(rows * w.cols));
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeWeightRow(w, first + r, row.data());
    for (int64_t c = 0; c < w.cols; ++c) out[static_cast<size_t>(c * rows + r)] = row[c];
  }
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
  // Per-pair frequency divisors: Llama 3's rope_freqs, or LongRoPE's short and long sets (the
  // long ones when a sequence may run past the original context, as llama.cpp picks them).
  const int original_context =
      c.rope.original_context_length > 0 ? c.rope.original_context_length : c.context_length;
  const int context = options_.max_context > 0 ? options_.max_context : c.context_length;
  const bool long_factors = context > original_context;
  const char* factors_name = "rope_freqs.weight";
  c.rope_factors = ModelConfig::RopeFactors::kFile;
  if (f.FindTensor(factors_name) == nullptr) {
    factors_name = long_factors ? "rope_factors_long.weight" : "rope_factors_short.weight";
    c.rope_factors =
        long_factors ? ModelConfig::RopeFactors::kLong : ModelConfig::RopeFactors::kShort;
  }
  if (const GgufTensorInfo* rf = f.FindTensor(factors_name)) {
    KV_RETURN_IF_ERROR(CheckDims(*rf, {c.rope.rotary_dim / 2}));
    c.rope.freq_factors.resize(c.rope.rotary_dim / 2);
    DequantizeRow(rf->type, rf->data, c.rope.freq_factors.data(), c.rope.rotary_dim / 2);
    for (float x : c.rope.freq_factors) {
      if (!(x > 0.f) || !std::isfinite(x)) {
        return InvalidArgument(
            fmt::format("tensor '{}' holds a factor that is not positive", factors_name));
      }
    }
  } else {
    c.rope_factors = ModelConfig::RopeFactors::kNone;
  }
  rope_.emplace(c.rope);
  if (c.has_windows() &&
      (c.rope_local.freq_base != c.rope.freq_base || c.rope_local.scaling != c.rope.scaling)) {
    c.rope_local.freq_factors = c.rope.freq_factors;
    rope_local_.emplace(c.rope_local);
  }

  layers_.resize(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    Layer& l = layers_[i];
    auto name = [i](std::string_view s) { return TensorName(i, s); };
    KV_ASSIGN_OR_RETURN(l.attn_norm, Vector(f, name("attn_norm.weight"), c.hidden));
    KV_ASSIGN_OR_RETURN(
        l.ffn_norm, Vector(f, name(fmt::format("{}.weight", c.arch->ffn_norm_tensor)), c.hidden));
    if (c.arch->gemma) {
      KV_ASSIGN_OR_RETURN(l.post_attn_norm,
                          Vector(f, name("post_attention_norm.weight"), c.hidden));
      KV_ASSIGN_OR_RETURN(l.post_ffn_norm, Vector(f, name("post_ffw_norm.weight"), c.hidden));
    }
    KV_RETURN_IF_ERROR(c.is_mla() ? LoadMlaAttention(i) : LoadAttention(i));
    KV_RETURN_IF_ERROR(LoadFeedForward(i));
  }
  for (const GgufTensorInfo& t : f.tensors()) weight_bytes_ += t.size_bytes;
  CountActiveParams();
  if (options_.pack_weights) PackMatrices();
  AllocateScratch();
  return Status::Ok();
}

// Every matrix the kernels multiply by, except views that other matrices share (MLA's kv_b and
// its per-head slices) and the small router.
std::vector<WeightMatrix*> Model::PackableMatrices() {
  std::vector<WeightMatrix*> matrices = {&output_};
  for (Layer& l : layers_) {
    for (WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.wq_a, &l.wq_b, &l.wkv_a, &l.w_gate,
                            &l.w_up, &l.w_down, &l.sh_gate, &l.sh_up, &l.sh_down}) {
      matrices.push_back(w);
    }
    for (std::vector<WeightMatrix>* experts : {&l.exp_gate, &l.exp_up, &l.exp_down}) {
      for (WeightMatrix& w : *experts) matrices.push_back(&w);
    }
  }
  return matrices;
}

// Those the kernels want packed are repacked into one run of huge pages, by as many threads as
// the machine has; then the file's pages of each go back.
void Model::PackMatrices() {
  std::vector<std::pair<WeightMatrix*, size_t>> jobs;  // matrix, offset into packed_
  size_t total = 0;
  for (WeightMatrix* w : PackableMatrices()) {
    const size_t bytes = w->data != nullptr ? PackedWeightBytes(*w) : 0;
    if (bytes == 0) continue;
    jobs.emplace_back(w, total);
    total += bytes;  // a multiple of 64
  }
  if (jobs.empty()) return;
  packed_ = PageBuffer(total);
  packed_weight_bytes_ = total;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      PackWeightsInto(*jobs[i].first, packed_.data() + jobs[i].second);
    }
  };
  const unsigned helpers = std::clamp(std::thread::hardware_concurrency(), 1u, 16u) - 1;
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < helpers && t + 1 < jobs.size(); ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  for (auto& [w, offset] : jobs) w->packed = packed_.data() + offset;
  ReleasePackedFilePages();
}

// A tied embedding table keeps its pages: the token lookup reads its rows.
void Model::ReleasePackedFilePages() {
  const bool tied = output_.data == token_embd_.data;
  for (const WeightMatrix* w : PackableMatrices()) {
    if (w->packed != nullptr && !(w == &output_ && tied)) file_.ReleasePages(w->data, w->bytes());
  }
}

Status Model::LoadAttention(int i) {
  const GgufFile& f = file_;
  const ModelConfig& c = config_;
  Layer& l = layers_[i];
  auto name = [i](std::string_view s) { return TensorName(i, s); };
  if (f.FindTensor(name("attn_qkv.weight")) != nullptr) {
    // Fused (phi3): the rows of Q, then K, then V.
    KV_ASSIGN_OR_RETURN(WeightMatrix qkv,
                        Matrix(f, name("attn_qkv.weight"), c.q_dim() + 2 * c.kv_dim(), c.hidden));
    l.wq = Rows(qkv, 0, c.q_dim());
    l.wk = Rows(qkv, c.q_dim(), c.kv_dim());
    l.wv = Rows(qkv, c.q_dim() + c.kv_dim(), c.kv_dim());
  } else {
    KV_ASSIGN_OR_RETURN(l.wq, Matrix(f, name("attn_q.weight"), c.q_dim(), c.hidden));
    KV_ASSIGN_OR_RETURN(l.wk, Matrix(f, name("attn_k.weight"), c.kv_dim(), c.hidden));
    KV_ASSIGN_OR_RETURN(l.wv, Matrix(f, name("attn_v.weight"), c.kv_dim(), c.hidden));
  }
  {
    KV_ASSIGN_OR_RETURN(l.wo, Matrix(f, name("attn_output.weight"), c.hidden, c.q_dim()));
    const bool bias = c.arch->has_qkv_bias;
    KV_ASSIGN_OR_RETURN(l.bq, OptionalVector(f, name("attn_q.bias"), c.q_dim(), bias));
    KV_ASSIGN_OR_RETURN(l.bk, OptionalVector(f, name("attn_k.bias"), c.kv_dim(), bias));
    KV_ASSIGN_OR_RETURN(l.bv, OptionalVector(f, name("attn_v.bias"), c.kv_dim(), bias));
    KV_ASSIGN_OR_RETURN(
        l.bo, OptionalVector(f, name("attn_output.bias"), c.hidden, c.arch->attn_out_bias));
    KV_ASSIGN_OR_RETURN(
        l.sinks, OptionalVector(f, name("attn_sinks.weight"), c.num_heads, c.arch->attn_sinks));
    const bool qk_norm = c.arch->has_qk_norm;
    KV_ASSIGN_OR_RETURN(l.q_norm, OptionalVector(f, name("attn_q_norm.weight"), c.head_dim, qk_norm));
    KV_ASSIGN_OR_RETURN(l.k_norm, OptionalVector(f, name("attn_k_norm.weight"), c.head_dim, qk_norm));
  }
  return Status::Ok();
}

// deepseek2's attention: the query (full or low-rank), the latent projection, and the per-head
// up-projections in whichever of the two layouts the file has (the combined attn_kv_b of older
// conversions, or attn_k_b / attn_v_b).
Status Model::LoadMlaAttention(int i) {
  const GgufFile& f = file_;
  const ModelConfig& c = config_;
  const MlaConfig& m = c.mla;
  Layer& l = layers_[i];
  auto name = [i](std::string_view s) { return TensorName(i, s); };
  const int64_t H = c.num_heads;
  if (m.q_lora_rank > 0) {
    KV_ASSIGN_OR_RETURN(l.wq_a, Matrix(f, name("attn_q_a.weight"), m.q_lora_rank, c.hidden));
    KV_ASSIGN_OR_RETURN(l.q_a_norm, Vector(f, name("attn_q_a_norm.weight"), m.q_lora_rank));
    KV_ASSIGN_OR_RETURN(l.wq_b, Matrix(f, name("attn_q_b.weight"), H * m.q_head(), m.q_lora_rank));
  } else {
    KV_ASSIGN_OR_RETURN(l.wq, Matrix(f, name("attn_q.weight"), H * m.q_head(), c.hidden));
  }
  KV_ASSIGN_OR_RETURN(l.wkv_a, Matrix(f, name("attn_kv_a_mqa.weight"), m.latent_dim(), c.hidden));
  KV_ASSIGN_OR_RETURN(l.kv_a_norm, Vector(f, name("attn_kv_a_norm.weight"), m.kv_lora_rank));
  KV_ASSIGN_OR_RETURN(l.wo, Matrix(f, name("attn_output.weight"), c.hidden, H * m.v_head));
  const int64_t nope = m.qk_nope, v = m.v_head, lora = m.kv_lora_rank;
  l.kb_abs.resize(static_cast<size_t>(H));
  l.vb.resize(static_cast<size_t>(H));
  const bool absorbed = options_.mla_form == MlaForm::kAbsorbed;
  if (f.FindTensor(name("attn_kv_b.weight")) != nullptr) {
    // Combined: rows of head h are its k_nope rows [nope, lora], then its v rows [v, lora].
    KV_ASSIGN_OR_RETURN(l.kv_b, Matrix(f, name("attn_kv_b.weight"), H * (nope + v), lora));
    for (int64_t h = 0; h < H; ++h) {
      l.vb[static_cast<size_t>(h)] = Rows(l.kv_b, h * (nope + v) + nope, v);
      if (!absorbed) continue;
      l.owned.push_back(Transposed(l.kv_b, h * (nope + v), nope));
      l.kb_abs[static_cast<size_t>(h)] = F32Matrix(l.owned.back(), lora, nope);
    }
    return Status::Ok();
  }
  // Split: attn_k_b holds W_kb,h^T per head (GGUF dims [nope, lora, H]), attn_v_b W_vb,h
  // ([lora, v, H]).
  KV_ASSIGN_OR_RETURN(l.kb_abs, Experts(f, name("attn_k_b.weight"), lora, nope, H));
  KV_ASSIGN_OR_RETURN(l.vb, Experts(f, name("attn_v_b.weight"), v, lora, H));
  if (!absorbed) {
    // The decompressed form multiplies latents by [k_nope rows; v rows] of every head.
    std::vector<float> kvb(static_cast<size_t>(H * (nope + v) * lora));
    for (int64_t h = 0; h < H; ++h) {
      const std::vector<float> k = Transposed(l.kb_abs[static_cast<size_t>(h)], 0, lora);
      float* dst = kvb.data() + static_cast<size_t>(h * (nope + v) * lora);
      std::copy(k.begin(), k.end(), dst);
      for (int64_t r = 0; r < v; ++r) {
        DequantizeWeightRow(l.vb[static_cast<size_t>(h)], r, dst + (nope + r) * lora);
      }
    }
    l.owned.push_back(std::move(kvb));
    l.kv_b = F32Matrix(l.owned.back(), H * (nope + v), lora);
  }
  return Status::Ok();
}

Status Model::LoadFeedForward(int i) {
  const GgufFile& f = file_;
  const ModelConfig& c = config_;
  const MoeConfig& m = c.moe;
  Layer& l = layers_[i];
  auto name = [i](std::string_view s) { return TensorName(i, s); };
  if (!m.LayerIsMoe(i)) {
    if (f.FindTensor(name("ffn_gate.weight")) == nullptr) {
      // Fused (phi3): ffn_up holds the gate's rows, then the up projection's.
      KV_ASSIGN_OR_RETURN(WeightMatrix gate_up,
                          Matrix(f, name("ffn_up.weight"), 2 * int64_t{c.ffn}, c.hidden));
      l.w_gate = Rows(gate_up, 0, c.ffn);
      l.w_up = Rows(gate_up, c.ffn, c.ffn);
    } else {
      KV_ASSIGN_OR_RETURN(l.w_gate, Matrix(f, name("ffn_gate.weight"), c.ffn, c.hidden));
      KV_ASSIGN_OR_RETURN(l.w_up, Matrix(f, name("ffn_up.weight"), c.ffn, c.hidden));
    }
    KV_ASSIGN_OR_RETURN(l.w_down, Matrix(f, name("ffn_down.weight"), c.hidden, c.ffn));
    return Status::Ok();
  }
  const int64_t E = m.num_experts, ff = m.expert_ffn;
  KV_ASSIGN_OR_RETURN(l.router, Matrix(f, name("ffn_gate_inp.weight"), E, c.hidden));
  KV_ASSIGN_OR_RETURN(l.exp_gate, Experts(f, name("ffn_gate_exps.weight"), ff, c.hidden, E));
  KV_ASSIGN_OR_RETURN(l.exp_up, Experts(f, name("ffn_up_exps.weight"), ff, c.hidden, E));
  KV_ASSIGN_OR_RETURN(l.exp_down, Experts(f, name("ffn_down_exps.weight"), c.hidden, ff, E));
  if (c.arch->moe_biases) {
    KV_ASSIGN_OR_RETURN(l.router_bias, Vector(f, name("ffn_gate_inp.bias"), E));
    for (auto [tensor, rows, out] :
         {std::tuple{"ffn_gate_exps.bias", ff, &l.exp_gate_b},
          std::tuple{"ffn_up_exps.bias", ff, &l.exp_up_b},
          std::tuple{"ffn_down_exps.bias", int64_t{c.hidden}, &l.exp_down_b}}) {
      KV_ASSIGN_OR_RETURN(const GgufTensorInfo* t, Require(f, name(tensor)));
      KV_RETURN_IF_ERROR(CheckDims(*t, {rows, E}));
      out->resize(static_cast<size_t>(rows * E));
      DequantizeRow(t->type, t->data, out->data(), rows * E);
    }
  }
  if (f.FindTensor(name("exp_probs_b.bias")) != nullptr) {
    KV_ASSIGN_OR_RETURN(l.selection_bias, Vector(f, name("exp_probs_b.bias"), E));
  }
  if (m.num_shared > 0) {
    const int64_t sf = ff * m.num_shared;
    KV_ASSIGN_OR_RETURN(l.sh_gate, Matrix(f, name("ffn_gate_shexp.weight"), sf, c.hidden));
    KV_ASSIGN_OR_RETURN(l.sh_up, Matrix(f, name("ffn_up_shexp.weight"), sf, c.hidden));
    KV_ASSIGN_OR_RETURN(l.sh_down, Matrix(f, name("ffn_down_shexp.weight"), c.hidden, sf));
  }
  return Status::Ok();
}

void Model::CountActiveParams() {
  const ModelConfig& c = config_;
  auto elems = [](const WeightMatrix& w) { return static_cast<double>(w.rows) * w.cols; };
  double n = elems(output_);
  for (int i = 0; i < c.num_layers; ++i) {
    const Layer& l = layers_[static_cast<size_t>(i)];
    for (const WeightMatrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.wq_a, &l.wq_b, &l.wkv_a,
                                  &l.w_gate, &l.w_up, &l.w_down, &l.router, &l.sh_gate, &l.sh_up,
                                  &l.sh_down}) {
      n += elems(*w);
    }
    if (c.is_mla()) {
      if (options_.mla_form == MlaForm::kAbsorbed) {
        for (const WeightMatrix& w : l.kb_abs) n += elems(w);
        for (const WeightMatrix& w : l.vb) n += elems(w);
      } else {
        n += elems(l.kv_b);  // per cached slot and step, in fact: see docs/mla_moe.md
      }
    }
    if (!l.exp_gate.empty()) {
      const double one = elems(l.exp_gate[0]) + elems(l.exp_up[0]) + elems(l.exp_down[0]);
      n += one * c.moe.num_used;
      for (size_t e = 0; e < l.exp_gate.size(); ++e) {
        for (const WeightMatrix* w : {&l.exp_gate[e], &l.exp_up[e], &l.exp_down[e]}) {
          expert_weight_bytes_ += w->bytes();
        }
      }
    }
  }
  active_params_ = n;
}

void Model::AllocateScratch() {
  const ModelConfig& c = config_;
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
  if (c.moe.num_experts > 0) {
    const size_t k = static_cast<size_t>(c.moe.num_used);
    const size_t ff = static_cast<size_t>(std::max(c.moe.expert_ffn, c.moe.expert_ffn * c.moe.num_shared));
    s.moe_x = AlignedBuffer<float>(T * c.hidden);
    s.moe_gate = AlignedBuffer<float>(T * ff);
    s.moe_up = AlignedBuffer<float>(T * ff);
    s.moe_y = AlignedBuffer<float>(T * c.hidden);
    s.moe_out = AlignedBuffer<float>(T * k * c.hidden);
    s.moe_rows.resize(static_cast<size_t>(c.moe.num_experts));
  }
  if (c.is_mla()) {
    const MlaConfig& m = c.mla;
    const size_t H = static_cast<size_t>(c.num_heads);
    const size_t lat = static_cast<size_t>(m.latent_dim());
    s.q_a = AlignedBuffer<float>(T * std::max(m.q_lora_rank, 1));
    s.q_abs = AlignedBuffer<float>(T * H * lat);
    s.attn_lat = AlignedBuffer<float>(T * H * lat);
    s.attn = AlignedBuffer<float>(T * H * std::max(m.v_head, m.q_head()));
    const size_t gather = static_cast<size_t>(std::max({m.kv_lora_rank, m.qk_nope, m.v_head}));
    s.head_in = AlignedBuffer<float>(T * gather);
    s.head_out = AlignedBuffer<float>(T * gather);
  }
}

KvLayout Model::MakeKvLayout(int block_size, KvDtype k_dtype, KvDtype v_dtype) const {
  KvLayout l;
  l.num_layers = config_.num_layers;
  l.num_kv_heads = config_.num_kv_heads;
  l.head_dim = config_.head_dim;
  l.block_size = block_size;
  l.k_dtype = k_dtype;
  l.v_dtype = config_.is_mla() ? k_dtype : v_dtype;
  l.v_from_k = config_.is_mla();
  return l;
}

}  // namespace kvserve
