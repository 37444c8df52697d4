// CPU kernels of the fused SwiGLU (ops/fused.cpp declares their OpDefs).
#pragma once
#include "dygrad/ops/op_def.h"

namespace dg::cpu {
// inputs (gate[N..., F], up[N..., F]) any strides, same shape; output y[N..., F]: y = silu(gate) * up.
void swiglu_kernel(Task& task);
// inputs (grad_y, gate, up); outputs (grad_gate, grad_up), any strides (views of one buffer are fine).
void swiglu_backward_kernel(Task& task);
}  // namespace dg::cpu
