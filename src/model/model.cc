// Model::Forward: the transformer over a ForwardBatch.
//
// NOTE: every step runs the whole batch through one layer before the next, so each weight matrix
// is read once per step whatever the number of tokens and sequences in the batch. Attention is
// the only per-sequence part; it reads K/V through block tables.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/model_internal.h"
#include "ops/attention.h"
#include "ops/elementwise.h"

namespace kvserve {
namespace {

// y[t] += bias for n rows of `cols` (no-op for a null bias).
void AddRowBias(float* y, const float* bias, int64_t cols, int64_t n) {
  if (bias == nullptr) return;
  for (int64_t t = 0; t < n; ++t) AddInPlace(y + t * cols, bias, cols);
}

void AddBias(float* y, const std::vector<float>& bias, int64_t num_tokens) {
  if (!bias.empty()) AddRowBias(y, bias.data(), static_cast<int64_t>(bias.size()), num_tokens);
}

}  // namespace

// The table a layer's K/V are in: the window group's for a window layer when the layout has
// that group (ValidateWindowTable: then the group is exactly the window layers).
std::span<const BlockId> TableFor(const ForwardSeq& seq, int window) {
  return window > 0 && !seq.window_table.empty() ? seq.window_table : seq.block_table;
}

PagedKvLayerView KvLayerView(const KvStorage& kv, int layer) {
  const KvLayout& l = kv.layout();
  PagedKvLayerView v;
  v.k = kv.KTile(layer, BlockId(0), 0);
  v.k_dtype = l.k_dtype;
  v.num_kv_heads = l.num_kv_heads;
  v.head_dim = l.head_dim;
  v.block_size = l.block_size;
  v.k_head_bytes = l.k_head_bytes();
  if (l.v_from_k) {  // latent: the values are the key vectors' bytes
    v.v = v.k;
    v.v_dtype = l.k_dtype;
    v.v_head_bytes = v.k_head_bytes;
  } else {
    v.v = kv.VTile(layer, BlockId(0), 0);
    v.v_dtype = l.v_dtype;
    v.v_head_bytes = l.v_head_bytes();
  }
  return v;
}

// The window group's table: as long as the block table, and valid from the first block the
// group's attention reads for the sequence's first new token (the kernels read from that token's
// first visible slot rounded down to kAttentionMaxLanes).
Status Model::ValidateWindowTable(const ForwardSeq& s, const KvStorage& kv) const {
  const KvLayout& kl = kv.layout();
  if (kl.num_window_layers() == 0) {
    if (!s.window_table.empty()) return InvalidArgument("a window table without a window group");
    return Status::Ok();
  }
  if (s.window_table.size() != s.block_table.size()) {
    return InvalidArgument("the window table and the block table differ in length");
  }
  int window = 0;
  for (int l = 0; l < config_.num_layers; ++l) {
    if (kl.in_window_group(l) != (config_.LayerWindow(l) > 0)) {
      return InvalidArgument(
          fmt::format("layer {}: the window group is not the layers with a window", l));
    }
    window = std::max(window, config_.LayerWindow(l));
  }
  const int first_read =
      AttentionFirstSlot(s.num_cached + 1, window) / kAttentionMaxLanes * kAttentionMaxLanes;
  for (size_t i = 0; i < s.window_table.size(); ++i) {
    const int32_t b = s.window_table[i].value();
    const bool read = static_cast<int>(i + 1) * kl.block_size > first_read;
    if ((read || b >= 0) && (b < 0 || b >= kv.num_window_blocks())) {
      return InvalidArgument(fmt::format("window block id {} at {} out of range", b, i));
    }
  }
  return Status::Ok();
}

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
    if (s.scores != nullptr && config_.has_windows()) {
      return InvalidArgument("attention scores (h2o, snapkv) are not kept for sliding windows");
    }
    if (s.scores != nullptr && config_.is_mla() && options_.mla_form == MlaForm::kDecompressed) {
      return InvalidArgument("attention scores (h2o, snapkv) need the absorbed MLA form");
    }
    if (static_cast<int64_t>(s.block_table.size()) * kv.layout().block_size < slots) {
      return InvalidArgument("a block table does not cover its sequence's slots");
    }
    for (BlockId b : s.block_table) {
      if (b.value() < 0 || b.value() >= kv.num_blocks()) {
        return InvalidArgument(fmt::format("block id {} out of range", b.value()));
      }
    }
    KV_RETURN_IF_ERROR(ValidateWindowTable(s, kv));
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
      l.head_dim != config_.head_dim || l.v_from_k != config_.is_mla()) {
    return InvalidArgument("KV storage layout does not match the model");
  }
  Embed(batch, pool);
  const int n = batch.num_tokens();
  for (int i = 0; i < config_.num_layers; ++i) {
    if (config_.is_mla()) {
      MlaAttentionBlock(i, batch, kv, pool);
    } else {
      AttentionBlock(i, batch, kv, pool);
    }
    if (config_.moe.LayerIsMoe(i)) {
      MoeFeedForward(i, n, pool);
    } else {
      FeedForwardBlock(i, n, pool);
    }
  }
  if (config_.moe.num_experts > 0) ++moe_stats_.steps;
  ComputeLogits(batch, pool, logits);
  return Status::Ok();
}

