// Memory layout of new outputs: elementwise results follow the layout of their inputs, as torch's
// TensorIterator does, so a chain of elementwise ops over a permuted view (q of a fused qkv projection,
// rotary embedding on x[..., ::2]) walks memory in order instead of jumping a row per element run.
#pragma once
#include <span>

#include "dygrad/core/tensor.h"

namespace dg {

// Strides of a dense tensor of `shape` whose dims are laid out in `order` (outermost first).
Dims dense_strides(IntSpan shape, std::span<const size_t> order);

// The output of an elementwise op of `shape` over `inputs` (broadcast to shape): contiguous when every input
// is contiguous; otherwise its dims are ordered by the inputs' strides, outermost first: the first input whose
// strides differ on two dims decides their order, broadcast (stride 0) and size-1 dims decide nothing, and
// undecided dims keep their logical order. Contiguous when that order is the logical one. On the inputs' device
// (they share one: the op checked it).
Tensor empty_elementwise(IntSpan shape, DType dtype, std::span<const Tensor> inputs);

// The output of a row-wise op (one that reads and writes whole rows of the last dim: rotary embedding, the
// attention gradients) laid out like `like`: empty_elementwise's order when it keeps the last dim innermost
// (the kernels want unit column stride), else contiguous.
Tensor empty_rows_like(const Tensor& like, DType dtype);

}  // namespace dg
