// CPU kernels of the comparison and selection family: comparisons, logical ops, where, masked_fill and
// clamp (ops/compare.cpp declares their OpDefs). Inputs arrive promoted to one dtype where the op needs it.
#pragma once
#include "dygrad/ops/op_def.h"

namespace dg::cpu {
// inputs (a, b) of one dtype, output bool: out = a <op> b
void eq_kernel(Task& task);
void ne_kernel(Task& task);
void lt_kernel(Task& task);
void le_kernel(Task& task);
void gt_kernel(Task& task);
void ge_kernel(Task& task);
// input (a), attrs.scalars[0] = s, output bool: out = a <op> s
void eq_scalar_kernel(Task& task);
void ne_scalar_kernel(Task& task);
void lt_scalar_kernel(Task& task);
void le_scalar_kernel(Task& task);
void gt_scalar_kernel(Task& task);
void ge_scalar_kernel(Task& task);
// input (a) of any dtype, output bool: out = (a == 0)
void logical_not_kernel(Task& task);
// inputs (a, b) bool, output bool
void logical_and_kernel(Task& task);
void logical_or_kernel(Task& task);
// inputs (cond bool, a, b), a and b of the output's dtype: out = cond ? a : b
void where_kernel(Task& task);
// inputs (cond bool, a), attrs.scalars[0] = s; i[0] = 0: out = cond ? a : s, i[0] = 1: out = cond ? s : a
void where_scalar_kernel(Task& task);
// inputs (a, mask bool), attrs.scalars[0] = value: out = mask ? value : a
void masked_fill_kernel(Task& task);
// input (x), attrs.scalars[0] = min, scalars[1] = max, i[0] bit 0: has min, bit 1: has max
void clamp_scalar_kernel(Task& task);
// inputs (x, bounds...) of the output's dtype, attrs.i[0] as clamp_scalar says which bounds are present
// (inputs (x, min, max), (x, min) or (x, max)): out = min(max(x, min), max), nan in any operand gives nan
void clamp_tensor_kernel(Task& task);
}  // namespace dg::cpu
