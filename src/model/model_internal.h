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
  std::vector<float> bq, bk, bv;       // qwen2, gpt-oss biases, empty otherwise
  std::vector<float> bo;               // gpt-oss: attn_output.bias [hidden], empty otherwise
  std::vector<float> sinks;            // gpt-oss: attn_sinks [num_heads], empty otherwise
  std::vector<float> q_norm, k_norm;   // qwen3 per-head norms [head_dim], empty otherwise
  std::vector<float> ffn_norm;         // [hidden]
  // Gemma: RMSNorm weights of the attention output and the feed-forward output [hidden], empty
  // otherwise.
  std::vector<float> post_attn_norm, post_ffn_norm;
  WeightMatrix w_gate, w_up, w_down;   // dense: [ffn, hidden] x2, [hidden, ffn]

  // Mixture of experts (MoeConfig::LayerIsMoe): the router, then each expert's matrices as
  // slices of the 3-D GGUF tensors [expert][rows][cols]; shared experts are one dense SwiGLU of
  // num_shared * expert_ffn rows (data null if none).
  WeightMatrix router;                                   // [num_experts, hidden]
  std::vector<float> selection_bias;                     // exp_probs_b [num_experts] or empty
  // gpt-oss: the router's bias [num_experts] and each expert's biases, [E][expert_ffn] for gate
  // and up, [E][hidden] for down (empty otherwise).
  std::vector<float> router_bias, exp_gate_b, exp_up_b, exp_down_b;
  std::vector<WeightMatrix> exp_gate, exp_up, exp_down;  // [expert_ffn, hidden] x2, [hidden, ffn]
  WeightMatrix sh_gate, sh_up, sh_down;

  // MLA (ModelConfig::is_mla): wq is attn_q [H * q_head, hidden] unless q_lora_rank > 0, then
  // wq_a [q_lora, hidden] -> q_a_norm -> wq_b [H * q_head, q_lora]. wkv_a: attn_kv_a_mqa
  // [kv_lora + rope, hidden]; wo: [hidden, H * v_head].
  WeightMatrix wq_a, wq_b, wkv_a;
  std::vector<float> q_a_norm, kv_a_norm;  // [q_lora], [kv_lora]
  // Per head h: kb_abs[h] = W_kb,h^T [kv_lora, qk_nope] maps q_nope into the latent space
  // (absorbed form); vb[h] = W_vb,h [v_head, kv_lora] maps an attended latent to the head's
  // output; kv_b [H * (qk_nope + v_head), kv_lora] decompresses a latent into every head's k_nope
  // and v (decompressed form). Slices of the file's tensors where its layout allows, otherwise
  // f32 copies in `owned`.
  std::vector<WeightMatrix> kb_abs, vb;
  WeightMatrix kv_b;
  std::vector<std::vector<float>> owned;
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
  // Mixture of experts: router logits [T, E], each token's chosen experts and weights
  // [T, num_used], the rows gathered for one expert and their activations, and every chosen
  // expert's output per token [T, num_used, hidden] (summed per token in rank order).
  std::vector<float> router_logits;
  std::vector<int32_t> moe_expert;
  std::vector<float> moe_weight;
  std::vector<std::vector<int32_t>> moe_rows;  // per expert: the (token * num_used + rank)s
  AlignedBuffer<float> moe_x, moe_gate, moe_up, moe_y, moe_out;
  // MLA: the low-rank query, the absorbed queries [T, H, latent] and attended latents
  // [T, H, latent], and per-head gathers.
  AlignedBuffer<float> q_a, q_abs, attn_lat, head_in, head_out;
  // MLA, decompressed form (grow on first use): one sequence's latents, their expansion, the
  // per-head f32 K/V arenas over an identity block table, its queries and outputs.
  std::vector<float> dec_lat, dec_kvb, dec_k, dec_v, dec_q, dec_out;
  std::vector<BlockId> dec_table;
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
