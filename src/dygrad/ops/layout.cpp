// Output layouts of elementwise ops (see layout.h).
#include "dygrad/ops/layout.h"

#include <algorithm>

namespace dg {

Dims dense_strides(IntSpan shape, std::span<const size_t> order) {
  Dims strides(shape.size(), 1);
  int64_t expected = 1;
  for (size_t k = order.size(); k-- > 0;) {
    const size_t d = order[k];
    strides[d] = expected;
    expected *= std::max<int64_t>(shape[d], 1);
  }
  return strides;
}

Tensor empty_elementwise(IntSpan shape, DType dtype, std::span<const Tensor> inputs) {
  const Device device = inputs.empty() ? Device::cpu() : inputs[0].device();
  if (std::all_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.is_contiguous(); }))
    return Tensor::empty(shape, dtype, device);
  const size_t nd = shape.size();
  // Stride of input k along output dim d (0 where it is broadcast or the dim has size 1).
  auto stride_of = [&](const Tensor& t, size_t d) -> int64_t {
    const size_t lead = nd - static_cast<size_t>(t.dim());
    if (d < lead || shape[d] == 1 || t.shape()[d - lead] == 1) return 0;
    return t.strides()[d - lead];
  };
  // Does dim x go outside dim y? Decided by the first input with non-zero, different strides on both.
  auto outer = [&](size_t x, size_t y) {
    for (const Tensor& t : inputs) {
      const int64_t sx = stride_of(t, x), sy = stride_of(t, y);
      if (sx == 0 || sy == 0 || sx == sy) continue;
      return sx > sy ? 1 : -1;
    }
    return 0;
  };
  // Insertion sort from the logical order: a dim moves outward past its neighbours only when an input says so,
  // so undecided dims keep their logical order (the comparison is not a strict weak order; no std::sort).
  SmallVector<size_t, 6> order;
  for (size_t d = 0; d < nd; ++d) {
    order.push_back(d);
    for (size_t k = order.size() - 1; k > 0 && outer(order[k], order[k - 1]) > 0; --k) std::swap(order[k], order[k - 1]);
  }
  bool logical = true;
  for (size_t k = 0; k < nd; ++k) logical = logical && order[k] == k;
  if (logical) return Tensor::empty(shape, dtype, device);
  return Tensor::empty_strided(shape, dense_strides(shape, std::span<const size_t>(order.begin(), order.end())), dtype,
                               device);
}

Tensor empty_rows_like(const Tensor& like, DType dtype) {
  const Tensor inputs[1] = {like};
  Tensor out = empty_elementwise(like.shape(), dtype, inputs);
  if (out.dim() > 0 && out.strides()[out.dim() - 1] != 1 && out.shape()[out.dim() - 1] > 1)
    return Tensor::empty(like.shape(), dtype, like.device());
  return out;
}

}  // namespace dg
