// CPU kernels of the joining and indexing family (ops/index.cpp declares their OpDefs).
#pragma once
#include "dygrad/ops/op_def.h"

namespace dg::cpu {

// inputs t_0..t_{k-1} (output dtype, same dims except attrs.i[0] = dim, any strides); output out (dense, any
// dim order: contiguous, or the strides the op layer gave it):
// out[..., off_k + j, ...] = t_k[..., j, ...] with off_k = the sizes of t_0..t_{k-1} along dim.
void cat_kernel(Task& task);

// inputs (a, index); output out of index's shape; attrs.i[0] = dim:
//   out[p, j] = a[p, index[p, j]]   (p: position over the dims other than dim, j: along dim)
// index_select passes index expanded to out's shape (stride 0 off dim). Raises IndexError naming the op
// for an index outside [0, a.size(dim)).
void gather_kernel(Task& task);

// inputs (out, index, src), output out (the same tensor: accumulates in place); attrs.i[0] = dim:
//   out[p, index[p, j]] += src[p, j]
void scatter_add_kernel(Task& task);

// input a (ndim >= 2), output out contiguous of a's shape; attrs.i[0] = diagonal, attrs.i[1] = 1 for triu:
//   out[..., r, c] = a[..., r, c] where c - r <= diagonal (tril) / c - r >= diagonal (triu), else 0
void triangle_kernel(Task& task);

}  // namespace dg::cpu
