// torch's in-place metadata ops: t_, transpose_, squeeze_, unsqueeze_, as_strided_ (a tensor takes the sizes,
// strides and offset of a view of itself), detach_ and resize_. They change the TensorImpl every holder of the
// tensor shares; docs/tensor.md, "Metadata changed in place", says why that is safe for queued Tasks and views.
#pragma once
#include <optional>

#include "dygrad/core/tensor.h"

namespace dg {

// `t` takes the metadata of `view`, a view of `t` the out-of-place op (`transpose(t, 0, 1)`) has just made, and, when
// that op recorded a Node, its history: t.grad_fn becomes the view op's node, whose input is t's old history (torch's
// TransposeBackward1 of transpose_). Raises as torch's in-place rules do (a leaf that requires grad, a view of one,
// check_inplace) before anything changes; bumps the version counter.
void assign_view_in_place(const char* op, const Tensor& t, const Tensor& view);

void t_(const Tensor& t);
void transpose_(const Tensor& t, int64_t dim0, int64_t dim1);
void unsqueeze_(const Tensor& t, int64_t dim);
// as_strided_(size, stride, storage_offset=None): None keeps t's offset. No backward: raises NotImplementedError
// when autograd would record it (a non-leaf that requires grad under grad mode).
void as_strided_(const Tensor& t, IntSpan sizes, IntSpan strides, std::optional<int64_t> storage_offset);
// No history left: requires_grad False, no grad_fn; .grad and the version are kept (torch's). Views raise.
void detach_(const Tensor& t);
// Contiguous sizes `shape` at t's offset; the storage grows when it is too small (every view of it sees the new
// memory, as torch's resize_). Raises for a tensor that requires grad and for memory that cannot grow (NumPy's,
// pinned, a device's).
void resize_(const Tensor& t, IntSpan shape);

}  // namespace dg
