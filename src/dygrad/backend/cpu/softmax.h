// CPU kernels of the nn family (ops/nn.cpp declares their OpDefs): softmax and log_softmax with their
// backward, cross-entropy from logits, and embedding lookup with its scatter-add backward.
#pragma once
#include "dygrad/ops/op_def.h"

namespace dg::cpu {

// attrs.ints = {dim} (empty for a 0-dim input). input x, output y (contiguous, x's shape).
void softmax_kernel(Task& task);      // y = exp(x - max) / sum(exp(x - max))
void log_softmax_kernel(Task& task);  // y = x - max - log(sum(exp(x - max)))
// inputs (y, g) of the forward output's shape, output grad_x (contiguous).
void softmax_backward_kernel(Task& task);      // grad_x = y * (g - sum(g * y))
void log_softmax_backward_kernel(Task& task);  // grad_x = g - exp(y) * sum(g)

// Cross-entropy over class dim 1. attrs.i[0] = ignore_index, attrs.i[1] = reduction (kReductionNone,
// kReductionMean, kReductionSum). inputs (logits[N, C, d...], target[N, d...] int64 contiguous);
// outputs (loss: [] or [N, d...] in the logits' dtype, lse[N * d...] contiguous in the compute type).
inline constexpr int64_t kReductionNone = 0, kReductionMean = 1, kReductionSum = 2;
void cross_entropy_kernel(Task& task);
// inputs (logits, target, lse, g: [] or [N, d...] contiguous), output grad_logits (contiguous).
void cross_entropy_backward_kernel(Task& task);

// inputs (weight[V, C], indices[...] int32/int64 contiguous), output [..., C]: rows of weight.
void embedding_kernel(Task& task);
// inputs (g[..., C] contiguous, indices[...] contiguous), attrs.i[0] = V, output grad_weight[V, C]
// (contiguous): the sum of g's rows per index, added in index order.
void embedding_backward_kernel(Task& task);

}  // namespace dg::cpu
