// The attention kernel for AVX2 + FMA + F16C (8 lanes); only called after a run-time CPU check
// (Avx2Kernels).
#define KVSERVE_ATTN_LANES 8
#include <cpuid.h>

#include "ops/attention_kernel.h"

namespace kvserve::attn {

KernelsForHeadDimFn Avx2Kernels() {
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  __builtin_cpu_init();
  // F16C by CPUID (leaf 1, ECX bit 29): Clang's __builtin_cpu_supports does not know "f16c".
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & (1u << 29)) != 0;
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !f16c) {
    return nullptr;
  }
  return &KernelsForHeadDim;
#else
  return nullptr;
#endif
}

}  // namespace kvserve::attn
