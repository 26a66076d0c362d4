// The attention kernel for AVX-512 (16 lanes, F16C conversions); only called after a run-time
// CPU check (Avx512Kernels).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define KVSERVE_ATTN_LANES 16
#include "ops/attention_kernel.h"

namespace kvserve::attn {

KernelsForHeadDimFn Avx512Kernels() {
#if defined(__AVX512F__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vl") ||
      !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512bw")) {
    return nullptr;
  }
  return &KernelsForHeadDim;
#else
  return nullptr;
#endif
}

}  // namespace kvserve::attn
