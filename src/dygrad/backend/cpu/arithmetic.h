// CPU kernels of the arithmetic and copy family (ops/arithmetic.cpp declares their OpDefs).
#pragma once
#include "dygrad/ops/op_def.h"

namespace dg::cpu {
// inputs (a, b) same dtype as output; attrs.scalars[0] = alpha: out = a + alpha * b
void add_kernel(Task& task);
void mul_kernel(Task& task);
void div_kernel(Task& task);
// input (a); attrs.scalars[0] = s
void add_scalar_kernel(Task& task);   // a + s
void mul_scalar_kernel(Task& task);   // a * s
void div_scalar_kernel(Task& task);   // a / s
void rsub_scalar_kernel(Task& task);  // s - a
void rdiv_scalar_kernel(Task& task);  // s / a
void neg_kernel(Task& task);
// input (src) of any dtype, output of any dtype and shape src broadcasts to: out = cast(src)
void copy_kernel(Task& task);
// no inputs; attrs.scalars[0] = value
void fill_kernel(Task& task);
}  // namespace dg::cpu