void Model::Embed(const ForwardBatch& batch, ThreadPool& pool) {
  float* x = scratch_->x.data();
  const int hidden = config_.hidden;
  const float scale = config_.embed_scale;
  pool.ParallelFor(batch.num_tokens(), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* row = x + t * hidden;
      DequantizeWeightRow(token_embd_, batch.tokens[t], row);
      if (scale != 1.f) {
        for (int i = 0; i < hidden; ++i) row[i] *= scale;
      }
    }
  });
}

void Model::AttentionBlock(int li, const ForwardBatch& batch, KvStorage& kv, ThreadPool& pool) {
  const Layer& L = layers_[li];
  Scratch& s = *scratch_;
  const ModelConfig& c = config_;
  const int n = batch.num_tokens();
  NormRows(L.attn_norm, n, pool);
  MatMul(L.wq, s.xn.data(), n, s.q.data(), pool);
  MatMul(L.wk, s.xn.data(), n, s.k.data(), pool);
  MatMul(L.wv, s.xn.data(), n, s.v.data(), pool);
  AddBias(s.q.data(), L.bq, n);
  AddBias(s.k.data(), L.bk, n);
  AddBias(s.v.data(), L.bv, n);

  // Per token: optional per-head Q/K norm, RoPE, then store K and V into the token's slot.
  const KvLayout& kl = kv.layout();
  const Rope& rope = LayerRope(li);
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
        rope.Apply(q, c.num_heads, c.head_dim, batch.positions[t]);
        rope.Apply(k, c.num_kv_heads, c.head_dim, batch.positions[t]);
        const int slot = seq.num_cached + static_cast<int>(j);
        const BlockId blk = TableFor(seq, config_.LayerWindow(li))[slot / kl.block_size];
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
  Attend(li, batch, KvLayerView(kv, li), s.q.data(), s.attn.data(), c.q_dim(), c.group(),
         c.attn_scale, pool);
  MatMul(L.wo, s.attn.data(), n, s.proj.data(), pool);
  AddBias(s.proj.data(), L.bo, n);
  AddToResidual(s.proj.data(), L.post_attn_norm, n, pool);
}

void Model::AddToResidual(float* y, const std::vector<float>& post_norm, int n, ThreadPool& pool) {
  const int64_t hidden = config_.hidden;
  if (!post_norm.empty()) {
    pool.ParallelFor(n, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        RmsNorm(y + t * hidden, post_norm.data(), hidden, config_.rms_eps, y + t * hidden);
      }
    });
  }
  AddInPlace(scratch_->x.data(), y, static_cast<int64_t>(n) * hidden);
}

void Model::ShiftKeys(KvStorage& kv, std::span<const BlockId> blocks, int32_t delta,
                      ThreadPool& pool) const {
  const ModelConfig& c = config_;
  const KvLayout& kl = kv.layout();
  const int64_t tiles = static_cast<int64_t>(c.num_layers) * static_cast<int64_t>(blocks.size());
  pool.ParallelFor(tiles, [&](int64_t b, int64_t e) {
    std::vector<float> keys(static_cast<size_t>(kl.block_size) * c.head_dim);
    for (int64_t t = b; t < e; ++t) {
      const int layer = static_cast<int>(t / static_cast<int64_t>(blocks.size()));
      const BlockId blk = blocks[static_cast<size_t>(t % static_cast<int64_t>(blocks.size()))];
      for (int h = 0; h < c.num_kv_heads; ++h) {
        uint8_t* tile = kv.KTile(layer, blk, h);
        for (int slot = 0; slot < kl.block_size; ++slot) {
          LoadKvVector(kl.k_dtype, tile + static_cast<size_t>(slot) * kl.k_head_bytes(),
                       c.head_dim, keys.data() + static_cast<size_t>(slot) * c.head_dim);
        }
        // The block's slots as many "heads": one set of angles for the whole tile.
        rope_->Rotate(keys.data() + KeyRopeOffset(), kl.block_size, c.head_dim, delta);
        for (int slot = 0; slot < kl.block_size; ++slot) {
          StoreKvVector(kl.k_dtype, keys.data() + static_cast<size_t>(slot) * c.head_dim,
                        c.head_dim, tile + static_cast<size_t>(slot) * kl.k_head_bytes());
        }
      }
    }
  });
}

