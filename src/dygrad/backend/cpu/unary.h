// CPU kernels of the elementwise math family: unary functions, pow, maximum/minimum (ops/math.cpp
// declares their OpDefs). Inputs arrive in the output's dtype (the op layer promotes and casts).
#pragma once
#include "dygrad/ops/op_def.h"

namespace dg::cpu {
// input (x), output out of x's floating dtype (abs and relu also take integers): out = f(x)
void exp_kernel(Task& task);
void log_kernel(Task& task);
void sqrt_kernel(Task& task);
void rsqrt_kernel(Task& task);
void abs_kernel(Task& task);
void sin_kernel(Task& task);
void cos_kernel(Task& task);
void tanh_kernel(Task& task);
void sigmoid_kernel(Task& task);
void silu_kernel(Task& task);
void relu_kernel(Task& task);
// attrs.i[0] = 0: x * Phi(x) (approximate="none"); 1: the tanh approximation
void gelu_kernel(Task& task);
// inputs (grad, x), attrs.i[0] as gelu: out = grad * gelu'(x)
void gelu_backward_kernel(Task& task);
// Fused first-order backward kernels (used when backward records no graph): inputs (grad, v)
void sigmoid_backward_kernel(Task& task);  // v = y = sigmoid(x): grad * y (1 - y)
void tanh_backward_kernel(Task& task);     // v = y = tanh(x): grad * (1 - y^2)
void silu_backward_kernel(Task& task);     // v = x: grad * s (1 + x (1 - s)), s = sigmoid(x)
void relu_backward_kernel(Task& task);     // v = y = relu(x): y > 0 ? grad : 0
// inputs (base, exponent): out = base ^ exponent
void pow_kernel(Task& task);
// input (base), attrs.scalars[0] = exponent (integral dtypes: a non-negative integer)
void pow_scalar_kernel(Task& task);
// input (exponent), attrs.scalars[0] = base: out = base ^ exponent
void rpow_scalar_kernel(Task& task);
// inputs (a, b): nan-propagating elementwise max / min
void maximum_kernel(Task& task);
void minimum_kernel(Task& task);
}  // namespace dg::cpu
