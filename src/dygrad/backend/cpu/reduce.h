// CPU reduction kernels and the layout and loop helpers they share (reduce.cpp: sum, logsumexp, var and
// the backward kernels; reduce_minmax.cpp: max/min with and without indices).
#pragma once
#include <algorithm>
#include <vector>

#include "dygrad/core/small_vector.h"
#include "dygrad/core/tensor.h"
#include "dygrad/ops/op_def.h"
#include "dygrad/runtime/thread_pool.h"

namespace dg::cpu {

// An input split into kept dims (one output element per index) and reduced dims, each coalesced.
// Reading element (o, r): base + offset_of_output(o) + offset_of_reduced(r), in elements. The linear
// indices o and r are row-major over the uncoalesced kept / reduced dims, so two tensors of the same
// shape (an input and its gradient) agree on them whatever their strides.
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
  // The reduced dims form one run of a single stride.
  bool reduced_is_single_stride() const { return red_sizes.size() == 1; }
};

// Elements per partial result of a reduction to a single output: fixed by the length, not the thread
// count, so partials combine in the same order on any pool size.
inline constexpr int64_t kFullReduceChunk = 16384;
// Reduced elements one thread handles at least when spreading outputs over the pool.
inline constexpr int64_t kReduceGrain = 32768;

// Reduces reduced elements [begin, end) of one output (`base` points at its first element) with
// step(acc, x) over 8 independent accumulators on contiguous rows (the compiler vectorises them), one
// accumulator otherwise; lanes merge in a fixed tree. T: stored type, A: accumulator, x given as A.
template <typename A, typename T, typename Step, typename Merge>
A lane_reduce(const T* base, const ReduceLayout& L, int64_t begin, int64_t end, A init, Step step, Merge merge) {
  if (L.reduced_is_contiguous_row()) {
    const T* x = base + begin;
    const int64_t n = end - begin;
    A acc[8] = {init, init, init, init, init, init, init, init};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int k = 0; k < 8; ++k) acc[k] = step(acc[k], static_cast<A>(x[i + k]));
    for (; i < n; ++i) acc[0] = step(acc[0], static_cast<A>(x[i]));
    return merge(merge(merge(acc[0], acc[1]), merge(acc[2], acc[3])), merge(merge(acc[4], acc[5]), merge(acc[6], acc[7])));
  }
  A acc = init;
  if (L.reduced_is_single_stride()) {
    const int64_t s = L.red_strides[0];
    for (int64_t r = begin; r < end; ++r) acc = step(acc, static_cast<A>(base[r * s]));
    return acc;
  }
  for (int64_t r = begin; r < end; ++r) acc = step(acc, static_cast<A>(base[L.reduced_offset(r)]));
  return acc;
}

// Calls visit(r, offset) for the reduced elements [0, num_reduced) of one output, in order.
template <typename F>
void for_each_reduced(const ReduceLayout& L, F&& visit) {
  if (L.reduced_is_single_stride()) {
    const int64_t s = L.red_strides[0];
    for (int64_t r = 0; r < L.num_reduced; ++r) visit(r, r * s);
    return;
  }
  for (int64_t r = 0; r < L.num_reduced; ++r) visit(r, L.reduced_offset(r));
}

// Runs store(o, partial(o, 0, num_reduced)) for every output, outputs spread over the pool. A reduction
// to one output splits the reduced range into kFullReduceChunk pieces whose partials merge in order.
template <typename A, typename Partial, typename Merge, typename Store>
void reduce_each_output(const ReduceLayout& L, Partial&& partial, Merge&& merge, Store&& store) {
  if (L.num_outputs == 0) return;
  if (L.num_outputs == 1 && L.num_reduced > kFullReduceChunk) {
    const int64_t chunks = (L.num_reduced + kFullReduceChunk - 1) / kFullReduceChunk;
    std::vector<A> parts(static_cast<size_t>(chunks));
    parallel_chunks(chunks, [&](int64_t c) {
      const int64_t b = c * kFullReduceChunk, e = std::min(L.num_reduced, b + kFullReduceChunk);
      parts[static_cast<size_t>(c)] = partial(int64_t{0}, b, e);
    });
    A total = parts[0];
    for (size_t c = 1; c < parts.size(); ++c) total = merge(total, parts[c]);
    store(int64_t{0}, total);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(L.num_reduced, 1));
  parallel_for(0, L.num_outputs, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) store(o, partial(o, int64_t{0}, L.num_reduced));
  });
}

// --- kernels. attrs.ints = reduced dims (sorted); outputs contiguous, of the reduced shape ---------------
// Sum and the NaN-propagating extrema: in a[...] -> out[kept...].
void sum_kernel(Task& task);
void amax_kernel(Task& task);
void amin_kernel(Task& task);
// One dim (or all, flattened) -> values (same dtype) and int64 indices of the first extremum (first NaN).
// max_dim/min_dim: outputs (values, indices); argmax/argmin: output (indices).
void max_dim_kernel(Task& task);
void min_dim_kernel(Task& task);
void argmax_kernel(Task& task);
void argmin_kernel(Task& task);
// log(sum(exp(a))) computed as m + log(sum(exp(a - m))), m the maximum.
void logsumexp_kernel(Task& task);
// Variance (attrs.scalars[0] = correction, attrs.i[0] = 1 for the standard deviation), two-pass.
void var_kernel(Task& task);

// --- backward kernels. inputs of the reduced (keepdim) shape are contiguous; outputs contiguous ---------
// inputs (g[kept], indices[kept]) -> grad[in]: g scattered to the selected index along attrs.ints[0].
void extremum_index_backward_kernel(Task& task);
// inputs (a[in], result[kept], g[kept]) -> grad[in] = g / count where a == result, else 0 (ties share).
void extremum_backward_kernel(Task& task);
// inputs (a[in], result[kept], g[kept]) -> grad[in] = g * exp(a - result).
void logsumexp_backward_kernel(Task& task);

}  // namespace dg::cpu
