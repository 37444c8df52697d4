// Elementwise iteration over strided, broadcast operands. Kernels get typed pointers and per-operand
// strides for the innermost dimension; shapes are coalesced first so contiguous data becomes one flat
// loop the compiler vectorises. Work is split over the intra-op pool by output element ranges.
//
// Notation: out[i] = f(in0[i], in1[i], ...) for every index i of the output shape; an input's stride is
// 0 along a broadcast dimension.
#pragma once
#include <cstdint>
#include <span>

#include "dygrad/core/small_vector.h"
#include "dygrad/core/tensor.h"
#include "dygrad/runtime/thread_pool.h"

namespace dg::cpu {

inline constexpr int kMaxOperands = 4;
// Elements per parallel chunk below which an elementwise kernel stays on one thread.
inline constexpr int64_t kElementwiseGrain = 32768;

// Operand 0 is the output; the others are broadcast to its shape (their strides are in elements, 0 on
// broadcast dims). Dims are coalesced: merged when every operand steps contiguously across them.
struct StridedIteration {
  int num_operands = 0;
  Dims shape;                                   // coalesced output shape, outermost first
  SmallVector<int64_t, 6> strides[kMaxOperands];  // per operand, per dim, in elements
  char* base[kMaxOperands] = {};
  int64_t itemsize[kMaxOperands] = {};
  int64_t numel = 1;

  StridedIteration(std::span<const Tensor> operands);

  // True when every operand is contiguous with the same layout (a single flat loop).
  bool is_flat() const;

  // Calls inner(ptrs, inner_strides_in_bytes, count) for the rows covering linear range [begin, end).
  template <typename F>
  void for_range(int64_t begin, int64_t end, F&& inner) const {
    const int nd = static_cast<int>(shape.size());
    if (nd == 0) {
      char* ptrs[kMaxOperands];
      int64_t zero[kMaxOperands] = {};
      for (int k = 0; k < num_operands; ++k) ptrs[k] = base[k];
      if (begin < end) inner(ptrs, zero, int64_t{1});
      return;
    }
    const int64_t inner_size = shape[nd - 1];
    int64_t inner_stride[kMaxOperands];
    for (int k = 0; k < num_operands; ++k) inner_stride[k] = strides[k][nd - 1] * itemsize[k];
    // Multi-index of `begin` over the outer dims, and each operand's element offset there (kept up to date
    // as the rows advance, not recomputed per row).
    Dims index(static_cast<size_t>(nd), 0);
    int64_t rem = begin;
    for (int d = nd - 1; d >= 0; --d) {
      index[d] = rem % shape[d];
      rem /= shape[d];
    }
    int64_t offset[kMaxOperands] = {};
    for (int k = 0; k < num_operands; ++k)
      for (int d = 0; d < nd; ++d) offset[k] += index[d] * strides[k][d];
    int64_t pos = begin;
    while (pos < end) {
      char* ptrs[kMaxOperands] = {};
      for (int k = 0; k < num_operands; ++k) ptrs[k] = base[k] + offset[k] * itemsize[k];
      const int64_t count = std::min(inner_size - index[nd - 1], end - pos);
      inner(ptrs, inner_stride, count);
      pos += count;
      index[nd - 1] += count;
      for (int k = 0; k < num_operands; ++k) offset[k] += count * strides[k][nd - 1];
      for (int d = nd - 1; d > 0 && index[d] >= shape[d]; --d) {  // carry: back to 0 along d, one step along d-1
        for (int k = 0; k < num_operands; ++k) offset[k] += strides[k][d - 1] - index[d] * strides[k][d];
        index[d] = 0;
        ++index[d - 1];
      }
    }
  }
};

// Runs `inner` over all elements, in parallel when large enough.
template <typename F>
void for_each_element(const StridedIteration& it, F&& inner) {
  if (it.numel == 0) return;
  parallel_for(0, it.numel, kElementwiseGrain, [&](int64_t b, int64_t e) { it.for_range(b, e, inner); });
}

}  // namespace dg::cpu