void Model::CompactKv(KvStorage& kv, std::span<const BlockId> table,
                      std::span<const std::vector<int32_t>> kept, ThreadPool& pool) const {
  const ModelConfig& c = config_;
  const KvLayout& kl = kv.layout();
  const int bs = kl.block_size;
  const size_t d = static_cast<size_t>(c.head_dim);
  pool.ParallelFor(static_cast<int64_t>(kept.size()), [&](int64_t b, int64_t e) {
    std::vector<float> keys;
    for (int64_t i = b; i < e; ++i) {
      const int layer = static_cast<int>(i / c.num_kv_heads);
      const int h = static_cast<int>(i % c.num_kv_heads);
      const std::vector<int32_t>& k = kept[static_cast<size_t>(i)];
      auto k_slot = [&](int s) {
        return kv.KTile(layer, table[s / bs], h) + (s % bs) * kl.k_head_bytes();
      };
      auto v_slot = [&](int s) {
        return kv.VTile(layer, table[s / bs], h) + (s % bs) * kl.v_head_bytes();
      };
      // Runs of kept slots that move by the same distance are rotated together (one set of
      // angles). kept is ascending and kept[j] >= j: slot j is written after every read of it.
      size_t j = 0;
      while (j < k.size()) {
        const int delta = static_cast<int>(j) - k[j];
        size_t end = j + 1;
        while (end < k.size() && static_cast<int>(end) - k[end] == delta) ++end;
        if (delta != 0) {
          keys.resize((end - j) * d);
          for (size_t r = j; r < end; ++r) {
            LoadKvVector(kl.k_dtype, k_slot(k[r]), c.head_dim, keys.data() + (r - j) * d);
          }
          rope_->Rotate(keys.data() + KeyRopeOffset(), static_cast<int>(end - j), c.head_dim,
                        delta);
          for (size_t r = j; r < end; ++r) {
            const int dst = static_cast<int>(r);
            StoreKvVector(kl.k_dtype, keys.data() + (r - j) * d, c.head_dim, k_slot(dst));
            if (!kl.v_from_k) std::memcpy(v_slot(dst), v_slot(k[r]), kl.v_head_bytes());
          }
        }
        j = end;
      }
    }
  });
}

