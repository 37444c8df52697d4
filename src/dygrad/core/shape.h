// Shape arithmetic shared by every layer: broadcasting (NumPy's rule, as torch.broadcast_shapes).
#pragma once
#include "dygrad/core/small_vector.h"

namespace dg {

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
