// CPU kernel of the fused rotary position embedding (ops/fused.cpp declares its OpDefs).
#pragma once
#include "dygrad/ops/op_def.h"

namespace dg::cpu {
// inputs (x[A0, A1, A2, D] any strides, cos[T, D/2], sin[T, D/2]), output y[A0, A1, A2, D] contiguous.
// attrs.i[0]: 0 interleaved pairs (2i, 2i+1), 1 rotate-half pairs (i, i + D/2); attrs.i[1]: the dim of x
// holding the position t (1 or 2); attrs.i[2]: 1 rotates by -angle (the backward: the inverse rotation).
void rope_kernel(Task& task);
}  // namespace dg::cpu
