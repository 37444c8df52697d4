// CPU reduction kernels and the layout helper they share.
#pragma once
#include "dygrad/core/small_vector.h"
#include "dygrad/core/tensor.h"
#include "dygrad/ops/op_def.h"

namespace dg::cpu {

// An input split into kept dims (one output element per index) and reduced dims, each coalesced.
// Reading element (o, r): base + offset_of_output(o) + offset_of_reduced(r), in elements.
struct ReduceLayout {
  Dims out_sizes, out_strides;  // kept dims of the input: sizes, input strides
  Dims red_sizes, red_strides;  // reduced dims of the input: sizes, input strides
  int64_t num_outputs = 1, num_reduced = 1;
  // dims: sorted list of reduced dims of `in`.
  ReduceLayout(const Tensor& in, IntSpan dims);
  // Input offset (elements) of output element o / reduced element r (row-major over the coalesced dims).
  int64_t output_offset(int64_t o) const;
  int64_t reduced_offset(int64_t r) const;
  // The reduced dims form one contiguous run (stride 1): the fast row reduction applies.
  bool reduced_is_contiguous_row() const { return red_sizes.size() == 1 && red_strides[0] == 1; }
};

// attrs.ints = reduced dims (sorted); input a; output of the reduced shape (keepdim or not, contiguous).
void sum_kernel(Task& task);

}  // namespace dg::cpu
