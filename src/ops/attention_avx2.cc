// The attention kernel for AVX2 + FMA + F16C (8 lanes); only called after a run-time CPU check
// (Avx2Kernels).
#define KVSERVE_ATTN_LANES 8
#include "ops/attention_kernel.h"

namespace kvserve::attn {

KernelsForHeadDimFn Avx2Kernels() {
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
      !__builtin_cpu_supports("f16c")) {
    return nullptr;
  }
  return &KernelsForHeadDim;
#else
  return nullptr;
#endif
}

}  // namespace kvserve::attn
