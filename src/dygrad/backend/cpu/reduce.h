// CPU reduction kernels and the layout and loop helpers they share (reduce.cpp: sum, logsumexp, var and
// the backward kernels; reduce_minmax.cpp: max/min with and without indices).
#pragma once
#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <type_traits>
#include <vector>

#include "dygrad/backend/cpu/accumulate.h"
#include "dygrad/backend/cpu/loops.h"
#include "dygrad/core/small_vector.h"
#include "dygrad/core/tensor.h"
#include "dygrad/runtime/op_def.h"
#include "dygrad/runtime/scratch.h"
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

// Elements per partial result of a reduction to a single output (dg::kFullReduceChunk, runtime/scratch.h):
// fixed by the length, not the thread count, so partials combine in the same order on any pool size.
using dg::kFullReduceChunk;
// Reduced elements one thread handles at least when spreading outputs over the pool.
inline constexpr int64_t kReduceGrain = 32768;

// Reduces reduced elements [begin, end) of one output (`base` points at its first element) with
// step(acc, x) in the eight-lane order of backend/cpu/accumulate.h on contiguous rows (the compiler
// vectorises it), one accumulator otherwise. T: stored type, A: accumulator, x given as A.
template <typename A, typename T, typename Step, typename Merge>
A lane_reduce(const T* base, const ReduceLayout& L, int64_t begin, int64_t end, A init, Step step, Merge merge) {
  if (L.reduced_is_contiguous_row()) {
    const T* x = base + begin;
    return eight_lane_reduce<A>(end - begin, init, [x](int64_t i) { return static_cast<A>(x[i]); }, step, merge);
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
// to one output splits the reduced range into kFullReduceChunk pieces whose partials merge in order (the partials
// in the Task's scratch, given back when it returns).
template <typename A, typename Partial, typename Merge, typename Store>
void reduce_each_output(ScratchArena& scratch, const ReduceLayout& L, Partial&& partial, Merge&& merge, Store&& store) {
  if (L.num_outputs == 0) return;
  if (L.num_outputs == 1 && L.num_reduced > kFullReduceChunk) {
    const int64_t chunks = (L.num_reduced + kFullReduceChunk - 1) / kFullReduceChunk;
    ScratchRewind rewind(scratch);
    A* parts = scratch.take<A>(chunks);
    parallel_chunks(chunks, [&](int64_t c) {
      const int64_t b = c * kFullReduceChunk, e = std::min(L.num_reduced, b + kFullReduceChunk);
      new (parts + c) A(partial(int64_t{0}, b, e));
    });
    A total = parts[0];
    for (int64_t c = 1; c < chunks; ++c) total = merge(total, parts[c]);
    store(int64_t{0}, total);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(L.num_reduced, 1));
  parallel_for(0, L.num_outputs, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) store(o, partial(o, int64_t{0}, L.num_reduced));
  });
}

// True when the reduced dims lie outside a contiguous run of outputs (a reduction over a leading dim of
// contiguous data): reduce_columns then reduces blocks of adjacent outputs at once, vectorised across them.
inline bool is_column_layout(const ReduceLayout& L) {
  return !L.reduced_is_contiguous_row() && L.num_outputs > 1 && L.out_strides.back() == 1 && L.out_sizes.back() >= 8;
}

// Column layout: for blocks of adjacent outputs o, acc[o] = step(acc[o], x[o, r], o) over r in order, then
// store(o, acc[o]). A is the accumulator type; the order per output is fixed, whatever the thread count.
template <typename A, typename T, typename Step, typename Store>
void reduce_columns(const T* x, const ReduceLayout& L, A init, Step&& step, Store&& store) {
  constexpr int64_t kBlock = 256;
  const int64_t inner = L.out_sizes.back(), outer = L.num_outputs / inner;
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(L.num_reduced * kBlock, 1));
  parallel_for(0, outer * blocks, grain, [&](int64_t lo, int64_t hi) {
    A acc[kBlock];
    for (int64_t job = lo; job < hi; ++job) {
      const int64_t j0 = (job % blocks) * kBlock, jn = std::min(kBlock, inner - j0);
      const int64_t o0 = (job / blocks) * inner + j0;
      const T* base = x + L.output_offset(o0);
      for (int64_t j = 0; j < jn; ++j) acc[j] = init;
      for (int64_t r = 0; r < L.num_reduced; ++r) {
        const T* row = base + (L.reduced_is_single_stride() ? r * L.red_strides[0] : L.reduced_offset(r));
        for (int64_t j = 0; j < jn; ++j) acc[j] = step(acc[j], static_cast<A>(row[j]), o0 + j);
      }
      for (int64_t j = 0; j < jn; ++j) store(o0 + j, acc[j]);
    }
  });
}

// The extremum of elements [begin, end) (begin < end) of one output, NaN if any is NaN. Contiguous
// float32/float64 rows run in explicit SIMD lanes (accumulate.h, lane_extremum: dygrad.jit's fused row maximum
// calls the same function).
template <bool IsMax, typename C, typename T>
C row_extremum(const T* base, const ReduceLayout& L, int64_t begin, int64_t end) {
  if constexpr (std::is_same_v<T, C> && std::is_floating_point_v<C>) {
    if (L.reduced_is_contiguous_row()) return lane_extremum<IsMax, C>(base + begin, end - begin);
  }
  const C first = static_cast<C>(base[L.reduced_is_contiguous_row() ? begin : L.reduced_offset(begin)]);
  return lane_reduce<C>(base, L, begin, end, first, extremum_step<IsMax, C>, extremum_step<IsMax, C>);
}

// --- kernels (reduce.cpp, reduce_minmax.cpp). ReduceAttrs dims = reduced dims (sorted); outputs contiguous, of
// the reduced shape.
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
// Variance (VarianceAttrs: correction, standard_deviation), two-pass.
void var_kernel(Task& task);

// --- backward kernels. inputs of the reduced (keepdim) shape are contiguous; outputs contiguous ---------
// inputs (g[kept], indices[kept]) -> grad[in]: g scattered to the selected index along ReduceAttrs dims[0].
void extremum_index_backward_kernel(Task& task);
// inputs (a[in], result[kept], g[kept]) -> grad[in] = g / count where a == result, else 0 (ties share).
void extremum_backward_kernel(Task& task);
// inputs (a[in], result[kept], g[kept]) -> grad[in] = g * exp(a - result).
void logsumexp_backward_kernel(Task& task);

}  // namespace dg::cpu