void Model::Attend(int li, const ForwardBatch& batch, const PagedKvLayerView& view,
                   const float* q, float* out, int64_t stride, int group, float scale,
                   ThreadPool& pool) {
  Scratch& s = *scratch_;
  const int num_kv_heads = view.num_kv_heads;
  const int head_dim = view.head_dim;
  const int window = config_.LayerWindow(li);
  const std::vector<float>& sinks = layers_[static_cast<size_t>(li)].sinks;
  // Tiles: a run of consecutive tokens of one sequence x one kv head, about kTileRows query rows,
  // so that each K/V chunk serves many rows while it is in cache.
  // NOTE: tiling, the split into partitions and the thread that runs a piece never change a
  // row's arithmetic (see ops/attention.h), so all of this may depend on the batch freely.
  constexpr int kTileRows = 32;
  const int tile_tokens = std::max(1, kTileRows / group);
  std::vector<AttentionTile>& tiles = s.attn_tiles;
  tiles.clear();
  s.attn_scored.clear();
  size_t lse_rows = 0;
  int max_parts = 0;
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const ForwardSeq& seq = batch.seqs[si];
    for (int j0 = 0; j0 < seq.num_new; j0 += tile_tokens) {
      const int64_t t0 = seq.first_token + j0;
      for (int h = 0; h < num_kv_heads; ++h) {
        AttentionTile t;
        const int64_t head0 = static_cast<int64_t>(h) * group * head_dim;
        t.q = q + t0 * stride + head0;
        t.q_stride = stride;
        t.out = out + t0 * stride + head0;
        t.out_stride = stride;
        t.num_tokens = std::min(tile_tokens, seq.num_new - j0);
        t.group = group;
        t.kv_head = h;
        t.first_slots = seq.num_cached + j0 + 1;
        t.block_table = TableFor(seq, window);
        t.window = window;
        t.softcap = config_.attn_softcap;
        t.sinks = sinks.empty() ? nullptr : sinks.data() + static_cast<size_t>(h) * group;
        // Scored tiles (a token at a slot >= score_from_slot): their rows' log-sum-exps.
        if (seq.scores != nullptr && t.first_slots + t.num_tokens - 1 > seq.score_from_slot) {
          s.attn_scored.push_back(
              {static_cast<int32_t>(tiles.size()), static_cast<int32_t>(si)});
          lse_rows += static_cast<size_t>(t.num_tokens) * group;
        }
        tiles.push_back(t);
        max_parts = std::max(max_parts, AttentionPartitions(t.first_slots + t.num_tokens - 1) -
                                            AttentionTileFirstPartition(t));
      }
    }
  }
  if (s.attn_lse.size() < lse_rows) s.attn_lse.resize(lse_rows);
  lse_rows = 0;
  for (const std::array<int32_t, 2>& scored : s.attn_scored) {
    AttentionTile& t = tiles[static_cast<size_t>(scored[0])];
    t.lse = s.attn_lse.data() + lse_rows;
    lse_rows += static_cast<size_t>(t.num_tokens) * group;
  }
  // Few tiles over long contexts (decode): split them into partitions run in parallel, then
  // fold each row's partitions in order. Otherwise one item per tile.
  const int nt = pool.num_threads();
  const bool split = max_parts > 1 && static_cast<int64_t>(tiles.size()) < 2 * nt &&
                     AttentionCanSplit(head_dim);
  std::vector<std::array<int32_t, 2>>& items = s.attn_items;
  items.clear();
  s.attn_partial_offset.assign(tiles.size(), 0);
  size_t partial_floats = 0;
  const size_t pf = AttentionPartialFloats(head_dim);
  for (size_t i = 0; i < tiles.size(); ++i) {
    const AttentionTile& t = tiles[i];
    const int np = AttentionPartitions(t.first_slots + t.num_tokens - 1);
    const int p0 = AttentionTileFirstPartition(t);
    if (!split || np - p0 == 1) {
      items.push_back({static_cast<int32_t>(i), -1});
      continue;
    }
    // Partials of partition p at offset + p * rows * pf (those before p0 unused).
    s.attn_partial_offset[i] = partial_floats;
    partial_floats += static_cast<size_t>(np) * t.num_tokens * group * pf;
    for (int p = p0; p < np; ++p) items.push_back({static_cast<int32_t>(i), p});
  }
  if (s.attn_partials.size() < partial_floats) s.attn_partials.resize(partial_floats);
  // Items are claimed one at a time, last first: later tiles of a prompt see the most context.
  const int64_t num_items = static_cast<int64_t>(items.size());
  pool.ForEach(num_items, [&](int64_t k) {
    const auto [ti, p] = items[num_items - 1 - k];
    const AttentionTile& t = tiles[ti];
    if (p < 0) {
      AttendTile(t, view, scale);
    } else {
      const size_t rows = static_cast<size_t>(t.num_tokens) * group;
      AttendTilePartition(t, view, scale, p,
                          s.attn_partials.data() + s.attn_partial_offset[ti] + p * rows * pf);
    }
  });
  if (partial_floats > 0) {
    pool.ForEach(static_cast<int64_t>(tiles.size()), [&](int64_t i) {
      const AttentionTile& t = tiles[i];
      if (AttentionPartitions(t.first_slots + t.num_tokens - 1) - AttentionTileFirstPartition(t) ==
          1) {
        return;
      }
      const int rows = t.num_tokens * group;
      const float* base = s.attn_partials.data() + s.attn_partial_offset[i];
      for (int r = 0; r < rows; ++r) {
        const int j = r / group, g = r % group;
        const int p0 = AttentionRowFirstPartition(t, j);
        MergeAttentionPartials(base + (static_cast<size_t>(p0) * rows + r) * pf,
                               AttentionPartitions(t.first_slots + j) - p0,
                               static_cast<int64_t>(rows * pf), head_dim,
                               t.out + j * t.out_stride + static_cast<int64_t>(g) * head_dim,
                               t.lse != nullptr ? t.lse + r : nullptr,
                               t.sinks != nullptr ? t.sinks[g] : kNoAttentionSink);
      }
    });
  }
  // H2O / SnapKV scores: one more K pass per scored tile (integer sums: any order, same result).
  pool.ForEach(static_cast<int64_t>(s.attn_scored.size()), [&](int64_t k) {
    const auto [ti, si] = s.attn_scored[static_cast<size_t>(k)];
    const AttentionTile& t = tiles[static_cast<size_t>(ti)];
    const ForwardSeq& seq = batch.seqs[static_cast<size_t>(si)];
    // Token j of the tile is at slot first_slots - 1 + j.
    const int first = std::max(0, seq.score_from_slot - (t.first_slots - 1));
    int64_t* acc = seq.scores + (static_cast<int64_t>(li) * num_kv_heads + t.kv_head) *
                                    seq.score_stride;
    AccumulateAttentionScores(t, view, scale, first, acc);
  });
}

void Model::NormRows(const std::vector<float>& weight, int n, ThreadPool& pool) {
  Scratch& s = *scratch_;
  const int64_t hidden = config_.hidden;
  pool.ParallelFor(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      RmsNorm(s.x.data() + t * hidden, weight.data(), hidden, config_.rms_eps,
              s.xn.data() + t * hidden);
    }
  });
}

