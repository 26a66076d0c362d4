// Per-ISA entry points of the attention kernel (attention_kernel.h compiled per instruction set).
// Internal to ops/.
#pragma once

#include <cstdint>

#include "ops/attention.h"

namespace kvserve::attn {

struct TileKernels {
  void (*all)(const AttentionTile&, const PagedKvLayerView&, float) = nullptr;
  void (*partition)(const AttentionTile&, const PagedKvLayerView&, float, int, float*) = nullptr;
  void (*merge)(const float*, int, int64_t, float*, float*, float) = nullptr;
  void (*scores)(const AttentionTile&, const PagedKvLayerView&, float, int, int64_t*) = nullptr;
};

// Kernels for a head dim (all null when the ISA's kernel does not cover it).
using KernelsForHeadDimFn = TileKernels (*)(int head_dim);

KernelsForHeadDimFn GenericKernels();
// Null when the CPU (or the compiler) lacks the instruction set.
KernelsForHeadDimFn Avx512Kernels();
KernelsForHeadDimFn Avx2Kernels();

}  // namespace kvserve::attn
