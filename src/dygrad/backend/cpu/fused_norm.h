// CPU kernels of the fused RMSNorm (ops/fused.cpp declares their OpDefs).
#pragma once
#include "dygrad/ops/op_def.h"

namespace dg::cpu {
// inputs (x[R..., C], weight[C] when attrs.i[0]); attrs.scalars[0] = eps.
// outputs (y[R..., C] contiguous, rstd[R] in the compute dtype): y = x * rstd * weight,
// rstd = 1 / sqrt(mean(x^2, -1) + eps).
void rms_norm_kernel(Task& task);
// inputs (grad_y[R..., C], x[R..., C], rstd[R], weight[C] when attrs.i[0]);
// outputs (grad_x[R..., C] when attrs.i[1], then grad_weight[C] when attrs.i[2]).
void rms_norm_backward_kernel(Task& task);
}  // namespace dg::cpu
