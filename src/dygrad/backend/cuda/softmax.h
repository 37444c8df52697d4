// The CUDA softmax kernels' launch interface (softmax.cu), in plain types (softmax_ops.cpp turns Tasks into calls).
#pragma once
#include <cstdint>

#include "dygrad/backend/cuda/elementwise.h"  // ElemType, LaunchArgs
#include "dygrad/backend/cuda/offset_calc.h"

namespace dg::cuda {

// y = softmax(x) (or log_softmax when `log`) along one dim of size D: `rows` gives each row's first element in x
// (operand 0) and y (operand 1), x_stride and y_stride the dim's strides. type: a floating ElemType.
void launch_softmax(bool log, ElemType type, const OffsetCalculator<2>& rows, int64_t num_rows, int64_t D,
                    int64_t x_stride, int64_t y_stride, void* y, const void* x, const LaunchArgs& args);

}  // namespace dg::cuda
