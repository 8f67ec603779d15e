// gradsync/core/reduce.hpp — the local reduction kernels every collective algorithm uses.
//
// Half types are widened to fp32, added, and rounded once per call (per pairwise
// reduction), as NCCL does for fp16/bf16 sums. Vectorised for AVX2/F16C where present.
#pragma once

#include <cstddef>

#include "core/dtype.hpp"

namespace gradsync {

// acc[i] = acc[i] + in[i]
void reduce_into(void* acc, const void* in, std::size_t count, DType t);
// out[i] = a[i] + b[i]   (out may alias a or b)
void reduce_out(void* out, const void* a, const void* b, std::size_t count, DType t);
// buf[i] *= factor   (used to finish RedOp::Avg: sum, then one scale)
void scale_inplace(void* buf, std::size_t count, DType t, float factor);

}  // namespace gradsync
