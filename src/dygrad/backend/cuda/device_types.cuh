// The CUDA kernels' element types (nvcc only): the compute type of a stored one (16-bit floats compute in float, as
// the CPU's kernels do), loads and stores converting between them, and the dispatch from elementwise.h's ElemType
// to the stored type. Shared by every .cu of the backend.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "dygrad/backend/cuda/elementwise.h"  // ElemType

namespace dg::cuda {

template <typename S> struct ComputeOf { using type = S; };
template <> struct ComputeOf<__nv_bfloat16> { using type = float; };
template <> struct ComputeOf<__half> { using type = float; };
template <typename S> using compute_t = typename ComputeOf<S>::type;

template <typename S>
__device__ __forceinline__ compute_t<S> load(const S* p) {
  if constexpr (std::is_same_v<S, __nv_bfloat16>) return __bfloat162float(*p);
  else if constexpr (std::is_same_v<S, __half>) return __half2float(*p);
  else return *p;
}
// v rounded to the stored type (round to nearest even for the 16-bit floats; bool: v != 0).
template <typename S, typename V>
__device__ __forceinline__ S to_storage(V v) {
  if constexpr (std::is_same_v<S, __nv_bfloat16>) return __float2bfloat16_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<S, __half>) return __float2half_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<S, bool>) return v != V(0);
  else return static_cast<S>(v);
}
template <typename S, typename V>
__device__ __forceinline__ void store(S* p, V v) {
  *p = to_storage<S>(v);
}

// f.template operator()<S>() for the stored type of t.
template <typename F>
void visit(ElemType t, F&& f) {
  switch (t) {
    case ElemType::Float32: return f.template operator()<float>();
    case ElemType::Float64: return f.template operator()<double>();
    case ElemType::BFloat16: return f.template operator()<__nv_bfloat16>();
    case ElemType::Float16: return f.template operator()<__half>();
    case ElemType::Int64: return f.template operator()<int64_t>();
    case ElemType::Int32: return f.template operator()<int32_t>();
    case ElemType::Int16: return f.template operator()<int16_t>();
    case ElemType::Int8: return f.template operator()<int8_t>();
    case ElemType::UInt8: return f.template operator()<uint8_t>();
    case ElemType::Bool: return f.template operator()<bool>();
  }
}
// The same for a floating ElemType (the host has refused the others: elem_type.h).
template <typename F>
void visit_floating(ElemType t, F&& f) {
  switch (t) {
    case ElemType::Float64: return f.template operator()<double>();
    case ElemType::BFloat16: return f.template operator()<__nv_bfloat16>();
    case ElemType::Float16: return f.template operator()<__half>();
    default: return f.template operator()<float>();
  }
}

}  // namespace dg::cuda
