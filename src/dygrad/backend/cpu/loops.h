// Elementwise iteration over strided, broadcast operands. Kernels get typed pointers and per-operand
// strides for the innermost dimension; shapes are coalesced first so contiguous data becomes one flat
// loop the compiler vectorises. Work is split over the intra-op pool by output element ranges.
//
// Notation: out[i] = f(in0[i], in1[i], ...) for every index i of the output shape; an input's stride is
// 0 along a broadcast dimension.
#pragma once
#include <array>
#include <cstdint>
#include <span>

#include "dygrad/backend/cpu/accumulate.h"
#include "dygrad/core/small_vector.h"
#include "dygrad/core/tensor.h"
#include "dygrad/runtime/thread_pool.h"

namespace dg::cpu {

inline constexpr int kMaxOperands = 4;
// Elements per parallel chunk below which an elementwise kernel stays on one thread.
inline constexpr int64_t kElementwiseGrain = 32768;

// kVectorBytes, the widest vector register of this kernel level: accumulate.h.

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
  // An operand described without a Tensor: part of one, as a kernel sees it (a view would allocate a TensorImpl
  // while the kernel runs; kernels allocate nothing, runtime/scratch.h).
  struct Operand {
    char* data = nullptr;
    IntSpan shape, strides;  // strides in elements
    int64_t itemsize = 0;
  };
  StridedIteration(std::span<const Operand> operands);
  StridedIteration(const std::array<Operand, kMaxOperands>& operands, size_t count);

  // True when every operand is contiguous with the same layout (a single flat loop).
  bool is_flat() const;

  // Calls inner(ptrs, inner_strides_in_bytes, count) for the rows covering linear range [begin, end).
  // The rows of the two innermost dims are walked with byte offsets held in local arrays, which no store of
  // `inner` can alias (the plan's own vectors could be, for all the compiler knows), so a row should cost a few
  // adds rather than reloads of the plan (the loop before cost about 16 ns a row; one thread, loaded machine:
  // x * 2 on [2048, 384] rows 1152 apart 0.65x the time, a 3-D strided copy [64, 64, 96] 0.47x; docs/recompute.md).
  // The outer dims are carried only when the second-innermost one wraps.
  template <typename F>
  void for_range(int64_t begin, int64_t end, F&& inner) const {
    const int nd = static_cast<int>(shape.size());
    const int count_operands = num_operands;
    char* ptrs[kMaxOperands] = {};
    if (nd == 0) {
      int64_t zero[kMaxOperands] = {};
      for (int k = 0; k < count_operands; ++k) ptrs[k] = base[k];
      if (begin < end) inner(ptrs, zero, int64_t{1});
      return;
    }
    const int64_t columns = shape[nd - 1], rows = nd >= 2 ? shape[nd - 2] : 1;
    // Per operand, in bytes: the stride along the innermost dim (handed to `inner`), along the next one, and
    // the offset of the current position.
    int64_t inner_stride[kMaxOperands] = {}, row_stride[kMaxOperands] = {}, offset[kMaxOperands] = {};
    char* base_ptr[kMaxOperands] = {};
    for (int k = 0; k < count_operands; ++k) {
      inner_stride[k] = strides[k][nd - 1] * itemsize[k];
      row_stride[k] = nd >= 2 ? strides[k][nd - 2] * itemsize[k] : 0;
      base_ptr[k] = base[k];
    }
    // Multi-index of `begin` and each operand's offset there.
    Dims index(static_cast<size_t>(nd), 0);
    int64_t rem = begin;
    for (int d = nd - 1; d >= 0; --d) {
      index[d] = rem % shape[d];
      rem /= shape[d];
    }
    for (int k = 0; k < count_operands; ++k)
      for (int d = 0; d < nd; ++d) offset[k] += index[d] * strides[k][d] * itemsize[k];
    int64_t column = index[nd - 1], row = nd >= 2 ? index[nd - 2] : 0;
    int64_t pos = begin;
    while (pos < end) {
      for (;;) {  // the rows of the current [rows, columns] slab, from (row, column)
        for (int k = 0; k < count_operands; ++k) ptrs[k] = base_ptr[k] + offset[k];
        const int64_t count = std::min(columns - column, end - pos);
        inner(ptrs, inner_stride, count);
        pos += count;
        if (pos >= end) return;
        for (int k = 0; k < count_operands; ++k) offset[k] += row_stride[k] - column * inner_stride[k];
        column = 0;
        if (++row == rows) break;
      }
      // The slab is done: back to row 0, one step along the outer dims (carried as needed).
      row = 0;
      for (int k = 0; k < count_operands; ++k) offset[k] -= rows * row_stride[k];
      for (int d = nd - 3; d >= 0; --d) {
        ++index[d];
        for (int k = 0; k < count_operands; ++k) offset[k] += strides[k][d] * itemsize[k];
        if (index[d] < shape[d] || d == 0) break;
        for (int k = 0; k < count_operands; ++k) offset[k] -= shape[d] * strides[k][d] * itemsize[k];
        index[d] = 0;
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
