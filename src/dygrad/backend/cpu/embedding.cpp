// CPU embedding kernels: a row gather (index range checked here, in the kernel) and its backward, a
// scatter-add that groups the gradient rows by index first, so each weight row is summed by one thread
// in index order: results do not depend on the thread count.
//
// Notation: V rows in the table, C columns (embedding size), I looked-up indices (any shape, flattened).
//   embedding_kernel: inputs (weight[V, C], indices[...] int32/int64 contiguous), output [..., C]: rows of weight.
//   embedding_backward_kernel: inputs (g[..., C] contiguous, indices[...] contiguous), EmbeddingBackwardAttrs
//   num_embeddings = V, output grad_weight[V, C] (contiguous): the sum of g's rows per index, in index order.
#include <cstring>
#include <vector>

#include "dygrad/backend/cpu/loops.h"
#include "dygrad/core/error.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"
#include "dygrad/runtime/scratch.h"

namespace dg::cpu {

namespace {
// The flattened indices as int64 (int32 or int64 storage), checked against [0, V).
template <typename Index>
int64_t read_index(const Index* indices, int64_t i, int64_t num_rows) {
  const int64_t v = static_cast<int64_t>(indices[i]);
  DG_CHECK(v >= 0 && v < num_rows, Index, "[embedding] index ", v, " is out of range for a table of ", num_rows,
           " rows (expected an index in [0, ", num_rows - 1, "])");
  return v;
}

template <typename F>
void visit_index_type(DType t, F&& f) {
  if (t == DType::Int32) f.template operator()<int32_t>();
  else f.template operator()<int64_t>();
}
}  // namespace

// Shapes: weight[V, C] (any strides), indices[I] -> out[I, C] = weight[indices[i], :].
void embedding_kernel(Task& task) {
  const Tensor& weight = task.inputs[0];
  const Tensor& indices = task.inputs[1];
  const Tensor& out = task.outputs[0];
  const int64_t V = weight.shape()[0], C = weight.shape()[1], I = indices.numel();
  const int64_t row_stride = weight.strides()[0], column_stride = weight.strides()[1];
  visit_index_type(indices.dtype(), [&]<typename Index>() {
    const Index* index = indices.data<Index>();
    visit_dtype(weight.dtype(), [&]<typename T>() {
      const T* w = weight.data<T>();
      T* y = out.data<T>();
      parallel_for(0, I, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(C, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          const T* src = w + read_index(index, i, V) * row_stride;
          T* dst = y + i * C;
          if (column_stride == 1) {
            if (C > 0) std::memcpy(dst, src, static_cast<size_t>(C) * sizeof(T));
          } else {
            for (int64_t c = 0; c < C; ++c) dst[c] = src[c * column_stride];
          }
        }
      });
    });
  });
}

// Shapes: g[I, C], indices[I] -> grad_weight[V, C], row v = sum of g[i] over i with indices[i] == v, in
// increasing i. The positions are grouped per row with a counting sort (stable), then rows run in parallel.
void embedding_backward_kernel(Task& task) {
  const Tensor& g = task.inputs[0];
  const Tensor& indices = task.inputs[1];
  const Tensor& grad = task.outputs[0];
  const int64_t V = task.attrs.get<EmbeddingBackwardAttrs>().num_embeddings, C = grad.shape()[1], I = indices.numel();
  ScratchArena& scratch = task_scratch(task);
  int64_t* row_start = scratch.take<int64_t>(V + 1);
  int64_t* positions = scratch.take<int64_t>(I);
  std::fill(row_start, row_start + V + 1, int64_t{0});
  visit_index_type(indices.dtype(), [&]<typename Index>() {
    const Index* index = indices.data<Index>();
    for (int64_t i = 0; i < I; ++i) ++row_start[read_index(index, i, V) + 1];
    for (int64_t v = 0; v < V; ++v) row_start[v + 1] += row_start[v];
    int64_t* next = scratch.take<int64_t>(V);
    std::copy(row_start, row_start + V, next);
    for (int64_t i = 0; i < I; ++i) positions[next[index[i]]++] = i;
  });
  visit_floating(grad.dtype(), [&]<typename T>() {
    using A = compute_t<T>;
    const T* gv = g.data<T>();
    T* out = grad.data<T>();
    const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(C, 1));
    auto rows = scratch.per_worker<A>(C, V);
    parallel_for(0, V, grain, [&](int64_t lo, int64_t hi) {
      const auto held = rows.acquire();
      A* row = held.data();
      for (int64_t v = lo; v < hi; ++v) {
        std::fill(row, row + C, A(0));
        for (int64_t p = row_start[v]; p < row_start[v + 1]; ++p) {
          const T* src = gv + positions[p] * C;
          for (int64_t c = 0; c < C; ++c) row[c] += static_cast<A>(src[c]);
        }
        T* dst = out + v * C;
        for (int64_t c = 0; c < C; ++c) dst[c] = static_cast<T>(row[c]);
      }
    });
  });
}


DG_REGISTER_KERNEL(embedding, Device::Type::CPU, embedding_kernel);
DG_REGISTER_KERNEL(embedding_backward, Device::Type::CPU, embedding_backward_kernel);

}  // namespace dg::cpu
