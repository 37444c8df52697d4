// CPU kernels of the flash-style scaled dot-product attention (ops/fused_attention.cpp declares the OpDefs).
#pragma once
#include "dygrad/ops/op_def.h"

namespace dg::cpu {
// inputs (query[L..., T, D], key[L..., S, D], value[L..., S, Dv] any strides, then mask[L..., T, S] when
// attrs.i[1] != 0: 1 bool (true = attend), 2 additive in the query's dtype; broadcast strides allowed).
// Floating dtypes; float16/bfloat16 compute in float32 (tiles converted on load, results rounded once).
// attrs.scalars[0] = scale, attrs.i[0] = is_causal (query i sees keys j <= i).
// outputs (out[L..., T, Dv] with unit column stride (any row and batch strides), lse[N, T] in the compute
// dtype: the log-sum-exp of each row, N = prod(L)).
void attention_kernel(Task& task);
// inputs (grad_out[L..., T, Dv], query, key, value, out, lse, then mask as above), same attributes;
// outputs (grad_query, grad_key, grad_value), contiguous.
void attention_backward_kernel(Task& task);
}  // namespace dg::cpu
