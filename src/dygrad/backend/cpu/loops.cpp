// Dim coalescing and broadcasting for the elementwise loops.
#include "dygrad/backend/cpu/loops.h"

#include <algorithm>

#include "dygrad/core/error.h"

namespace dg::cpu {

StridedIteration::StridedIteration(std::span<const Tensor> operands) {
  num_operands = static_cast<int>(operands.size());
  const Tensor& out = operands[0];
  const size_t nd = static_cast<size_t>(out.dim());
  Dims full_shape(out.shape());
  SmallVector<int64_t, 6> full_strides[kMaxOperands];
  for (int k = 0; k < num_operands; ++k) {
    const Tensor& t = operands[k];
    base[k] = static_cast<char*>(t.raw_data());
    itemsize[k] = static_cast<int64_t>(t.itemsize());
    full_strides[k].resize(nd, 0);
    size_t lead = nd - static_cast<size_t>(t.dim());
    for (size_t d = 0; d < static_cast<size_t>(t.dim()); ++d)
      full_strides[k][lead + d] = t.shape()[d] == 1 ? 0 : t.strides()[d];
  }
  for (int64_t s : full_shape) numel *= s;
  // Iteration order: the output's memory order (its dims by decreasing stride; stable, so a contiguous output
  // keeps the logical order). A permuted output, such as an elementwise result laid out like its permuted
  // inputs (ops/layout.h), is then written sequentially and its inputs read in the same order.
  SmallVector<size_t, 6> order;
  for (size_t d = 0; d < nd; ++d)
    if (full_shape[d] != 1) order.push_back(d);
  const auto& out_strides = full_strides[0];
  if (!std::is_sorted(order.begin(), order.end(), [&](size_t x, size_t y) { return out_strides[x] > out_strides[y]; }))
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return out_strides[x] > out_strides[y]; });
  // Then merge neighbours d-1, d when stride[d-1] == stride[d] * size[d] for all operands.
  for (size_t d : order) {
    if (!shape.empty()) {
      bool mergeable = true;
      for (int k = 0; k < num_operands; ++k)
        if (strides[k].back() != full_strides[k][d] * full_shape[d]) { mergeable = false; break; }
      if (mergeable) {
        shape.back() *= full_shape[d];
        for (int k = 0; k < num_operands; ++k) strides[k].back() = full_strides[k][d];
        continue;
      }
    }
    shape.push_back(full_shape[d]);
    for (int k = 0; k < num_operands; ++k) strides[k].push_back(full_strides[k][d]);
  }
  if (numel == 0) {
    shape = Dims{0};
    for (int k = 0; k < num_operands; ++k) strides[k] = SmallVector<int64_t, 6>{1};
  }
  if (shape.empty() && numel == 1) {
    shape.push_back(1);
    for (int k = 0; k < num_operands; ++k) strides[k].push_back(0);
  }
}

bool StridedIteration::is_flat() const {
  if (shape.size() != 1) return false;
  for (int k = 0; k < num_operands; ++k)
    if (strides[k][0] != 1) return false;
  return true;
}

}  // namespace dg::cpu
