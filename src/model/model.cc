// Model::Forward: the transformer over a ForwardBatch.
//
// NOTE: every step runs the whole batch through one layer before the next, so each weight matrix
// is read once per step whatever the number of tokens and sequences in the batch. Attention is
// the only per-sequence part; it reads K/V through block tables.
#include <fmt/format.h>

#include <cmath>

#include "model/model_internal.h"
#include "ops/attention.h"
#include "ops/elementwise.h"

namespace kvserve {
namespace {

void AddBias(float* y, const std::vector<float>& bias, int64_t num_tokens) {
  if (bias.empty()) return;
  const int64_t n = static_cast<int64_t>(bias.size());
  for (int64_t t = 0; t < num_tokens; ++t) AddInPlace(y + t * n, bias.data(), n);
}

PagedKvLayerView LayerView(const KvStorage& kv, int layer) {
  const KvLayout& l = kv.layout();
  PagedKvLayerView v;
  v.k = kv.KTile(layer, BlockId(0), 0);
  v.v = kv.VTile(layer, BlockId(0), 0);
  v.k_dtype = l.k_dtype;
  v.v_dtype = l.v_dtype;
  v.num_kv_heads = l.num_kv_heads;
  v.head_dim = l.head_dim;
  v.block_size = l.block_size;
  v.k_head_bytes = l.k_head_bytes();
  v.v_head_bytes = l.v_head_bytes();
  return v;
}

}  // namespace

Status Model::ValidateBatch(const ForwardBatch& batch, const KvStorage& kv) const {
  const int n = batch.num_tokens();
  if (n == 0) return InvalidArgument("empty batch");
  if (n > options_.max_batch_tokens) {
    return InvalidArgument(fmt::format("batch of {} tokens exceeds max_batch_tokens {}", n,
                                       options_.max_batch_tokens));
  }
  if (batch.positions.size() != batch.tokens.size()) {
    return InvalidArgument("positions and tokens differ in length");
  }
  for (TokenId t : batch.tokens) {
    if (t < 0 || t >= config_.vocab) {
      return InvalidArgument(fmt::format("token id {} is outside the vocabulary [0, {})", t,
                                         config_.vocab));
    }
  }
  int covered = 0;
  for (const ForwardSeq& s : batch.seqs) {
    const int64_t slots = static_cast<int64_t>(s.num_cached) + s.num_new;
    if (s.num_cached < 0 || s.num_new <= 0 || s.first_token != covered ||
        s.first_token + s.num_new > n) {
      return InvalidArgument("sequence spans in the batch are not contiguous");
    }
    if (slots > options_.max_context) {
      return OutOfRange(fmt::format("sequence of {} tokens exceeds the context of {}", slots,
                                    options_.max_context));
    }
    if (static_cast<int64_t>(s.block_table.size()) * kv.layout().block_size < slots) {
      return InvalidArgument("a block table does not cover its sequence's slots");
    }
    for (BlockId b : s.block_table) {
      if (b.value() < 0 || b.value() >= kv.num_blocks()) {
        return InvalidArgument(fmt::format("block id {} out of range", b.value()));
      }
    }
    covered += s.num_new;
  }
  if (covered != n) return InvalidArgument("sequences do not cover every token of the batch");
  for (int32_t r : batch.logits_rows) {
    if (r < 0 || r >= n) return InvalidArgument("logits row out of range");
  }
  return Status::Ok();
}

Status Model::Forward(const ForwardBatch& batch, KvStorage& kv, ThreadPool& pool, float* logits) {
  KV_RETURN_IF_ERROR(ValidateBatch(batch, kv));
  const KvLayout& l = kv.layout();
  if (l.num_layers != config_.num_layers || l.num_kv_heads != config_.num_kv_heads ||
      l.head_dim != config_.head_dim) {
    return InvalidArgument("KV storage layout does not match the model");
  }
  Embed(batch, pool);
  const int n = batch.num_tokens();
  for (int i = 0; i < config_.num_layers; ++i) {
    AttentionBlock(i, batch, kv, pool);
    FeedForwardBlock(i, n, pool);
  }
  ComputeLogits(batch, pool, logits);
  return Status::Ok();
}

void Model::Embed(const ForwardBatch& batch, ThreadPool& pool) {
  float* x = scratch_->x.data();
  const int hidden = config_.hidden;
  pool.ParallelFor(batch.num_tokens(), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) DequantizeWeightRow(token_embd_, batch.tokens[t], x + t * hidden);
  });
}

