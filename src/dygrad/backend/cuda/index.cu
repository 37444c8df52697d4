// CUDA kernels: gathers by index (gather, index_select, embedding), compiled for sm_90; not yet run on a GPU.
//
// Notation: n output elements, one thread each (a grid-stride loop); p a position over the dims other than `dim`,
// j the place along it; V rows and C columns of an embedding table, I looked-up indices. Elements move as bits of
// their width. An index out of range is a data error: the kernel records it in the stream's error word (fault.h)
// and leaves that element unwritten; the stream raises it at the next sync naming the op and the Python line, and
// the failed Task's output is poisoned there (docs/cuda.md, "Errors"). Every kernel first checks the word.
#include <cstdint>

#include "dygrad/backend/cuda/index.h"

namespace dg::cuda {

namespace {

constexpr int kThreads = 256;
struct Bits128 {
  uint64_t low, high;
};

#define DG_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)

// out: U [n] (strided), a: U (strided, its dim's stride 0 in calc; a_dim_stride), index: I [n] (strided)
template <typename U, typename I>
__global__ void gather_kernel(FaultContext fault, OffsetCalculator<3> calc, int64_t n, U* out, const U* a,
                              const I* index, int64_t a_dim_stride, int64_t size, int dim, int32_t code) {
  if (stream_faulted(fault)) return;
  DG_GRID_STRIDE(i, n) {
    int64_t off[3];
    calc.get(i, off);
    const int64_t v = static_cast<int64_t>(index[off[2]]);
    if (v < 0 || v >= size) {
      record_fault(fault, static_cast<FaultCode>(code), v, size, dim);
      continue;
    }
    out[off[0]] = a[off[1] + v * a_dim_stride];
  }
}

// out: U [I, C] contiguous, weight: U [V, C] (rs, cs), index: I [I]
template <typename U, typename I>
__global__ void embedding_kernel(FaultContext fault, int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t n,
                                 U* out, const U* weight, const I* index) {
  if (stream_faulted(fault)) return;
  DG_GRID_STRIDE(e, n) {
    const int64_t i = e / cols, c = e % cols;
    const int64_t v = static_cast<int64_t>(index[i]);
    if (v < 0 || v >= rows) {
      record_fault(fault, kFaultEmbedding, v, rows);
      continue;
    }
    out[e] = weight[v * rs + c * cs];
  }
}

template <typename F>
void visit_width(int width, F&& f) {
  switch (width) {
    case 1: return f.template operator()<uint8_t>();
    case 2: return f.template operator()<uint16_t>();
    case 4: return f.template operator()<uint32_t>();
    case 8: return f.template operator()<uint64_t>();
    default: return f.template operator()<Bits128>();
  }
}

unsigned blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < (int64_t{1} << 20) ? (blocks > 0 ? blocks : 1) : (int64_t{1} << 20));
}

}  // namespace

void launch_gather(int width, bool index_int32, const OffsetCalculator<3>& calc, int64_t n, void* out, const void* a,
                   const void* index, int64_t a_dim_stride, int64_t size, int dim, int32_t code,
                   const LaunchArgs& args) {
  if (n == 0) return;
  visit_width(width, [&]<typename U>() {
    if (index_int32)
      gather_kernel<U, int32_t><<<blocks_for(n), kThreads, 0, args.stream>>>(
          args.fault, calc, n, static_cast<U*>(out), static_cast<const U*>(a), static_cast<const int32_t*>(index),
          a_dim_stride, size, dim, code);
    else
      gather_kernel<U, int64_t><<<blocks_for(n), kThreads, 0, args.stream>>>(
          args.fault, calc, n, static_cast<U*>(out), static_cast<const U*>(a), static_cast<const int64_t*>(index),
          a_dim_stride, size, dim, code);
  });
}

void launch_embedding(int width, bool index_int32, int64_t rows, int64_t cols, int64_t row_stride,
                      int64_t col_stride, int64_t count, void* out, const void* weight, const void* index,
                      const LaunchArgs& args) {
  const int64_t n = count * cols;
  if (n == 0) return;
  visit_width(width, [&]<typename U>() {
    if (index_int32)
      embedding_kernel<U, int32_t><<<blocks_for(n), kThreads, 0, args.stream>>>(
          args.fault, rows, cols, row_stride, col_stride, n, static_cast<U*>(out), static_cast<const U*>(weight),
          static_cast<const int32_t*>(index));
    else
      embedding_kernel<U, int64_t><<<blocks_for(n), kThreads, 0, args.stream>>>(
          args.fault, rows, cols, row_stride, col_stride, n, static_cast<U*>(out), static_cast<const U*>(weight),
          static_cast<const int64_t*>(index));
  });
}

}  // namespace dg::cuda
