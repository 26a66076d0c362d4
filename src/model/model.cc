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

void AddBias(float* y, const std::vector<float>& bias, int64_t num_tokens) {
  if (bias.empty()) return;
  const int64_t n = static_cast<int64_t>(bias.size());
  for (int64_t t = 0; t < num_tokens; ++t) AddInPlace(y + t * n, bias.data(), n);
}

}  // namespace

PagedKvLayerView KvLayerView(const KvStorage& kv, int layer) {
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
        rope_->Rotate(keys.data(), kl.block_size, c.head_dim, delta);
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
          rope_->Rotate(keys.data(), static_cast<int>(end - j), c.head_dim, delta);
          for (size_t r = j; r < end; ++r) {
            const int dst = static_cast<int>(r);
            StoreKvVector(kl.k_dtype, keys.data() + (r - j) * d, c.head_dim, k_slot(dst));
            std::memcpy(v_slot(dst), v_slot(k[r]), kl.v_head_bytes());
          }
        }
        j = end;
      }
    }
  });
}

void Model::Attend(int li, const ForwardBatch& batch, const KvStorage& kv, ThreadPool& pool) {
  Scratch& s = *scratch_;
  const ModelConfig& c = config_;
  const PagedKvLayerView view = KvLayerView(kv, li);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const int group = c.group();
  const int64_t q_dim = c.q_dim();
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
      for (int h = 0; h < c.num_kv_heads; ++h) {
        AttentionTile t;
        const int64_t head0 = static_cast<int64_t>(h) * group * c.head_dim;
        t.q = s.q.data() + t0 * q_dim + head0;
        t.q_stride = q_dim;
        t.out = s.attn.data() + t0 * q_dim + head0;
        t.out_stride = q_dim;
        t.num_tokens = std::min(tile_tokens, seq.num_new - j0);
        t.group = group;
        t.kv_head = h;
        t.first_slots = seq.num_cached + j0 + 1;
        t.block_table = seq.block_table;
        // Scored tiles (a token at a slot >= score_from_slot): their rows' log-sum-exps.
        if (seq.scores != nullptr && t.first_slots + t.num_tokens - 1 > seq.score_from_slot) {
          s.attn_scored.push_back(
              {static_cast<int32_t>(tiles.size()), static_cast<int32_t>(si)});
          lse_rows += static_cast<size_t>(t.num_tokens) * group;
        }
        tiles.push_back(t);
        max_parts = std::max(max_parts, AttentionPartitions(t.first_slots + t.num_tokens - 1));
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
                     AttentionCanSplit(c.head_dim);
  std::vector<std::array<int32_t, 2>>& items = s.attn_items;
  items.clear();
  s.attn_partial_offset.assign(tiles.size(), 0);
  size_t partial_floats = 0;
  const size_t pf = AttentionPartialFloats(c.head_dim);
  for (size_t i = 0; i < tiles.size(); ++i) {
    const AttentionTile& t = tiles[i];
    const int np = AttentionPartitions(t.first_slots + t.num_tokens - 1);
    if (!split || np == 1) {
      items.push_back({static_cast<int32_t>(i), -1});
      continue;
    }
    s.attn_partial_offset[i] = partial_floats;
    partial_floats += static_cast<size_t>(np) * t.num_tokens * group * pf;
    for (int p = 0; p < np; ++p) items.push_back({static_cast<int32_t>(i), p});
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
      if (AttentionPartitions(t.first_slots + t.num_tokens - 1) == 1) return;
      const int rows = t.num_tokens * group;
      const float* base = s.attn_partials.data() + s.attn_partial_offset[i];
      for (int r = 0; r < rows; ++r) {
        const int j = r / group, g = r % group;
        MergeAttentionPartials(base + r * pf, AttentionPartitions(t.first_slots + j),
                               static_cast<int64_t>(rows * pf), c.head_dim,
                               t.out + j * t.out_stride + static_cast<int64_t>(g) * c.head_dim,
                               t.lse != nullptr ? t.lse + r : nullptr);
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
    int64_t* acc = seq.scores + (static_cast<int64_t>(li) * c.num_kv_heads + t.kv_head) *
                                    seq.score_stride;
    AccumulateAttentionScores(t, view, scale, first, acc);
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
