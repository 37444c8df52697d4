// Dim coalescing and broadcasting for the elementwise loops.
#include "dygrad/backend/cpu/loops.h"

#include <algorithm>
#include <array>
#include <utility>

#include "dygrad/core/error.h"

namespace dg::cpu {

StridedIteration::StridedIteration(std::span<const Tensor> operands)
    : StridedIteration([&] {
        std::array<Operand, kMaxOperands> described{};
        for (size_t k = 0; k < operands.size(); ++k)
          described[k] = {static_cast<char*>(operands[k].raw_data()), operands[k].shape(), operands[k].strides(),
                          static_cast<int64_t>(operands[k].itemsize())};
        return described;
      }(), operands.size()) {}

StridedIteration::StridedIteration(std::span<const Operand> operands)
    : StridedIteration([&] {
        std::array<Operand, kMaxOperands> described{};
        std::copy(operands.begin(), operands.end(), described.begin());
        return described;
      }(), operands.size()) {}

StridedIteration::StridedIteration(const std::array<Operand, kMaxOperands>& operands, size_t count) {
  num_operands = static_cast<int>(count);
  const Operand& out = operands[0];
  const size_t nd = out.shape.size();
  Dims full_shape(out.shape);
  SmallVector<int64_t, 6> full_strides[kMaxOperands];
  for (int k = 0; k < num_operands; ++k) {
    const Operand& t = operands[static_cast<size_t>(k)];
    base[k] = t.data;
    itemsize[k] = t.itemsize;
    full_strides[k].resize(nd, 0);
    const size_t dims = t.shape.size(), lead = nd - dims;
    for (size_t d = 0; d < dims; ++d) full_strides[k][lead + d] = t.shape[d] == 1 ? 0 : t.strides[d];
  }
  for (int64_t s : full_shape) numel *= s;
  // Iteration order: the output's memory order (its dims by decreasing stride; stable, so a contiguous output
  // keeps the logical order). A permuted output, such as an elementwise result laid out like its permuted
  // inputs (ops/layout.h), is then written sequentially and its inputs read in the same order.
  SmallVector<size_t, 6> order;
  for (size_t d = 0; d < nd; ++d)
    if (full_shape[d] != 1) order.push_back(d);
  const auto& out_strides = full_strides[0];
  // A stable insertion sort of the few dims: std::stable_sort would take a temporary buffer from operator new, and
  // a kernel allocates nothing (runtime/scratch.h). A stable order is unique: the same order as it gave.
  for (size_t i = 1; i < order.size(); ++i)
    for (size_t j = i; j > 0 && out_strides[order[j]] > out_strides[order[j - 1]]; --j) std::swap(order[j], order[j - 1]);
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
