// A tensor [..., N] seen as rows of its last dim, and the row loads that gather one into a contiguous buffer of
// the compute type: the access pattern of the fused row kernels (RMSNorm, rotary embedding, SwiGLU).
#pragma once
#include <cstdint>

#include "dygrad/backend/cpu/reduce.h"

namespace dg::cpu {

// Row r starts at row_offset(r) (elements), its elements step by `column_stride`. Any strides, broadcast
// (stride 0) included.
struct RowView {
  ReduceLayout layout;
  int64_t rows, columns, column_stride;
  explicit RowView(const Tensor& t)
      : layout(t, Dims{t.dim() - 1}), rows(layout.num_outputs), columns(t.shape()[t.dim() - 1]),
        column_stride(columns == 1 ? 1 : t.strides()[t.dim() - 1]) {}
  int64_t row_offset(int64_t r) const { return layout.output_offset(r); }
};

// Copies n elements with stride `step` into a contiguous buffer, converting to the compute type.
template <typename C, typename T>
inline void load_row(C* dst, const T* src, int64_t n, int64_t step) {
  if (step == 1) for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<C>(src[i]);
  else for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<C>(src[i * step]);
}

}  // namespace dg::cpu