void Model::AttentionBlock(int li, const ForwardBatch& batch, KvStorage& kv, ThreadPool& pool) {
  const Layer& L = layers_[li];
  Scratch& s = *scratch_;
  const ModelConfig& c = config_;
  const int n = batch.num_tokens();
  pool.ParallelFor(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      RmsNorm(s.x.data() + t * c.hidden, L.attn_norm.data(), c.hidden, c.rms_eps,
              s.xn.data() + t * c.hidden);
    }
  });
  MatMul(L.wq, s.xn.data(), n, s.q.data(), pool);
  MatMul(L.wk, s.xn.data(), n, s.k.data(), pool);
  MatMul(L.wv, s.xn.data(), n, s.v.data(), pool);
  AddBias(s.q.data(), L.bq, n);
  AddBias(s.k.data(), L.bk, n);
  AddBias(s.v.data(), L.bv, n);

  // Per token: optional per-head Q/K norm, RoPE, then store K and V into the token's slot.
  const KvLayout& kl = kv.layout();
  for (const ForwardSeq& seq : batch.seqs) {
    pool.ParallelFor(seq.num_new, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        const int64_t t = seq.first_token + j;
        float* q = s.q.data() + t * c.q_dim();
        float* k = s.k.data() + t * c.kv_dim();
        if (!L.q_norm.empty()) {
          for (int h = 0; h < c.num_heads; ++h) {
            RmsNorm(q + h * c.head_dim, L.q_norm.data(), c.head_dim, c.rms_eps, q + h * c.head_dim);
          }
          for (int h = 0; h < c.num_kv_heads; ++h) {
            RmsNorm(k + h * c.head_dim, L.k_norm.data(), c.head_dim, c.rms_eps, k + h * c.head_dim);
          }
        }
        rope_->Apply(q, c.num_heads, c.head_dim, batch.positions[t]);
        rope_->Apply(k, c.num_kv_heads, c.head_dim, batch.positions[t]);
        const int slot = seq.num_cached + static_cast<int>(j);
        const BlockId blk = seq.block_table[slot / kl.block_size];
        const int off = slot % kl.block_size;
        const float* v = s.v.data() + t * c.kv_dim();
        for (int h = 0; h < c.num_kv_heads; ++h) {
          StoreKvVector(kl.k_dtype, k + h * c.head_dim, c.head_dim,
                        kv.KTile(li, blk, h) + off * kl.k_head_bytes());
          StoreKvVector(kl.v_dtype, v + h * c.head_dim, c.head_dim,
                        kv.VTile(li, blk, h) + off * kl.v_head_bytes());
        }
      }
    });
  }
  Attend(li, batch, kv, pool);
  MatMul(L.wo, s.attn.data(), n, s.proj.data(), pool);
  AddInPlace(s.x.data(), s.proj.data(), static_cast<int64_t>(n) * c.hidden);
}

void Model::Attend(int li, const ForwardBatch& batch, const KvStorage& kv, ThreadPool& pool) {
  Scratch& s = *scratch_;
  const ModelConfig& c = config_;
  const PagedKvLayerView view = LayerView(kv, li);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const int group = c.group();
  // Work items: (token, kv_head) pairs; item i -> token i / num_kv_heads.
  std::vector<int32_t>& token_seq = s.token_seq;
  token_seq.resize(batch.num_tokens());  // within the capacity reserved at load
  int max_slots = 0;
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const ForwardSeq& q = batch.seqs[si];
    for (int j = 0; j < q.num_new; ++j) token_seq[q.first_token + j] = static_cast<int32_t>(si);
    max_slots = std::max(max_slots, q.num_cached + q.num_new);
  }
  if (s.attn_scratch.size() < static_cast<size_t>(pool.num_threads())) {
    s.attn_scratch.resize(pool.num_threads());
  }
  const size_t need = AttentionScratchFloats(max_slots, group, c.head_dim);
  const int64_t items = static_cast<int64_t>(batch.num_tokens()) * c.num_kv_heads;
  pool.Run([&](int ti, int nt) {
    std::vector<float>& scratch = s.attn_scratch[ti];
    if (scratch.size() < need) scratch.resize(need);
    const int64_t b = items * ti / nt, e = items * (ti + 1) / nt;
    for (int64_t i = b; i < e; ++i) {
      const int64_t t = i / c.num_kv_heads;
      const int kvh = static_cast<int>(i % c.num_kv_heads);
      const ForwardSeq& seq = batch.seqs[token_seq[t]];
      const int num_slots = seq.num_cached + static_cast<int>(t - seq.first_token) + 1;
      const int64_t head0 = static_cast<int64_t>(kvh) * group * c.head_dim;
      AttendGroup(s.q.data() + t * c.q_dim() + head0, group, kvh, view, seq.block_table, num_slots,
                  scale, scratch.data(), s.attn.data() + t * c.q_dim() + head0);
    }
  });
}

void Model::FeedForwardBlock(int li, int n, ThreadPool& pool) {
  const Layer& L = layers_[li];
  Scratch& s = *scratch_;
  const ModelConfig& c = config_;
  pool.ParallelFor(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      RmsNorm(s.x.data() + t * c.hidden, L.ffn_norm.data(), c.hidden, c.rms_eps,
              s.xn.data() + t * c.hidden);
    }
  });
  MatMul(L.w_gate, s.xn.data(), n, s.gate.data(), pool);
  MatMul(L.w_up, s.xn.data(), n, s.up.data(), pool);
  pool.ParallelFor(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) SwiGlu(s.gate.data() + t * c.ffn, s.up.data() + t * c.ffn, c.ffn);
  });
  MatMul(L.w_down, s.gate.data(), n, s.proj.data(), pool);
  AddInPlace(s.x.data(), s.proj.data(), static_cast<int64_t>(n) * c.hidden);
}

void Model::ComputeLogits(const ForwardBatch& batch, ThreadPool& pool, float* logits) {
  Scratch& s = *scratch_;
  const int hidden = config_.hidden;
  const int64_t rows = static_cast<int64_t>(batch.logits_rows.size());
  if (rows == 0) return;
  for (int64_t i = 0; i < rows; ++i) {
    RmsNorm(s.x.data() + static_cast<int64_t>(batch.logits_rows[i]) * hidden, output_norm_.data(),
            hidden, config_.rms_eps, s.logit_x.data() + i * hidden);
  }
  MatMul(output_, s.logit_x.data(), rows, logits, pool);
}

}  // namespace kvserve