namespace {

// A feed-forward's biases (gpt-oss's experts): gate and up [gate.rows], down [down.rows].
struct FfnBiases {
  const float* gate = nullptr;
  const float* up = nullptr;
  const float* down = nullptr;
};

// y = down(act(gate x) * up x) for n rows of x (dense, expert and shared feed-forwards), act
// SiLU (SwiGLU), GELU (GeGLU) or gpt-oss's clamped SwiGLU, with biases if given; g and u:
// scratch of n * gate.rows floats each.
void SwiGluFeedForward(const WeightMatrix& gate, const WeightMatrix& up, const WeightMatrix& down,
                       const float* x, int64_t n, float* g, float* u, float* y, ThreadPool& pool,
                       FfnActivation act = FfnActivation::kSilu, FfnBiases bias = {}) {
  MatMul(gate, x, n, g, pool);
  MatMul(up, x, n, u, pool);
  const int64_t ff = gate.rows;
  AddRowBias(g, bias.gate, ff, n);
  AddRowBias(u, bias.up, ff, n);
  pool.ParallelFor(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      switch (act) {
        case FfnActivation::kSilu:
          SwiGlu(g + t * ff, u + t * ff, ff);
          break;
        case FfnActivation::kGeluTanh:
          GeGluTanh(g + t * ff, u + t * ff, ff);
          break;
        case FfnActivation::kSwigluOai:
          SwiGluOai(g + t * ff, u + t * ff, ff);
          break;
      }
    }
  });
  MatMul(down, g, n, y, pool);
  AddRowBias(y, bias.down, down.rows, n);
}

}  // namespace

void Model::FeedForwardBlock(int li, int n, ThreadPool& pool) {
  const Layer& L = layers_[li];
  Scratch& s = *scratch_;
  const ModelConfig& c = config_;
  NormRows(L.ffn_norm, n, pool);
  SwiGluFeedForward(L.w_gate, L.w_up, L.w_down, s.xn.data(), n, s.gate.data(), s.up.data(),
                    s.proj.data(), pool, c.arch->ffn_act);
  AddToResidual(s.proj.data(), L.post_ffn_norm, n, pool);
}

namespace {

// Rows of `rows` floats at src + r * src_stride, for r < n, into dst + r * dst_stride.
void CopyRows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t n,
              int64_t rows) {
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(dst + r * dst_stride, src + r * src_stride, sizeof(float) * rows);
  }
}

}  // namespace

void Model::MlaAttentionBlock(int li, const ForwardBatch& batch, KvStorage& kv, ThreadPool& pool) {
  const Layer& L = layers_[li];
  Scratch& s = *scratch_;
  const ModelConfig& c = config_;
  const MlaConfig& m = c.mla;
  const int n = batch.num_tokens();
  const int64_t H = c.num_heads, qh = m.q_head(), lat = m.latent_dim(), lora = m.kv_lora_rank;
  NormRows(L.attn_norm, n, pool);
  if (m.q_lora_rank > 0) {
    const int64_t ql = m.q_lora_rank;
    MatMul(L.wq_a, s.xn.data(), n, s.q_a.data(), pool);
    for (int64_t t = 0; t < n; ++t) {
      RmsNorm(s.q_a.data() + t * ql, L.q_a_norm.data(), ql, c.rms_eps, s.q_a.data() + t * ql);
    }
    MatMul(L.wq_b, s.q_a.data(), n, s.q.data(), pool);
  } else {
    MatMul(L.wq, s.xn.data(), n, s.q.data(), pool);
  }
  MatMul(L.wkv_a, s.xn.data(), n, s.k.data(), pool);  // [n, lat]: latent, then k_rope

  // Per token: normalise the latent, rotate q_rope of every head and the shared k_rope, store
  // the latent vector in the token's slot.
  const KvLayout& kl = kv.layout();
  for (const ForwardSeq& seq : batch.seqs) {
    pool.ParallelFor(seq.num_new, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        const int64_t t = seq.first_token + j;
        float* q = s.q.data() + t * H * qh;
        float* kvec = s.k.data() + t * lat;
        RmsNorm(kvec, L.kv_a_norm.data(), lora, c.rms_eps, kvec);
        rope_->Apply(q + m.qk_nope, static_cast<int>(H), static_cast<int>(qh), batch.positions[t]);
        rope_->Apply(kvec + lora, 1, m.qk_rope, batch.positions[t]);
        const int slot = seq.num_cached + static_cast<int>(j);
        StoreKvVector(kl.k_dtype, kvec, static_cast<int>(lat),
                      kv.KTile(li, seq.block_table[slot / kl.block_size], 0) +
                          (slot % kl.block_size) * kl.k_head_bytes());
      }
    });
  }
  if (options_.mla_form == MlaForm::kDecompressed) {
    MlaDecompressedAttend(li, batch, kv, pool);
  } else {
    // Absorbed: q_abs[t, h] = [W_kb,h^T q_nope[t, h], q_rope[t, h]], one latent "KV head" shared
    // by all H query heads, then the attended latents mapped back through W_vb,h.
    for (int64_t h = 0; h < H; ++h) {
      CopyRows(s.q.data() + h * qh, H * qh, s.head_in.data(), m.qk_nope, n, m.qk_nope);
      MatMul(L.kb_abs[static_cast<size_t>(h)], s.head_in.data(), n, s.head_out.data(), pool);
      CopyRows(s.head_out.data(), lora, s.q_abs.data() + h * lat, H * lat, n, lora);
      CopyRows(s.q.data() + h * qh + m.qk_nope, H * qh, s.q_abs.data() + h * lat + lora, H * lat,
               n, m.qk_rope);
    }
    Attend(li, batch, KvLayerView(kv, li), s.q_abs.data(), s.attn_lat.data(), H * lat,
           static_cast<int>(H), m.kq_scale, pool);
    for (int64_t h = 0; h < H; ++h) {
      CopyRows(s.attn_lat.data() + h * lat, H * lat, s.head_in.data(), lora, n, lora);
      MatMul(L.vb[static_cast<size_t>(h)], s.head_in.data(), n, s.head_out.data(), pool);
      CopyRows(s.head_out.data(), m.v_head, s.attn.data() + h * m.v_head, H * m.v_head, n,
               m.v_head);
    }
  }
  MatMul(L.wo, s.attn.data(), n, s.proj.data(), pool);
  AddInPlace(s.x.data(), s.proj.data(), static_cast<int64_t>(n) * c.hidden);
}

