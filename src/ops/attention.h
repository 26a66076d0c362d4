// Causal attention of one token's query heads over a sequence's paged K/V.
//
// K and V are read only through the sequence's block table: slot s lives in block
// block_table[s / block_size] at offset s % block_size. Each (block, kv_head) is a contiguous
// [block_size, head vector] tile (see kv/kv_storage.h); this kernel receives the layer's arena
// base pointers and strides, so ops/ stays independent of the KV bookkeeping.
//
// Pure function; thread-safe for disjoint outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

#include "quant/kv_dtype.h"
#include "util/strong_id.h"

namespace kvserve {

struct PagedKvLayerView {
  const uint8_t* k = nullptr;  // layer arena base: [num_blocks, num_kv_heads, block_size, head]
  const uint8_t* v = nullptr;
  KvDtype k_dtype = KvDtype::kF16;
  KvDtype v_dtype = KvDtype::kF16;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  size_t k_head_bytes = 0;  // bytes of one head vector in a slot
  size_t v_head_bytes = 0;

  const uint8_t* KSlot(BlockId b, int kv_head, int offset) const {
    return k + ((static_cast<size_t>(b.value()) * num_kv_heads + kv_head) * block_size + offset) *
                   k_head_bytes;
  }
  const uint8_t* VSlot(BlockId b, int kv_head, int offset) const {
    return v + ((static_cast<size_t>(b.value()) * num_kv_heads + kv_head) * block_size + offset) *
                   v_head_bytes;
  }
};

// Attention is computed per query row (one query head of one token) with an online softmax over
// partitions of kAttentionPartition slots (slot 0 starts partition 0); a row's partition states
// are folded in partition order and normalised at the end. The arithmetic of a row depends only
// on its number of visible slots: never on the other rows computed with it, on how a prompt is
// chunked or batched, on the thread count or on which thread computed which partition, so the
// results are bit-identical however the work is split (batch invariance; tests check it).
constexpr int kAttentionPartition = 512;

inline int AttentionPartitions(int num_slots) {
  return (num_slots + kAttentionPartition - 1) / kAttentionPartition;
}
// Floats of one row's partial state (AttendTilePartition): head_dim + 2.
inline size_t AttentionPartialFloats(int head_dim) { return static_cast<size_t>(head_dim) + 2; }

// The first slot a query that sees slots [0, num_slots) attends to: 0, or with a sliding window
// of `window` slots (0: none) the last `window` of them.
// The kernels read a window's K/V from its first slot rounded down to a multiple of this (the
// widest chunk of slots they load at once): those slots' blocks must exist.
constexpr int kAttentionMaxLanes = 16;
inline int AttentionFirstSlot(int num_slots, int window) {
  return window > 0 && num_slots > window ? num_slots - window : 0;
}

// Consecutive query tokens of one sequence and the `group` query heads that share kv_head.
// Token j's heads are q + j * q_stride ([group, head_dim]) and attend to slots
// [AttentionFirstSlot(first_slots + j, window), first_slots + j); they are written to
// out + j * out_stride. Row r = j * group + g.
// A sliding window (gemma2/3's local layers, Mistral) only narrows what a row sees: its
// partitions are still those of kAttentionPartition slots from slot 0 (the ones before its first
// slot are skipped), so its arithmetic depends on its first and last slot only.
struct AttentionTile {
  const float* q = nullptr;
  int64_t q_stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  int num_tokens = 1;
  int group = 1;
  int kv_head = 0;
  int first_slots = 1;
  std::span<const BlockId> block_table;
  int window = 0;       // sliding window in slots (0: every earlier slot)
  float softcap = 0.f;  // > 0: each scaled score s becomes softcap * tanh(s / softcap) (gemma2)
  // gpt-oss's learned sinks, one logit per query head of the tile ([group]; null: none): each
  // row's softmax gets one more term exp(sink - m) in its denominator, for no value.
  const float* sinks = nullptr;
  // If set, AttendTile (and MergeAttentionPartials, given lse + r) also write row r's
  // log-sum-exp of its scaled scores (m + log l) to lse[r], for AccumulateAttentionScores.
  float* lse = nullptr;
};

// The partitions a tile's rows attend to: [first, last] (its first row's first slot, its last
// row's last slot).
inline int AttentionTileFirstPartition(const AttentionTile& t) {
  return AttentionFirstSlot(t.first_slots, t.window) / kAttentionPartition;
}
// The first partition of the tile's token j.
inline int AttentionRowFirstPartition(const AttentionTile& t, int j) {
  return AttentionFirstSlot(t.first_slots + j, t.window) / kAttentionPartition;
}

// Whole tile: every partition of every row, written to out. K/V chunks are converted once and
// used by every row of the tile while they are in cache.
void AttendTile(const AttentionTile& tile, const PagedKvLayerView& kv, float scale);

// Partition p only: for each row r that has slots in it (first_slots + j > p *
// kAttentionPartition and, with a window, its first slot below the partition's end) writes its
// partial state to partials + r * AttentionPartialFloats(d); other rows' entries are left alone
// or hold an empty state. Returns nothing in out.
void AttendTilePartition(const AttentionTile& tile, const PagedKvLayerView& kv, float scale,
                         int partition, float* partials);

// Whether AttendTilePartition / MergeAttentionPartials cover this head dim (otherwise use
// AttendTile, which then runs the reference token by token).
bool AttentionCanSplit(int head_dim);

constexpr float kNoAttentionSink = -std::numeric_limits<float>::infinity();

// Folds one row's `num_partitions` partial states (partition p at partials + p * stride floats;
// with a window, pass the row's first partition's state and count from there) in partition order
// and writes the row's head_dim outputs. AttendTilePartition followed by this
// gives bit-identical results to AttendTile.
// With lse, also writes the row's log-sum-exp there; sink: the row's sink logit (AttentionTile).
void MergeAttentionPartials(const float* partials, int num_partitions, int64_t stride, int head_dim,
                            float* out, float* lse = nullptr, float sink = kNoAttentionSink);

// Attention probabilities gathered per slot (H2O and SnapKV scores, sched/kv_eviction.h): for
// every row of tokens j >= first_token of the tile, p(row, slot) = exp(score - lse[row]) over
// the slots the row sees, with the lse that AttendTile or MergeAttentionPartials wrote for the
// tile, is added in fixed point (round down of p * 2^24) to acc[slot]. The additions are
// integer and atomic, so tiles of one sequence and head may run on any threads in any order and
// the sums come out the same. One K pass over the tile's slots (no V).
void AccumulateAttentionScores(const AttentionTile& tile, const PagedKvLayerView& kv, float scale,
                               int first_token, int64_t* acc);
constexpr float kAttentionScoreFixedOne = 16777216.f;  // 2^24

// The instruction set the attention kernel uses: "avx512", "avx2" or "generic" (capped by the
// KVSERVE_ISA environment variable like the matmuls). Head dims the fast kernel does not cover
// (not a multiple of the vector width, or above 256) use AttendGroupReference per token.
std::string_view AttentionIsa();
// For tests and benchmarks ("generic", "avx2", "avx512", "best"); false if the CPU lacks it, and
// for "generic" in a build whose target has AVX2 (the portable kernel is then the AVX2 one). Not
// thread-safe against running kernels.
bool SetAttentionIsa(std::string_view isa);

// Scratch floats AttendGroupReference needs for `num_slots` slots and `group` query heads.
size_t AttentionScratchFloats(int num_slots, int group, int head_dim);

// The reference's first half: scratch[g * num_slots + s] = query head g's softmax probability of
// slot s (scratch as AttendGroupReference's; 0 for slots before first_slot).
void ReferenceProbabilities(const float* q, int group, int kv_head, const PagedKvLayerView& kv,
                            std::span<const BlockId> block_table, int num_slots, float scale,
                            float* scratch, int first_slot = 0, float softcap = 0.f,
                            const float* sinks = nullptr);

// Reference kernel (two passes, plain softmax): attends the `group` query heads that share
// kv_head (q: [group, head_dim]) over slots [first_slot, num_slots), writing out:
// [group, head_dim]. softcap and sinks ([group] or null) as AttentionTile's.
void AttendGroupReference(const float* q, int group, int kv_head, const PagedKvLayerView& kv,
                          std::span<const BlockId> block_table, int num_slots, float scale,
                          float* scratch, float* out, int first_slot = 0, float softcap = 0.f,
                          const float* sinks = nullptr);

// One token through the fast kernel (AttendTile with one token); same arguments as the
// reference, scratch unused.
void AttendGroup(const float* q, int group, int kv_head, const PagedKvLayerView& kv,
                 std::span<const BlockId> block_table, int num_slots, float scale, float* scratch,
                 float* out);

}  // namespace kvserve
