// Broadcasting of shapes (core/shape.h).
#include "dygrad/core/shape.h"

#include <algorithm>
#include <climits>

#include "dygrad/core/error.h"

namespace dg {

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