// Per sequence: every visible slot's latent (as the cache stores it) expanded through kv_b into
// per-head keys [k_nope, k_rope] and values, held in f32 arenas over an identity block table,
// then ordinary attention with H KV heads. Vectors are zero-padded to d = max(q_head, v_head).
void Model::MlaDecompressedAttend(int li, const ForwardBatch& batch, const KvStorage& kv,
                                  ThreadPool& pool) {
  const Layer& L = layers_[li];
  Scratch& s = *scratch_;
  const ModelConfig& c = config_;
  const MlaConfig& m = c.mla;
  const KvLayout& kl = kv.layout();
  const int64_t H = c.num_heads, qh = m.q_head(), lat = m.latent_dim(), lora = m.kv_lora_rank;
  const int64_t nope = m.qk_nope, v = m.v_head, d = std::max(qh, v), kvb = nope + v;
  const int bs = kl.block_size;
  for (const ForwardSeq& seq : batch.seqs) {
    const int64_t slots = seq.num_cached + seq.num_new;
    const int64_t blocks = (slots + bs - 1) / bs;
    s.dec_lat.resize(static_cast<size_t>(slots * lat));
    s.dec_kvb.resize(static_cast<size_t>(slots * H * kvb));
    s.dec_k.assign(static_cast<size_t>(blocks * H * bs * d), 0.f);
    s.dec_v.assign(static_cast<size_t>(blocks * H * bs * d), 0.f);
    s.dec_q.assign(static_cast<size_t>(seq.num_new * H * d), 0.f);
    s.dec_out.resize(static_cast<size_t>(seq.num_new * H * d));
    pool.ParallelFor(slots, [&](int64_t b, int64_t e) {
      for (int64_t slot = b; slot < e; ++slot) {
        LoadKvVector(kl.k_dtype,
                     kv.KTile(li, seq.block_table[slot / bs], 0) + (slot % bs) * kl.k_head_bytes(),
                     static_cast<int>(lat), s.dec_lat.data() + slot * lat);
      }
    });
    // The latents as a contiguous [slots, lora] matrix (k_rope moved out of the way first).
    std::vector<float> k_rope(static_cast<size_t>(slots * m.qk_rope));
    for (int64_t slot = 0; slot < slots; ++slot) {
      std::memcpy(k_rope.data() + slot * m.qk_rope, s.dec_lat.data() + slot * lat + lora,
                  sizeof(float) * m.qk_rope);
      std::memmove(s.dec_lat.data() + slot * lora, s.dec_lat.data() + slot * lat,
                   sizeof(float) * lora);
    }
    MatMul(L.kv_b, s.dec_lat.data(), slots, s.dec_kvb.data(), pool);
    pool.ParallelFor(slots, [&](int64_t b, int64_t e) {
      for (int64_t slot = b; slot < e; ++slot) {
        for (int64_t h = 0; h < H; ++h) {
          const size_t tile = static_cast<size_t>(((slot / bs) * H + h) * bs + slot % bs);
          float* kd = s.dec_k.data() + tile * d;
          float* vd = s.dec_v.data() + tile * d;
          const float* src = s.dec_kvb.data() + (slot * H + h) * kvb;
          std::memcpy(kd, src, sizeof(float) * nope);
          std::memcpy(kd + nope, k_rope.data() + slot * m.qk_rope, sizeof(float) * m.qk_rope);
          std::memcpy(vd, src + nope, sizeof(float) * v);
        }
      }
    });
    for (int64_t j = 0; j < seq.num_new; ++j) {
      CopyRows(s.q.data() + (seq.first_token + j) * H * qh, qh, s.dec_q.data() + j * H * d, d, H,
               qh);
    }
    s.dec_table.resize(static_cast<size_t>(blocks));
    for (int64_t b = 0; b < blocks; ++b) s.dec_table[static_cast<size_t>(b)] = BlockId(static_cast<int32_t>(b));
    ForwardBatch one;
    ForwardSeq sub = seq;
    sub.block_table = s.dec_table;
    sub.first_token = 0;
    one.seqs.push_back(sub);
    PagedKvLayerView view;
    view.k = reinterpret_cast<const uint8_t*>(s.dec_k.data());
    view.v = reinterpret_cast<const uint8_t*>(s.dec_v.data());
    view.k_dtype = view.v_dtype = KvDtype::kF32;
    view.num_kv_heads = static_cast<int>(H);
    view.head_dim = static_cast<int>(d);
    view.block_size = bs;
    view.k_head_bytes = view.v_head_bytes = static_cast<size_t>(d) * sizeof(float);
    Attend(li, one, view, s.dec_q.data(), s.dec_out.data(), H * d, 1, m.kq_scale, pool);
    for (int64_t j = 0; j < seq.num_new; ++j) {
      CopyRows(s.dec_out.data() + j * H * d, d, s.attn.data() + (seq.first_token + j) * H * v, v,
               H, v);
    }
  }
}

