// CPU kernel of the fused multi-tensor AdamW step (ops/fused.cpp declares its OpDef).
#pragma once
#include "dygrad/ops/op_def.h"

namespace dg::cpu {
// inputs (grad_0 .. grad_{P-1}); outputs (param_0 .. param_{P-1}, exp_avg_0 .., exp_avg_sq_0 .., step_0 ..),
// all contiguous, updated in place; step_i is a 0-d float32 count incremented before the update.
// attrs.scalars = (lr, beta1, beta2, eps); attrs.i[0] = 1 for AdamW's decoupled decay, 0 for Adam's L2 decay
// (g + wd p); attrs.i[1] = weight_decay as the bits of a double.
void adamw_kernel(Task& task);
}  // namespace dg::cpu
