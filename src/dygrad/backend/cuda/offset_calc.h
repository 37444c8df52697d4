// The strided offset calculator of the CUDA elementwise kernels (docs/cuda.md, "Kernels"): one thread per output
// element finds each operand's element from the element's linear index in the output's row-major order, over any
// strides and broadcasting (a stride of 0). Built on the host from the tensors' shapes and strides, passed to the
// kernel by value, and evaluated on the device; the host side is compiled and tested on the CPU against a plain
// multi-index walk (tests/cpp/test_cuda_offsets.cpp), since a GPU is not always there to test it.
//
// Notation: N operands (the output first), D dims after simplification (at most kMaxOffsetDims), dims stored
// innermost first. offset[k] = sum over d of index_d * stride[k][d], index_d the digits of the linear index in the
// mixed radix of sizes[].
#pragma once
#include <cstdint>
#include <span>

#include "dygrad/backend/cuda/fault.h"  // DG_CUDA_HD

namespace dg::cuda {

inline constexpr int kMaxOffsetDims = 16;

template <int N>
struct OffsetCalculator {
  int dims = 0;                          // 0: a single element (a 0-dim output)
  int64_t sizes[kMaxOffsetDims] = {};    // innermost first
  int64_t strides[N][kMaxOffsetDims] = {};  // in elements of each operand; 0 where it is broadcast

  // The operands' element offsets of the output's element `linear` (0 <= linear < the output's numel).
  DG_CUDA_HD void get(int64_t linear, int64_t (&offsets)[N]) const {
    for (int k = 0; k < N; ++k) offsets[k] = 0;
    for (int d = 0; d < dims; ++d) {
      const int64_t index = linear % sizes[d];
      linear /= sizes[d];
      for (int k = 0; k < N; ++k) offsets[k] += index * strides[k][d];
    }
  }
};

// An operand as the builder sees it: its shape and strides (in elements), aligned to the output's trailing dims.
struct OperandLayout {
  std::span<const int64_t> shape;
  std::span<const int64_t> strides;
};

// Builds the calculator for an output of shape `out_shape` and the operands (operands[0] is the output itself). An
// operand's missing leading dims and its dims of size 1 broadcast (stride 0). Dims of size 1 are dropped, and two
// neighbouring dims merge when every operand steps over the outer one as over `size` inner steps (contiguous
// operands collapse to one dim). Returns false when more than kMaxOffsetDims dims remain (the caller raises).
template <int N>
bool make_offset_calculator(std::span<const int64_t> out_shape, const OperandLayout (&operands)[N],
                            OffsetCalculator<N>& calc) {
  calc = OffsetCalculator<N>{};
  const int rank = static_cast<int>(out_shape.size());
  for (int d = rank - 1; d >= 0; --d) {  // innermost first
    const int64_t size = out_shape[static_cast<size_t>(d)];
    if (size == 1) continue;
    int64_t stride[N];
    for (int k = 0; k < N; ++k) {
      const int offset = static_cast<int>(operands[k].shape.size()) - (rank - d);  // its dim, aligned right
      const bool present = offset >= 0 && operands[k].shape[static_cast<size_t>(offset)] != 1;
      stride[k] = present ? operands[k].strides[static_cast<size_t>(offset)] : 0;
    }
    if (calc.dims > 0) {  // merge into the previous (inner) dim when every operand continues it
      const int inner = calc.dims - 1;
      bool merges = true;
      for (int k = 0; k < N; ++k) merges = merges && stride[k] == calc.strides[k][inner] * calc.sizes[inner];
      if (merges) {
        calc.sizes[inner] *= size;
        continue;
      }
    }
    if (calc.dims == kMaxOffsetDims) return false;
    calc.sizes[calc.dims] = size;
    for (int k = 0; k < N; ++k) calc.strides[k][calc.dims] = stride[k];
    ++calc.dims;
  }
  return true;
}

}  // namespace dg::cuda