namespace {

// One token's routing: probabilities from the router logits (softmax or sigmoid), the top k by
// probability plus the selection bias (ties to the lower expert id; within the best groups if
// the experts are grouped), their probabilities as weights, renormalised and scaled as the
// config says. probs: scratch of 2 * num_experts floats; experts/weights: [k] in rank order.
void RouteToken(const float* logits, const std::vector<float>& bias, const MoeConfig& m,
                float* probs, int32_t* experts, float* weights) {
  const int E = m.num_experts;
  if (m.gating == MoeGating::kSoftmax) {
    std::memcpy(probs, logits, sizeof(float) * E);
    Softmax(probs, E);
  } else if (m.gating == MoeGating::kSoftmaxWeight) {
    std::memcpy(probs, logits, sizeof(float) * E);  // chosen by logit; softmax of the k below
  } else {
    for (int e = 0; e < E; ++e) probs[e] = 1.f / (1.f + std::exp(-logits[e]));
  }
  // Selection scores; experts of groups left out are -inf.
  float* score = probs + E;
  for (int e = 0; e < E; ++e) score[e] = bias.empty() ? probs[e] : probs[e] + bias[e];
  if (m.num_groups > 1 && m.num_groups_used < m.num_groups) {
    const int per = E / m.num_groups;
    std::vector<std::pair<float, int>> groups;  // (-(best two summed), group): ascending
    for (int g = 0; g < m.num_groups; ++g) {
      float a = -INFINITY, b = -INFINITY;
      for (int e = g * per; e < (g + 1) * per; ++e) {
        if (score[e] > a) {
          b = a;
          a = score[e];
        } else if (score[e] > b) {
          b = score[e];
        }
      }
      groups.push_back({-(a + (per > 1 ? b : 0.f)), g});
    }
    std::sort(groups.begin(), groups.end());
    for (int i = m.num_groups_used; i < m.num_groups; ++i) {
      const int g = groups[static_cast<size_t>(i)].second;
      std::fill(score + g * per, score + (g + 1) * per, -INFINITY);
    }
  }
  for (int r = 0; r < m.num_used; ++r) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      bool taken = false;
      for (int q = 0; q < r; ++q) taken = taken || experts[q] == e;
      if (!taken && (best < 0 || score[e] > score[best])) best = e;
    }
    experts[r] = best;
    weights[r] = probs[best];
  }
  if (m.gating == MoeGating::kSoftmaxWeight) Softmax(weights, m.num_used);
  if (m.norm_weights) {
    float sum = 0.f;
    for (int r = 0; r < m.num_used; ++r) sum += weights[r];
    sum = std::max(sum, 6.103515625e-5f);  // as llama.cpp clamps it (2^-14)
    for (int r = 0; r < m.num_used; ++r) weights[r] /= sum;
  }
  for (int r = 0; r < m.num_used; ++r) weights[r] *= m.weights_scale;
}

}  // namespace

