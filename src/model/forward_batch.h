// ForwardBatch: the plain value the engine hands to Model::Forward each step. It holds the new
// tokens of one or more sequences, where each sequence's KV lives (its block table) and which
// rows need logits.
//
// Tokens of one sequence are contiguous in `tokens`. Token j of sequence s occupies KV slot
// s.num_cached + j and attends to slots [0, s.num_cached + j]. `positions` carries each token's
// RoPE position separately from its slot, so a later change may decouple them (attention sinks).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "util/strong_id.h"

namespace kvserve {

struct ForwardSeq {
  std::span<const BlockId> block_table;  // must cover num_cached + num_new slots
  // The window group's table (kv_storage.h), as long as block_table, for the layers in that
  // group; its entries before the slots those layers' windows read may be invalid. Empty when
  // the KV layout has no window group.
  std::span<const BlockId> window_table;
  int32_t num_cached = 0;                // slots already holding K/V before this batch
  int32_t num_new = 0;                   // tokens of this sequence in the batch
  int32_t first_token = 0;               // index of its first token in ForwardBatch::tokens
  // Attention scores (h2o, snapkv: sched/kv_eviction.h): if set, the attention probabilities of
  // its tokens at slots >= score_from_slot, summed over each KV head's query group, are added in
  // fixed point to scores[(layer * num_kv_heads + kv_head) * score_stride + slot].
  int64_t* scores = nullptr;
  int32_t score_stride = 0;
  int32_t score_from_slot = 0;
};

struct ForwardBatch {
  std::vector<TokenId> tokens;       // [num_tokens]
  std::vector<int32_t> positions;    // [num_tokens]
  std::vector<ForwardSeq> seqs;
  std::vector<int32_t> logits_rows;  // token indices whose logits are wanted, in output order

  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  // Appends a sequence's tokens with positions num_cached, num_cached + 1, ...
  // If want_last_logits, its last token is added to logits_rows.
  void AddSequence(std::span<const BlockId> block_table, int32_t num_cached,
                   std::span<const TokenId> new_tokens, bool want_last_logits) {
    AddSequence(block_table, num_cached, new_tokens, want_last_logits ? 1 : 0);
  }
  // The same, with logits for its last `num_logits` tokens (speculative verification).
  void AddSequence(std::span<const BlockId> block_table, int32_t num_cached,
                   std::span<const TokenId> new_tokens, int num_logits) {
    ForwardSeq s{
        block_table, {}, num_cached, static_cast<int32_t>(new_tokens.size()), num_tokens()};
    for (size_t i = 0; i < new_tokens.size(); ++i) {
      tokens.push_back(new_tokens[i]);
      positions.push_back(num_cached + static_cast<int32_t>(i));
    }
    const int32_t n = static_cast<int32_t>(new_tokens.size());
    for (int32_t i = n - std::min(num_logits, n); i < n; ++i) logits_rows.push_back(s.first_token + i);
    seqs.push_back(s);
  }
  // The same with the window group's table (ForwardSeq::window_table).
  void AddSequence(std::span<const BlockId> block_table, std::span<const BlockId> window_table,
                   int32_t num_cached, std::span<const TokenId> new_tokens, int num_logits) {
    AddSequence(block_table, num_cached, new_tokens, num_logits);
    seqs.back().window_table = window_table;
  }
};

}  // namespace kvserve
