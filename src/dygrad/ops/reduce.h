// Reductions over any set of dims, with keepdim. An empty dim list reduces over all dims. Reduction order
// is fixed by the shape alone, so results are bitwise identical across runs and thread counts.
#pragma once
#include "dygrad/core/tensor.h"

namespace dg {

// Integer and bool inputs sum to int64 (torch.sum). `dtype` casts the input before summing.
Tensor sum(const Tensor& a, IntSpan dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, IntSpan dims = {}, bool keepdim = false);

// The list of dims a reduction covers: sorted, wrapped, checked for repeats; all dims when empty.
Dims reduction_dims(const char* op, IntSpan dims, int64_t ndim);
// The output shape of reducing `shape` over `dims` (as returned by reduction_dims).
Dims reduced_shape(IntSpan shape, IntSpan dims, bool keepdim);

}  // namespace dg
