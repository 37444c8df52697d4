// CUDA kernels: sum, amax and amin over any dims (reduce.h), compiled for sm_90; not yet run on a GPU.
//
// Shapes: in viewed as [O outputs x R reduced] through two offset calculators (offset_calc.h); out [O] contiguous.
// One block of kThreads threads per output (a grid-stride loop over outputs): thread t folds r = t, t + kThreads, ...
// in order, then the block combines the kThreads partials in a fixed tree. The order is fixed by the shape, so the
// result does not change between runs; it is not the CPU's eight-lane order, so sums differ from the CPU's in the
// last bits (max and min are exact). Every kernel first checks the stream's error word (fault.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "dygrad/backend/cuda/device_types.cuh"
#include "dygrad/backend/cuda/reduce.h"
#include "dygrad/math/arithmetic.h"

namespace dg::cuda {

namespace {

constexpr int kThreads = 256;

template <typename S> struct Acc { using type = int64_t; };  // integers and bool
template <> struct Acc<float> { using type = float; };
template <> struct Acc<double> { using type = double; };
template <> struct Acc<__nv_bfloat16> { using type = float; };
template <> struct Acc<__half> { using type = float; };

template <typename S>
__device__ __forceinline__ typename Acc<S>::type load_acc(const S* p) {
  return static_cast<typename Acc<S>::type>(load(p));
}

template <typename A>
__device__ __forceinline__ A combine(ReduceOp op, A a, A b) {
  switch (op) {
    case ReduceOp::Max: return math::maximum(a, b);
    case ReduceOp::Min: return math::minimum(a, b);
    default: return a + b;
  }
}

// out: SOut [O], in: S (strided); one block per output
template <typename S, typename SOut>
__global__ void reduce_kernel(FaultContext fault, OffsetCalculator<1> kept, OffsetCalculator<1> reduced,
                              int64_t num_outputs, int64_t num_reduced, SOut* out, const S* in, ReduceOp op) {
  if (stream_faulted(fault)) return;
  using A = typename Acc<S>::type;
  __shared__ A partial[kThreads];
  for (int64_t o = blockIdx.x; o < num_outputs; o += gridDim.x) {
    int64_t base[1], at[1];
    kept.get(o, base);
    reduced.get(0, at);
    // Sum starts at 0; max and min at the first element (idempotent), so no identity is needed per type.
    A acc = op == ReduceOp::Sum ? A(0) : load_acc(in + base[0] + at[0]);
    for (int64_t r = threadIdx.x; r < num_reduced; r += kThreads) {
      reduced.get(r, at);
      acc = combine(op, acc, load_acc(in + base[0] + at[0]));
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int width = kThreads / 2; width > 0; width /= 2) {
      if (static_cast<int>(threadIdx.x) < width)
        partial[threadIdx.x] = combine(op, partial[threadIdx.x], partial[threadIdx.x + width]);
      __syncthreads();
    }
    if (threadIdx.x == 0) store(out + o, partial[0]);
    __syncthreads();  // partial is reused by the block's next output
  }
}

}  // namespace

void launch_reduce(ReduceOp op, ElemType out_type, ElemType in_type, const OffsetCalculator<1>& kept,
                   const OffsetCalculator<1>& reduced, int64_t num_outputs, int64_t num_reduced, void* out,
                   const void* in, const LaunchArgs& args) {
  if (num_outputs == 0) return;
  const unsigned blocks = static_cast<unsigned>(num_outputs < (int64_t{1} << 20) ? num_outputs : (int64_t{1} << 20));
  visit(in_type, [&]<typename S>() {
    auto run = [&]<typename SOut>() {
      reduce_kernel<S, SOut><<<blocks, kThreads, 0, args.stream>>>(args.fault, kept, reduced, num_outputs,
                                                                   num_reduced, static_cast<SOut*>(out),
                                                                   static_cast<const S*>(in), op);
    };
    if (out_type == in_type) run.template operator()<S>();
    else if (out_type == ElemType::Int64) run.template operator()<int64_t>();
    else if (out_type == ElemType::Float32) run.template operator()<float>();
    else run.template operator()<double>();
  });
}

}  // namespace dg::cuda
