// Shape and view ops. Views share storage and never copy (reshape copies only when strides forbid a
// view); each records a backward that maps the gradient back to the input's shape.
#pragma once
#include "dygrad/core/tensor.h"

namespace dg {

Tensor detach(const Tensor& a);  // same storage and view, no autograd history
// torch's view(dtype): the same bytes read as `dtype` (no autograd history, as torch's). A different element size
// scales the last dimension, which must have stride 1.
Tensor view_dtype(const Tensor& a, DType dtype);
// Every byte of a's storage as a 1-D uint8 tensor over the same memory (torch's untyped_storage()).
Tensor storage_bytes(const Tensor& a);
Tensor as_strided(const Tensor& a, IntSpan sizes, IntSpan strides, int64_t storage_offset);  // internal use
Tensor view(const Tensor& a, IntSpan shape);     // -1 infers one dim; raises if strides forbid a view
Tensor reshape(const Tensor& a, IntSpan shape);  // a view when possible, else a contiguous copy
Tensor expand(const Tensor& a, IntSpan shape);   // -1 keeps a dim; new leading dims allowed
Tensor broadcast_to(const Tensor& a, IntSpan shape);
Tensor permute(const Tensor& a, IntSpan dims);
Tensor transpose(const Tensor& a, int64_t dim0, int64_t dim1);
Tensor t(const Tensor& a);  // 2-D transpose (0-D and 1-D returned as is)
Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length);
// a[start:end:step] along dim (step > 0; start/end clamped as in Python slicing).
Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& a, int64_t dim, int64_t index);
Tensor squeeze(const Tensor& a);
Tensor squeeze(const Tensor& a, int64_t dim);
Tensor unsqueeze(const Tensor& a, int64_t dim);
Tensor flatten(const Tensor& a, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor unflatten(const Tensor& a, int64_t dim, IntSpan sizes);

// Infers a -1 in `shape` from numel, or raises naming `op`.
Dims infer_shape(const char* op, IntSpan shape, int64_t numel);

}  // namespace dg
