// CPU kernels of advanced indexing (ops/indexing.cpp declares their OpDefs): gather by index tensors,
// put/accumulate by index tensors, nonzero.
#pragma once
#include "dygrad/ops/op_def.h"

namespace dg::cpu {

// Legend: k = number of index tensors (attrs.i[0]); A = the k indexed sizes; B = the broadcast index shape
// (every idx_j is expanded to B, int64); R = the remaining dims. attrs.ints = the original dim of each
// index (for messages).
//
// inputs (x [A..., R...], idx_0 .. idx_{k-1} [B...]); output out [B..., R...] (any strides):
//   out[b, r] = x[idx_0[b], ..., idx_{k-1}[b], r]     (negative indices count from the end)
void index_kernel(Task& task);

// inputs (x [A..., R...], idx_0 .. idx_{k-1} [B...], values [B..., R...]); output x (the same tensor);
// attrs.i[1] = accumulate:
//   x[idx_0[b], ..., idx_{k-1}[b], r] = values[b, r]    (or +=), for b in row-major order
// Threads split the destination rows (the A positions); each scans b in order, so repeated indices give
// the last write (or add in b order) whatever the thread count.
void index_put_kernel(Task& task);

// input a [N...] contiguous; output out [n, a.dim()] int64 (n = the number of nonzero elements):
//   out[m] = the multi-index of the m-th nonzero element of a in row-major order
void nonzero_kernel(Task& task);

}  // namespace dg::cpu
