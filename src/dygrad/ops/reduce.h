// Reductions over any set of dims, with keepdim. An empty dim list reduces over all dims. Reduction order
// is fixed by the shape alone, so results are bitwise identical across runs and thread counts.
#pragma once
#include <optional>

#include "dygrad/core/tensor.h"

namespace dg {

// Integer and bool inputs sum to int64 (torch.sum). `dtype` casts the input before summing.
Tensor sum(const Tensor& a, IntSpan dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, IntSpan dims = {}, bool keepdim = false);

// Extrema. NaN propagates (a reduction holding a NaN gives NaN, and its index); among equal values the
// first index wins. Empty reductions raise, as in torch.
struct ValuesIndices {
  Tensor values;
  Tensor indices;  // int64
};
ValuesIndices max(const Tensor& a, int64_t dim, bool keepdim = false);  // torch.max(a, dim, keepdim)
ValuesIndices min(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& a);  // over all elements, a 0-dim tensor
Tensor min(const Tensor& a);
// Over any dims; the gradient is split evenly among the elements equal to the result.
Tensor amax(const Tensor& a, IntSpan dims = {}, bool keepdim = false);
Tensor amin(const Tensor& a, IntSpan dims = {}, bool keepdim = false);
// int64 indices; without a dim, the index into the flattened tensor.
Tensor argmax(const Tensor& a, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& a, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

// torch.all / any: whether every / some element over dims (all dims when empty) is nonzero (nan is nonzero).
// The result is bool (uint8 for a uint8 input, as torch); over no elements all is true and any false.
Tensor all(const Tensor& a, IntSpan dims = {}, bool keepdim = false);
Tensor any(const Tensor& a, IntSpan dims = {}, bool keepdim = false);

// log(sum(exp(a))) over dims, computed as m + log(sum(exp(a - m))) with m the maximum. Integer inputs
// give float32. An empty reduction gives -inf.
Tensor logsumexp(const Tensor& a, IntSpan dims, bool keepdim = false);
// Variance sum((a - mean)^2) / max(N - correction, 0) over dims (correction 1: unbiased), two-pass.
// Floating inputs only. std_dev is torch.std: its square root.
Tensor var(const Tensor& a, IntSpan dims = {}, double correction = 1, bool keepdim = false);
Tensor std_dev(const Tensor& a, IntSpan dims = {}, double correction = 1, bool keepdim = false);

// The list of dims a reduction covers: sorted, wrapped, checked for repeats; all dims when empty.
Dims reduction_dims(const char* op, IntSpan dims, int64_t ndim);
// The output shape of reducing `shape` over `dims` (as returned by reduction_dims).
Dims reduced_shape(IntSpan shape, IntSpan dims, bool keepdim);

}  // namespace dg
