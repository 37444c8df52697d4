// The host side of the CUDA kernels' element types: a Task operand's dtype as elementwise.h's ElemType, or the
// NotImplemented error naming the op and the dtype (every *_ops.cpp of the backend).
#pragma once
#include "dygrad/backend/cuda/elementwise.h"
#include "dygrad/core/error.h"
#include "dygrad/runtime/op_def.h"

namespace dg::cuda {

// `floating_only`: the kernel takes the four floating dtypes only.
inline ElemType elem_type(const Task& task, DType d, bool floating_only = false) {
  switch (d) {
    case DType::Float32: return ElemType::Float32;
    case DType::Float64: return ElemType::Float64;
    case DType::BFloat16: return ElemType::BFloat16;
    case DType::Float16: return ElemType::Float16;
    case DType::Int64: if (!floating_only) return ElemType::Int64; break;
    case DType::Int32: if (!floating_only) return ElemType::Int32; break;
    case DType::Int16: if (!floating_only) return ElemType::Int16; break;
    case DType::Int8: if (!floating_only) return ElemType::Int8; break;
    case DType::UInt8: if (!floating_only) return ElemType::UInt8; break;
    case DType::Bool: if (!floating_only) return ElemType::Bool; break;
    default: break;
  }
  fail(ErrorKind::NotImplemented, "[", task.op->name, "] has no CUDA kernel for dtype ", dtype_name(d));
}

}  // namespace dg::cuda
