// complex64 / complex128 ops (docs/dtypes.md, "Complex"): the views between a complex tensor and its float pairs,
// the constructors, and the complex path of the elementwise builder, which composes each op of real ops on
// view_as_real so that kernels stay real and autograd follows torch's convention with no formula of its own.
#pragma once
#include <span>

#include "dygrad/core/tensor.h"
#include "dygrad/runtime/op_def.h"
#include "dygrad/runtime/attrs.h"

namespace dg {

// z [N...] complex -> [N..., 2] float (a view: strides doubled, the pair's stride 1).
Tensor view_as_real(const Tensor& z);
// x [N..., 2] float32/float64, pair stride 1, other strides and the offset even -> [N...] complex (a view).
Tensor view_as_complex(const Tensor& x);
// The real and imaginary parts as views of z's storage (writes go through); real of a real tensor is itself,
// imag of one raises.
Tensor real(const Tensor& z);
Tensor imag(const Tensor& z);
// torch.complex(real, imag) and torch.polar(abs, angle): float32 or float64 operands of one dtype, broadcast.
Tensor complex(const Tensor& re, const Tensor& im);
Tensor polar(const Tensor& abs, const Tensor& angle);
// The conjugate, materialised (torch returns a lazy view: docs/dtypes.md); a real tensor is returned as is.
Tensor conj(const Tensor& z);
// atan2(imag, real): float for complex; 0 or pi for real tensors (torch.angle).
Tensor angle(const Tensor& z);

// The elementwise builder's complex path: `op` (what the user called is `name`) on operands already cast to one
// complex dtype. Raises NotImplemented "[name] not implemented for 'ComplexFloat'" for ops without a composition.
Tensor complex_elementwise(const OpDef& op, const char* name, std::span<const Tensor> operands, const Attrs& attrs);
// sum and mean of a complex tensor over dims (the real sums of both parts).
Tensor complex_sum(const Tensor& z, IntSpan dims, bool keepdim, bool mean);

}  // namespace dg
