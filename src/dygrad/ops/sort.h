// Ordering, scans and order-reversing ops: sort, argsort, topk, cumsum, cumprod, flip, roll. NaN sorts as the
// largest value (torch's order); sort is always stable, so equal values keep their input order.
#pragma once
#include "dygrad/core/tensor.h"
#include "dygrad/ops/reduce.h"

#include <optional>

namespace dg {

// Values sorted along dim and the int64 indices they came from: values = gather(a, dim, indices).
ValuesIndices sort(const Tensor& a, int64_t dim = -1, bool descending = false, bool stable = false);
Tensor argsort(const Tensor& a, int64_t dim = -1, bool descending = false, bool stable = false);
// The k largest (smallest) values along dim in sorted order, ties broken by the lower index. RuntimeError
// when k is outside [0, size(dim)].
ValuesIndices topk(const Tensor& a, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);

// Running sum / product along dim. Integral and bool inputs give int64 (torch); `dtype` casts the input first.
Tensor cumsum(const Tensor& a, int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor cumprod(const Tensor& a, int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor& cumsum_(Tensor& a, int64_t dim, std::optional<DType> dtype = std::nullopt);
Tensor& cumprod_(Tensor& a, int64_t dim, std::optional<DType> dtype = std::nullopt);

// out[..., i, ...] = a[..., size - 1 - i, ...] along every dim of `dims` (a copy, as torch).
Tensor flip(const Tensor& a, IntSpan dims);
Tensor fliplr(const Tensor& a);  // flip(a, {1}); a has at least 2 dims
Tensor flipud(const Tensor& a);  // flip(a, {0}); a has at least 1 dim
// Elements shifted by shifts[k] along dims[k] (wrapping around); with no dims, over the flattened tensor.
Tensor roll(const Tensor& a, IntSpan shifts, IntSpan dims = {});

}  // namespace dg
