// Shape arithmetic shared by every layer: size validation with overflow checks (every factory and view goes
// through it, docs/tensor.md "Sizes"), broadcasting (NumPy's rule, as torch.broadcast_shapes).
#pragma once
#include "dygrad/core/small_vector.h"

namespace dg {

// The element count of `shape`, validated: every size is >= 0 (ValueError "[op] negative dimension -7 in shape
// (-7,)") and the product fits in int64 (RuntimeError "[op] shape (..): integer multiplication overflow").
int64_t checked_numel(const char* op, IntSpan shape);
// The bytes of a dense buffer of `numel` elements, checked against int64 overflow and kMaxTensorBytes
// (RuntimeError "[op] shape (..) is too large").
constexpr int64_t kMaxTensorBytes = int64_t{1} << 52;  // 4 PiB: far above any real allocation, below overflow
int64_t checked_nbytes(const char* op, IntSpan shape, int64_t numel, size_t itemsize);
// A view's metadata is valid over a storage of `storage_elements` elements: sizes >= 0, the element count
// fits in int64, offset >= 0, and every element the view reaches (offset + sum of (size-1)*stride, computed
// without overflow) lies inside the storage. Raises naming `op`. Empty views reach nothing.
void check_view_bounds(const char* op, IntSpan sizes, IntSpan strides, int64_t offset, int64_t storage_elements);

// True when two elements of a tensor with these sizes and strides are one memory location for sure (a size
// > 1 dimension of stride 0, as expand makes): torch's has_internal_overlap YES case. In-place writes into
// such a tensor raise (runtime/stream.cpp).
bool has_internal_overlap(IntSpan sizes, IntSpan strides);

// Broadcast shape of two shapes, or raises "[op] shapes (..) and (..) cannot be broadcast".
Dims broadcast_shapes(const char* op, IntSpan a, IntSpan b);

// How BLAS reads a [rows, cols] matrix with element strides (row_stride, col_stride) in place: row-major
// (strides (ld, 1), passed as NoTrans) or column-major (strides (1, ld), passed as Trans). The stride of a
// size-1 dim does not matter. ok is false when neither holds (zero or general strides) or ld overflows int.
// The op layer copies an operand that fails it; every GEMM backend reads operands this way.
struct BlasLayout {
  bool ok = false;
  bool transposed = false;  // column-major: BLAS sees the transpose of a row-major [cols, rows] matrix
  int64_t ld = 0;           // leading dimension
};
BlasLayout blas_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride);

}  // namespace dg
