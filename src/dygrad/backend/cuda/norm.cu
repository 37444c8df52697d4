// CUDA kernel: RMSNorm's forward over the last dim and its re-application with a given rstd (norm.h), compiled for
// sm_90; not yet run on a GPU.
//
// Notation: x[R, C] (R rows = all leading dims, C channels), w[C] the optional weight, r[R] = rstd.
// One block per row (a grid-stride loop over rows): the sum of squares, a strided share per thread folded in order
// and a fixed tree over the block, then r = math::rms_inverse(sum / C, eps) and y = math::rms_norm(x, r, w) (the CPU's
// element math; its eight-lane sum order differs, so r may differ in the last bits). 16-bit floats compute in float.
// Every kernel first checks the stream's error word (fault.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "dygrad/backend/cuda/device_types.cuh"
#include "dygrad/backend/cuda/norm.h"
#include "dygrad/math/rows.h"

namespace dg::cuda {

namespace {

constexpr int kThreads = 256;

// x: S (rows from `rows`, column stride sx), w: S [C] (stride sw) or null, y: S [R, C], rstd: C [R]
// kApply: rstd[R] is given (rms_norm_apply) and the sum of squares is skipped.
template <typename S, bool kApply>
__global__ void rms_norm_kernel(FaultContext fault, OffsetCalculator<1> rows, int64_t num_rows, int64_t cols,
                                int64_t sx, const S* x, const S* w, int64_t sw, double eps, S* y,
                                compute_t<S>* rstd) {
  if (stream_faulted(fault)) return;
  using C = compute_t<S>;
  __shared__ C partial[kThreads];
  for (int64_t row = blockIdx.x; row < num_rows; row += gridDim.x) {
    int64_t base[1];
    rows.get(row, base);
    const S* xr = x + base[0];
    if constexpr (kApply) {
      const C inv = rstd[row];
      for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
        const C v = load(xr + c * sx);
        store(y + row * cols + c, w ? math::rms_norm(v, inv, load(w + c * sw)) : v * inv);
      }
      continue;
    }
    C sum = C(0);
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
      const C v = load(xr + c * sx);
      sum += v * v;
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int width = kThreads / 2; width > 0; width /= 2) {
      if (static_cast<int>(threadIdx.x) < width) partial[threadIdx.x] += partial[threadIdx.x + width];
      __syncthreads();
    }
    const C inv = math::rms_inverse(partial[0] / static_cast<C>(cols), static_cast<C>(eps));
    __syncthreads();  // partial is reused by the block's next row
    if (threadIdx.x == 0) rstd[row] = inv;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
      const C v = load(xr + c * sx);
      store(y + row * cols + c, w ? math::rms_norm(v, inv, load(w + c * sw)) : v * inv);
    }
  }
}

}  // namespace

void launch_rms_norm(ElemType type, const OffsetCalculator<1>& rows, int64_t num_rows, int64_t cols,
                     int64_t x_col_stride, const void* x, const void* w, int64_t w_stride, double eps, void* y,
                     void* rstd, bool apply, const LaunchArgs& args) {
  if (num_rows == 0) return;
  const unsigned blocks = static_cast<unsigned>(num_rows < (int64_t{1} << 20) ? num_rows : (int64_t{1} << 20));
  auto run = [&]<typename S>() {
    using C = compute_t<S>;
    if (apply)
      rms_norm_kernel<S, true><<<blocks, kThreads, 0, args.stream>>>(
          args.fault, rows, num_rows, cols, x_col_stride, static_cast<const S*>(x), static_cast<const S*>(w),
          w_stride, eps, static_cast<S*>(y), static_cast<C*>(rstd));
    else
      rms_norm_kernel<S, false><<<blocks, kThreads, 0, args.stream>>>(
          args.fault, rows, num_rows, cols, x_col_stride, static_cast<const S*>(x), static_cast<const S*>(w),
          w_stride, eps, static_cast<S*>(y), static_cast<C*>(rstd));
  };
  visit_floating(type, run);
}

}  // namespace dg::cuda
