// Internal structures of Model shared by its .cc files.
#pragma once

#include <array>
#include <vector>

#include "model/model.h"
#include "ops/attention.h"

namespace kvserve {

struct Model::Layer {
  std::vector<float> attn_norm;        // [hidden]
  WeightMatrix wq, wk, wv, wo;         // [q_dim, hidden], [kv_dim, hidden] x2, [hidden, q_dim]
  std::vector<float> bq, bk, bv;       // qwen2 biases, empty otherwise
  std::vector<float> q_norm, k_norm;   // qwen3 per-head norms [head_dim], empty otherwise
  std::vector<float> ffn_norm;         // [hidden]
  WeightMatrix w_gate, w_up, w_down;   // [ffn, hidden] x2, [hidden, ffn]
};

// Activations for up to max_batch_tokens tokens, allocated once.
struct Model::Scratch {
  AlignedBuffer<float> x;        // [T, hidden] residual stream
  AlignedBuffer<float> xn;       // [T, hidden] normalised input of a block
  AlignedBuffer<float> q;        // [T, q_dim]
  AlignedBuffer<float> k;        // [T, kv_dim]
  AlignedBuffer<float> v;        // [T, kv_dim]
  AlignedBuffer<float> attn;     // [T, q_dim]
  AlignedBuffer<float> proj;     // [T, hidden]
  AlignedBuffer<float> gate;     // [T, ffn]
  AlignedBuffer<float> up;       // [T, ffn]
  AlignedBuffer<float> logit_x;  // [T, hidden] normalised rows that need logits
  // Attention work of a step (grow on first use, then reused): tiles of (tokens, kv head),
  // work items (tile, partition or -1 for the whole tile), partial states of split tiles.
  std::vector<AttentionTile> attn_tiles;
  std::vector<std::array<int32_t, 2>> attn_items;
  std::vector<size_t> attn_partial_offset;  // per tile, into attn_partials (split tiles only)
  std::vector<float> attn_partials;
  std::vector<float> attn_lse;           // per row of the tiles of scored sequences
  std::vector<std::array<int32_t, 2>> attn_scored;  // tiles of scored sequences: {tile, seq}
};

}  // namespace kvserve
