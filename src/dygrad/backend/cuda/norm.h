// The CUDA RMSNorm kernel's launch interface (norm.cu), in plain types (norm_ops.cpp turns Tasks into these calls).
#pragma once
#include <cstdint>

#include "dygrad/backend/cuda/elementwise.h"  // ElemType, LaunchArgs
#include "dygrad/backend/cuda/offset_calc.h"

namespace dg::cuda {

// y [R, C] contiguous = x * rstd * w (w null: x * rstd), rstd [R] in the compute type (float; double for float64)
// = 1 / sqrt(mean(x^2) + eps): `rows` gives each row's first element of x, x_col_stride its column stride, w [C]
// with stride w_stride. type: a floating ElemType.
// apply: rstd is given (an input, rms_norm_apply: the rematerialized output) and only y is written.
void launch_rms_norm(ElemType type, const OffsetCalculator<1>& rows, int64_t num_rows, int64_t cols,
                     int64_t x_col_stride, const void* x, const void* w, int64_t w_stride, double eps, void* y,
                     void* rstd, bool apply, const LaunchArgs& args);

}  // namespace dg::cuda
