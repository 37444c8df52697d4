// The CUDA index kernels' launch interface (index.cu): gathers whose indices are validated on the device through the
// error word (fault.h), in plain types (index_ops.cpp turns Tasks into these calls).
#pragma once
#include <cstdint>

#include "dygrad/backend/cuda/elementwise.h"  // LaunchArgs
#include "dygrad/backend/cuda/offset_calc.h"

namespace dg::cuda {

// out[p, j] = a[p, index[p, j]] over index's shape (operands: out, a with its dim's stride 0, index); elements of
// `width` bytes (1, 2, 4, 8 or 16: copies move bits), index int32 or int64. An index outside [0, size) records
// `code` (kFaultIndexSelect or kFaultGather) with dim and size, and its element is not written.
void launch_gather(int width, bool index_int32, const OffsetCalculator<3>& calc, int64_t n, void* out, const void* a,
                   const void* index, int64_t a_dim_stride, int64_t size, int dim, int32_t code,
                   const LaunchArgs& args);

// out[i, c] = weight[index[i], c]: weight [V, C] with strides (rs, cs), index [I] contiguous int32 or int64, out
// [I, C] contiguous. An index outside [0, V) records kFaultEmbedding.
void launch_embedding(int width, bool index_int32, int64_t rows, int64_t cols, int64_t row_stride,
                      int64_t col_stride, int64_t count, void* out, const void* weight, const void* index,
                      const LaunchArgs& args);

}  // namespace dg::cuda
