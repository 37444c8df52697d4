// CUDA kernel: rotary position embedding, forward and backward (rope.h), compiled for sm_90; not yet run on a GPU.
//
// Notation: x[A0, A1, A2, D] (one of A1, A2 is the position t), P = D / 2 pairs, c = cos[t, p], s = sin[t, p].
// One thread per element i of a row: y[i] = math::rotate(x[i], x[partner(i)], c, signed_s) with partner(i) = i ^ 1
// (interleaved) or i +- P (rotate-half), signed_s = -s on a pair's first element and +s on its second (s negated
// for the backward): the CPU kernel's per-element formula, so the results are its bits. 16-bit floats compute in
// float. Every kernel first checks the stream's error word (fault.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "dygrad/backend/cuda/device_types.cuh"
#include "dygrad/backend/cuda/rope.h"
#include "dygrad/math/rows.h"

namespace dg::cuda {

namespace {

constexpr int kThreads = 256;

// x, y: S [A0, A1, A2, D] (strided), cos, sin: S [T, P] (strided)
template <typename S>
__global__ void rope_kernel(FaultContext fault, RopeLayout L, int64_t n, S* y, const S* x, const S* cos,
                            const S* sin) {
  if (stream_faulted(fault)) return;
  using C = compute_t<S>;
  const int64_t D = L.shape[3], P = D / 2;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e % D, j2 = (e / D) % L.shape[2], j1 = (e / (D * L.shape[2])) % L.shape[1],
                  j0 = e / (D * L.shape[2] * L.shape[1]);
    const int64_t t = L.time_dim == 1 ? j1 : j2;
    const bool first = L.rotate_half ? i < P : (i % 2 == 0);
    const int64_t p = L.rotate_half ? (first ? i : i - P) : i / 2;
    const int64_t partner = L.rotate_half ? (first ? i + P : i - P) : (i ^ 1);
    const C c = load(cos + t * L.cos_strides[0] + p * L.cos_strides[1]);
    C s = load(sin + t * L.sin_strides[0] + p * L.sin_strides[1]);
    if (L.inverse) s = -s;
    const int64_t row = j0 * L.x_strides[0] + j1 * L.x_strides[1] + j2 * L.x_strides[2];
    const C a = load(x + row + i * L.x_strides[3]), b = load(x + row + partner * L.x_strides[3]);
    store(y + j0 * L.y_strides[0] + j1 * L.y_strides[1] + j2 * L.y_strides[2] + i * L.y_strides[3],
          math::rotate(a, b, c, first ? -s : s));
  }
}

}  // namespace

void launch_rope(ElemType type, const RopeLayout& layout, void* y, const void* x, const void* cos, const void* sin,
                 const LaunchArgs& args) {
  const int64_t n = layout.shape[0] * layout.shape[1] * layout.shape[2] * layout.shape[3];
  if (n == 0) return;
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(wanted < (int64_t{1} << 20) ? wanted : (int64_t{1} << 20));
  auto run = [&]<typename S>() {
    rope_kernel<S><<<blocks, kThreads, 0, args.stream>>>(args.fault, layout, n, static_cast<S*>(y),
                                                         static_cast<const S*>(x), static_cast<const S*>(cos),
                                                         static_cast<const S*>(sin));
  };
  visit_floating(type, run);
}

}  // namespace dg::cuda
