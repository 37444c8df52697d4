// Neural-network ops with kernels of their own: softmax and log_softmax over one dim, embedding lookup
// and cross-entropy from logits. Each is one numerically stable pass family (the row maximum is
// subtracted before exponentiating) and keeps only what its backward needs.
#pragma once
#include <string_view>

#include "dygrad/core/tensor.h"

namespace dg {

// exp(a - max) / sum(exp(a - max)) along dim (floating dtypes; a 0-dim input accepts dim 0 / -1).
Tensor softmax(const Tensor& a, int64_t dim);
// a - max - log(sum(exp(a - max))) along dim.
Tensor log_softmax(const Tensor& a, int64_t dim);

// Rows of weight[V, C] picked by indices (int32 or int64, any shape): [..., C]. An index outside [0, V)
// raises when the kernel runs (a deferred error at the next sync point). The gradient reaches weight
// only: a scatter-add of the incoming rows, summed in index order.
Tensor embedding(const Tensor& weight, const Tensor& indices);

// Cross-entropy between logits [N, C] (or [N, C, d1, ...], or [C] with a 0-dim target) and int64 class
// indices target [N] ([N, d1, ...]): -log_softmax(logits)[n, target[n]] per row. reduction "mean" averages
// over the rows whose target is not ignore_index, "sum" adds them, "none" returns them (0 where ignored).
// A target outside [0, C) other than ignore_index raises when the kernel runs.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, std::string_view reduction = "mean",
                     int64_t ignore_index = -100);

}  // namespace dg
