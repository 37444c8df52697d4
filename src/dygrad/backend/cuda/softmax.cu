// CUDA kernels: softmax and log_softmax over one dim (softmax_ops.cpp), compiled for sm_90; not yet run on a GPU.
//
// Notation: D = size of the softmax dim, m = row maximum, s = sum over the row of exp(x - m).
// Shapes: x [..., D, ...] (any strides), y of x's shape: R rows, one block each (a grid-stride loop over rows).
// Three passes over the row, each a strided share per thread folded in order and a fixed tree over the block:
// m, then s, then y = exp(x - m) / s (softmax) or x - m - log(s) (log_softmax). The element math is the CPU's
// (math::exp_nonpositive, math::log); 16-bit floats compute in float. The block order differs from the CPU's per-row
// order, so s (and y) may differ from the CPU's in the last bits. Every kernel first checks the stream's error word.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "dygrad/backend/cuda/device_types.cuh"
#include "dygrad/backend/cuda/softmax.h"
#include "dygrad/math/arithmetic.h"
#include "dygrad/math/elementary.h"

namespace dg::cuda {

namespace {

constexpr int kThreads = 256;

// The block's partials combined in a fixed tree; every thread gets the result.
template <typename C, bool kMax>
__device__ C block_combine(C* partial, C v) {
  partial[threadIdx.x] = v;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width) {
      const C a = partial[threadIdx.x], b = partial[threadIdx.x + width];
      partial[threadIdx.x] = kMax ? math::maximum(a, b) : a + b;
    }
    __syncthreads();
  }
  const C result = partial[0];
  __syncthreads();  // partial is reused by the next combine
  return result;
}

// x: S (rows at offsets from `rows`, stride sx along the dim), y: S (offsets from `rows`' second operand, sy)
template <typename S, bool kLog>
__global__ void softmax_kernel(FaultContext fault, OffsetCalculator<2> rows, int64_t num_rows, int64_t D, int64_t sx,
                               int64_t sy, S* y, const S* x) {
  if (stream_faulted(fault)) return;
  using C = compute_t<S>;
  __shared__ C partial[kThreads];
  for (int64_t row = blockIdx.x; row < num_rows; row += gridDim.x) {
    int64_t base[2];
    rows.get(row, base);
    const S* xr = x + base[0];
    S* yr = y + base[1];
    C m = load(xr);  // the first element: max is idempotent
    for (int64_t d = threadIdx.x; d < D; d += kThreads) m = math::maximum(m, load(xr + d * sx));
    m = block_combine<C, true>(partial, m);
    C s = C(0);
    for (int64_t d = threadIdx.x; d < D; d += kThreads) s += math::exp_nonpositive(load(xr + d * sx) - m);
    s = block_combine<C, false>(partial, s);
    const C log_s = math::log(s);
    for (int64_t d = threadIdx.x; d < D; d += kThreads) {
      const C shifted = load(xr + d * sx) - m;
      if constexpr (kLog) store(yr + d * sy, shifted - log_s);
      else store(yr + d * sy, math::exp_nonpositive(shifted) / s);
    }
  }
}

}  // namespace

void launch_softmax(bool log, ElemType type, const OffsetCalculator<2>& rows, int64_t num_rows, int64_t D,
                    int64_t x_stride, int64_t y_stride, void* y, const void* x, const LaunchArgs& args) {
  if (num_rows == 0 || D == 0) return;
  const unsigned blocks = static_cast<unsigned>(num_rows < (int64_t{1} << 20) ? num_rows : (int64_t{1} << 20));
  visit_floating(type, [&]<typename S>() {
    if (log)
      softmax_kernel<S, true><<<blocks, kThreads, 0, args.stream>>>(args.fault, rows, num_rows, D, x_stride, y_stride,
                                                                   static_cast<S*>(y), static_cast<const S*>(x));
    else
      softmax_kernel<S, false><<<blocks, kThreads, 0, args.stream>>>(args.fault, rows, num_rows, D, x_stride,
                                                                    y_stride, static_cast<S*>(y),
                                                                    static_cast<const S*>(x));
  });
}

}  // namespace dg::cuda
