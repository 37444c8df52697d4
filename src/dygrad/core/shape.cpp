// Broadcasting of shapes (core/shape.h).
#include "dygrad/core/shape.h"

#include <algorithm>
#include <climits>

#include "dygrad/core/error.h"

namespace dg {

int64_t checked_numel(const char* op, IntSpan shape) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t s : shape) {
    DG_CHECK(s >= 0, Value, "[", op, "] negative dimension ", s, " in shape ", shape);
    overflow = overflow || __builtin_mul_overflow(n, s, &n);
  }
  // As torch: the running product must not overflow even when a later size is 0 ((2**62, 2**40, 0) raises).
  DG_CHECK(!overflow, Runtime, "[", op, "] shape ", shape, ": numel: integer multiplication overflow");
  return n;
}

int64_t checked_nbytes(const char* op, IntSpan shape, int64_t numel, size_t itemsize) {
  int64_t bytes = 0;
  DG_CHECK(!__builtin_mul_overflow(numel, static_cast<int64_t>(itemsize), &bytes) && bytes <= kMaxTensorBytes, Runtime,
           "[", op, "] shape ", shape, " is too large: ", numel, " elements of ", static_cast<int64_t>(itemsize),
           " bytes exceed the ", kMaxTensorBytes, "-byte limit (storage size calculation overflowed)");
  return bytes;
}

void check_view_bounds(const char* op, IntSpan sizes, IntSpan strides, int64_t offset, int64_t storage_elements) {
  DG_CHECK(sizes.size() == strides.size(), Runtime, "[", op, "] internal error: sizes ", sizes, " and strides ",
           strides, " differ in length");
  if (checked_numel(op, sizes) == 0) return;
  int64_t lo = offset, hi = offset;
  bool overflow = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    int64_t reach = 0;
    overflow = overflow || __builtin_mul_overflow(sizes[i] - 1, strides[i], &reach);
    overflow = overflow || __builtin_add_overflow(reach < 0 ? lo : hi, reach, reach < 0 ? &lo : &hi);
  }
  DG_CHECK(!overflow && lo >= 0 && hi < storage_elements, Runtime, "[", op, "] a view of shape ", sizes,
           " with strides ", strides, " and offset ", offset, " reaches outside its storage of ", storage_elements,
           " elements", overflow ? " (integer overflow)" : "");
}

bool has_internal_overlap(IntSpan sizes, IntSpan strides) {
  for (size_t i = 0; i < sizes.size() && i < strides.size(); ++i)
    if (sizes[i] > 1 && strides[i] == 0) return true;
  return false;
}

Dims broadcast_shapes(const char* op, IntSpan a, IntSpan b) {
  size_t nd = std::max(a.size(), b.size());
  Dims out(nd, 1);
  for (size_t i = 0; i < nd; ++i) {
    int64_t da = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    int64_t db = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    DG_CHECK(da == db || da == 1 || db == 1, Value, "[", op, "] shapes ", a, " and ", b,
             " cannot be broadcast: size ", da, " vs ", db, " at dimension ", static_cast<int64_t>(i));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

BlasLayout blas_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  const int64_t min_row_ld = std::max<int64_t>(1, cols), min_col_ld = std::max<int64_t>(1, rows);
  if (cols == 1 || col_stride == 1) {  // row-major: element (r, c) at r * ld + c
    const int64_t ld = rows == 1 ? min_row_ld : row_stride;
    if (ld >= min_row_ld && ld <= INT_MAX) return {true, false, ld};
  }
  if (rows == 1 || row_stride == 1) {  // column-major: element (r, c) at r + c * ld
    const int64_t ld = cols == 1 ? min_col_ld : col_stride;
    if (ld >= min_col_ld && ld <= INT_MAX) return {true, true, ld};
  }
  return {};
}

}  // namespace dg