// NOTE: the batch's tokens are grouped by expert, so each chosen expert's matrices are read
// once per step whatever the number of tokens that chose it. A token's output does not depend
// on its group: MatMul rows are batch invariant, and each token sums its experts' outputs in
// its own rank order.
void Model::MoeFeedForward(int li, int n, ThreadPool& pool) {
  const Layer& L = layers_[li];
  Scratch& s = *scratch_;
  const ModelConfig& c = config_;
  const MoeConfig& m = c.moe;
  const int E = m.num_experts, K = m.num_used;
  const int64_t hidden = c.hidden;
  NormRows(L.ffn_norm, n, pool);
  s.router_logits.resize(static_cast<size_t>(n) * E * 3);
  s.moe_expert.resize(static_cast<size_t>(n) * K);
  s.moe_weight.resize(static_cast<size_t>(n) * K);
  MatMul(L.router, s.xn.data(), n, s.router_logits.data(), pool);
  AddBias(s.router_logits.data(), L.router_bias, n);
  pool.ParallelFor(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      RouteToken(s.router_logits.data() + t * E, L.selection_bias, m,
                 s.router_logits.data() + static_cast<int64_t>(n) * E + t * E * 2,
                 s.moe_expert.data() + t * K, s.moe_weight.data() + t * K);
    }
  });
  for (std::vector<int32_t>& rows : s.moe_rows) rows.clear();
  for (int64_t i = 0; i < static_cast<int64_t>(n) * K; ++i) {
    s.moe_rows[static_cast<size_t>(s.moe_expert[static_cast<size_t>(i)])].push_back(
        static_cast<int32_t>(i));
  }
  for (int e = 0; e < E; ++e) {
    const std::vector<int32_t>& rows = s.moe_rows[static_cast<size_t>(e)];
    if (rows.empty()) continue;
    const int64_t nr = static_cast<int64_t>(rows.size());
    for (int64_t r = 0; r < nr; ++r) {
      std::memcpy(s.moe_x.data() + r * hidden, s.xn.data() + (rows[r] / K) * hidden,
                  sizeof(float) * hidden);
    }
    const size_t ue = static_cast<size_t>(e);
    FfnBiases bias;
    if (!L.exp_gate_b.empty()) {
      const int64_t ff = L.exp_gate[ue].rows;
      bias = {L.exp_gate_b.data() + e * ff, L.exp_up_b.data() + e * ff,
              L.exp_down_b.data() + e * hidden};
    }
    SwiGluFeedForward(L.exp_gate[ue], L.exp_up[ue], L.exp_down[ue], s.moe_x.data(), nr,
                      s.moe_gate.data(), s.moe_up.data(), s.moe_y.data(), pool, c.arch->ffn_act,
                      bias);
    for (int64_t r = 0; r < nr; ++r) {
      std::memcpy(s.moe_out.data() + static_cast<int64_t>(rows[r]) * hidden,
                  s.moe_y.data() + r * hidden, sizeof(float) * hidden);
    }
    const uint64_t bytes = L.exp_gate[ue].bytes() + L.exp_up[ue].bytes() + L.exp_down[ue].bytes();
    moe_stats_.expert_bytes_read += bytes;
    moe_stats_.expert_bytes_ungrouped += bytes * static_cast<uint64_t>(nr);
  }
  // proj[t] = sum_r w[t, r] * out[t, r], in rank order.
  pool.ParallelFor(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* y = s.proj.data() + t * hidden;
      for (int r = 0; r < K; ++r) {
        const float w = s.moe_weight[static_cast<size_t>(t * K + r)];
        const float* o = s.moe_out.data() + (t * K + r) * hidden;
        if (r == 0) {
          for (int64_t i = 0; i < hidden; ++i) y[i] = w * o[i];
        } else {
          for (int64_t i = 0; i < hidden; ++i) y[i] += w * o[i];
        }
      }
    }
  });
  if (m.num_shared > 0) {
    SwiGluFeedForward(L.sh_gate, L.sh_up, L.sh_down, s.xn.data(), n, s.moe_gate.data(),
                      s.moe_up.data(), s.moe_y.data(), pool);
    AddInPlace(s.proj.data(), s.moe_y.data(), static_cast<int64_t>(n) * hidden);
  }
  AddInPlace(s.x.data(), s.proj.data(), static_cast<int64_t>(n) * hidden);
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
  if (config_.final_softcap > 0.f) {
    pool.ParallelFor(rows, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        SoftCap(logits + r * config_.vocab, config_.vocab, config_.final_softcap);
      }
    });
  }
}

}  // namespace kvserve
