// The CUDA reductions' launch interface (reduce.cu), in plain types (reduce_ops.cpp turns Tasks into these calls).
#pragma once
#include <cstdint>

#include "dygrad/backend/cuda/elementwise.h"  // ElemType, LaunchArgs
#include "dygrad/backend/cuda/offset_calc.h"

namespace dg::cuda {

enum class ReduceOp : int32_t { Sum, Max, Min };

// out[o] (contiguous, num_outputs) = op over r of in[kept(o) + reduced(r)]: `kept` walks the input's kept dims and
// `reduced` its reduced dims, both row-major (the CPU's ReduceLayout order). Sum accumulates in float for 16-bit and
// 32-bit floats, double for float64, int64 for integers and bool, and stores in out_type (in_type, Int64, Float32
// or Float64); Max and Min propagate nan and store in in_type. num_reduced > 0.
void launch_reduce(ReduceOp op, ElemType out_type, ElemType in_type, const OffsetCalculator<1>& kept,
                   const OffsetCalculator<1>& reduced, int64_t num_outputs, int64_t num_reduced, void* out,
                   const void* in, const LaunchArgs& args);

}  // namespace dg::cuda
