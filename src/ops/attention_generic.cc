// The attention kernel through portable 8-lane vectors (whatever the build's target flags allow).
//
// Compiled for a target that has AVX2, FMA and F16C (a -march=native build on every x86 CPU
// kvserve runs on), this file would be attention_avx2.cc again: the same source, lane count,
// macros and -ffp-contract=off, so the same machine code. It then hands out that kernel instead
// of compiling a second copy (the largest file of the build, in every build).
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "ops/attention_isa.h"

namespace kvserve::attn {

KernelsForHeadDimFn GenericKernels() { return Avx2Kernels(); }

}  // namespace kvserve::attn
#else
#define KVSERVE_ATTN_LANES 8
#include "ops/attention_kernel.h"

namespace kvserve::attn {

KernelsForHeadDimFn GenericKernels() { return &KernelsForHeadDim; }

}  // namespace kvserve::attn
#endif
