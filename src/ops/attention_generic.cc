// The attention kernel through portable 8-lane vectors (whatever the build's target flags allow).
#define KVSERVE_ATTN_LANES 8
#include "ops/attention_kernel.h"

namespace kvserve::attn {

KernelsForHeadDimFn GenericKernels() { return &KernelsForHeadDim; }

}  // namespace kvserve::attn
