#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ops/attention_isa.h"
#include "ops/elementwise.h"
#include "ops/simd.h"
#include "util/check.h"

namespace kvserve {
namespace {

struct AttnTable {
  const char* isa = "generic";
  attn::KernelsForHeadDimFn kernels = nullptr;
};

AttnTable MakeTable(std::string_view isa) {
  if (isa != "generic") {
    if (isa != "avx2") {
      if (auto k = attn::Avx512Kernels()) return AttnTable{"avx512", k};
    }
    if (auto k = attn::Avx2Kernels()) return AttnTable{"avx2", k};
  }
  // Built for a target with AVX2 (attention_generic.cc), the portable kernel is the AVX2 one and
  // is named so: "generic" is then not a kernel of its own (SetAttentionIsa refuses it).
  const attn::KernelsForHeadDimFn generic = attn::GenericKernels();
  return AttnTable{generic == attn::Avx2Kernels() ? "avx2" : "generic", generic};
}

AttnTable& Table() {
  static AttnTable table = [] {
    const char* env = std::getenv("KVSERVE_ISA");
    return MakeTable(env != nullptr ? env : "best");
  }();
  return table;
}

}  // namespace

std::string_view AttentionIsa() { return Table().isa; }

bool SetAttentionIsa(std::string_view isa) {
  if (isa != "generic" && isa != "avx2" && isa != "avx512" && isa != "best") return false;
  AttnTable t = MakeTable(isa);
  if (isa != "best" && isa != t.isa) return false;
  Table() = t;
  return true;
}

size_t AttentionScratchFloats(int num_slots, int group, int head_dim) {
  return static_cast<size_t>(num_slots) * group + head_dim;
}

void AttendTile(const AttentionTile& tile, const PagedKvLayerView& kv, float scale) {
  const attn::TileKernels k = Table().kernels(kv.head_dim);
  if (k.all != nullptr) {
    k.all(tile, kv, scale);
    return;
  }
  // Head dims the fast kernel does not cover: the reference, token by token.
  thread_local std::vector<float> scratch;
  const int d = kv.head_dim;
  for (int j = 0; j < tile.num_tokens; ++j) {
    const int n = tile.first_slots + j;
    const size_t need = AttentionScratchFloats(n, tile.group, d);
    if (scratch.size() < need) scratch.resize(need);
    AttendGroupReference(tile.q + j * tile.q_stride, tile.group, tile.kv_head, kv, tile.block_table,
                         n, scale, scratch.data(), tile.out + j * tile.out_stride,
                         AttentionFirstSlot(n, tile.window), tile.softcap, tile.sinks);
  }
}

void AttendTilePartition(const AttentionTile& tile, const PagedKvLayerView& kv, float scale,
                         int partition, float* partials) {
  const attn::TileKernels k = Table().kernels(kv.head_dim);
  KV_CHECK(k.partition != nullptr);
  k.partition(tile, kv, scale, partition, partials);
}

bool AttentionCanSplit(int head_dim) { return Table().kernels(head_dim).partition != nullptr; }

void MergeAttentionPartials(const float* partials, int num_partitions, int64_t stride, int head_dim,
                            float* out, float* lse, float sink) {
  const attn::TileKernels k = Table().kernels(head_dim);
  KV_CHECK(k.merge != nullptr);
  k.merge(partials, num_partitions, stride, out, lse, sink);
}

void AccumulateAttentionScores(const AttentionTile& tile, const PagedKvLayerView& kv, float scale,
                               int first_token, int64_t* acc) {
  const attn::TileKernels k = Table().kernels(kv.head_dim);
  if (k.scores != nullptr) {
    KV_CHECK(tile.lse != nullptr);
    k.scores(tile, kv, scale, first_token, acc);
    return;
  }
  // Head dims without a fast kernel: the reference's probabilities, token by token.
  thread_local std::vector<float> scratch;
  for (int j = first_token; j < tile.num_tokens; ++j) {
    const int n = tile.first_slots + j;
    const size_t need = AttentionScratchFloats(n, tile.group, kv.head_dim);
    if (scratch.size() < need) scratch.resize(need);
    const int first = AttentionFirstSlot(n, tile.window);
    ReferenceProbabilities(tile.q + j * tile.q_stride, tile.group, tile.kv_head, kv,
                           tile.block_table, n, scale, scratch.data(), first, tile.softcap,
                           tile.sinks);
    for (int s = first; s < n; ++s) {
      int64_t sum = 0;
      for (int g = 0; g < tile.group; ++g) {
        sum += static_cast<int32_t>(scratch[static_cast<size_t>(g) * n + s] *
                                    kAttentionScoreFixedOne);
      }
      if (sum != 0) __atomic_fetch_add(acc + s, sum, __ATOMIC_RELAXED);
    }
  }
}

void AttendGroup(const float* q, int group, int kv_head, const PagedKvLayerView& kv,
                 std::span<const BlockId> block_table, int num_slots, float scale, float* /*scratch*/,
                 float* out) {
  AttentionTile t;
  t.q = q;
  t.out = out;
  t.group = group;
  t.kv_head = kv_head;
  t.first_slots = num_slots;
  t.block_table = block_table;
  AttendTile(t, kv, scale);
}

void ReferenceProbabilities(const float* q, int group, int kv_head, const PagedKvLayerView& kv,
                            std::span<const BlockId> block_table, int num_slots, float scale,
                            float* scratch, int first_slot, float softcap, const float* sinks) {
  const int d = kv.head_dim;
  float* scores = scratch;                                        // [group, num_slots]
  float* vec = scratch + static_cast<size_t>(group) * num_slots;  // [head_dim]
  for (int g = 0; g < group; ++g) {
    std::fill_n(scores + static_cast<size_t>(g) * num_slots, first_slot, 0.f);
  }
  for (int s = first_slot; s < num_slots; ++s) {
    const BlockId b = block_table[s / kv.block_size];
    const uint8_t* k = kv.KSlot(b, kv_head, s % kv.block_size);
    const float* kf;
    if (kv.k_dtype == KvDtype::kF32) {
      kf = reinterpret_cast<const float*>(k);
    } else {
      LoadKvVector(kv.k_dtype, k, d, vec);
      kf = vec;
    }
    for (int g = 0; g < group; ++g) {
      float x = simd::Dot(q + g * d, kf, d) * scale;
      if (softcap > 0.f) x = softcap * std::tanh(x / softcap);
      scores[static_cast<size_t>(g) * num_slots + s] = x;
    }
  }
  for (int g = 0; g < group; ++g) {
    float* row = scores + static_cast<size_t>(g) * num_slots + first_slot;
    const int n = num_slots - first_slot;
    if (sinks == nullptr) {
      Softmax(row, n);
      continue;
    }
    // The sink is one more logit in the softmax whose probability goes nowhere.
    const float mx = std::max(*std::max_element(row, row + n), sinks[g]);
    float sum = std::exp(sinks[g] - mx);
    for (int s = 0; s < n; ++s) sum += (row[s] = std::exp(row[s] - mx));
    for (int s = 0; s < n; ++s) row[s] /= sum;
  }
}

void AttendGroupReference(const float* q, int group, int kv_head, const PagedKvLayerView& kv,
                          std::span<const BlockId> block_table, int num_slots, float scale,
                          float* scratch, float* out, int first_slot, float softcap,
                          const float* sinks) {
  const int d = kv.head_dim;
  ReferenceProbabilities(q, group, kv_head, kv, block_table, num_slots, scale, scratch, first_slot,
                         softcap, sinks);
  const float* scores = scratch;                                        // [group, num_slots]
  float* vec = scratch + static_cast<size_t>(group) * num_slots;  // [head_dim]
  std::memset(out, 0, sizeof(float) * group * d);
  for (int s = first_slot; s < num_slots; ++s) {
    const BlockId b = block_table[s / kv.block_size];
    const uint8_t* v = kv.VSlot(b, kv_head, s % kv.block_size);
    const float* vf;
    if (kv.v_dtype == KvDtype::kF32) {
      vf = reinterpret_cast<const float*>(v);
    } else {
      LoadKvVector(kv.v_dtype, v, d, vec);
      vf = vec;
    }
    for (int g = 0; g < group; ++g) {
      simd::Axpy(scores[static_cast<size_t>(g) * num_slots + s], vf, out + g * d, d);
    }
  }
}

}  // namespace kvserve
