// Neural-network ops with kernels of their own: softmax and log_softmax over one dim, embedding lookup
// and cross-entropy from logits. Each is one numerically stable pass family (the row maximum is
// subtracted before exponentiating) and keeps only what its backward needs.
#pragma once
#include <optional>
#include <span>
#include <string_view>

#include "dygrad/core/tensor.h"
#include "dygrad/runtime/op_attrs.h"

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

// Bool [N, C, d...]: true where class c is target[n, d...] (int64 class indices [N, d...]; an index outside
// [0, C) matches no class). The composed backward of cross_entropy and nll_loss (ops/nn.cpp, ops/loss.cpp).
Tensor class_mask(const Tensor& target, int64_t classes);

// The losses composed of other ops (ops/loss.cpp), torch.nn.functional's semantics; reduction is "mean",
// "sum" or "none" (a ValueError otherwise).
LossReduction loss_reduction(const char* op, std::string_view reduction);
// (input - target)^2 and |input - target|, input and target broadcast; floating dtypes.
Tensor mse_loss(const Tensor& input, const Tensor& target, std::string_view reduction = "mean");
Tensor l1_loss(const Tensor& input, const Tensor& target, std::string_view reduction = "mean");
// -weight[t] input[n, t, d...] for log-probabilities input [N, C, d...] ([C] with a 0-dim target) and int64
// class indices t = target[n, d...]; ignored entries count 0; "mean" divides by the summed weights.
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                std::string_view reduction = "mean", int64_t ignore_index = -100);
// cross_entropy with class weights, label smoothing, or class-probability targets (a floating target of the
// input's shape); the plain class-index form is the fused op above.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, std::string_view reduction,
                     int64_t ignore_index, double label_smoothing);
// (1 - t) x - (1 + (pos_weight - 1) t) log_sigmoid(x), times weight; target of the input's shape.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                                        const Tensor& pos_weight = Tensor(), std::string_view reduction = "mean");

// F.pad (ops/pad.cpp): pad = (last dim left, last dim right, ...); mode constant (value, default 0; negative
// pads crop), reflect, replicate or circular (the last 1-3 dims of a 2-D to 5-D input).
Tensor pad(const Tensor& input, IntSpan pad, std::string_view mode = "constant",
           std::optional<double> value = std::nullopt);
// F.one_hot: int64 [..., num_classes]; num_classes = -1 infers max + 1. Reads the values' range (a sync).
Tensor one_hot(const Tensor& tensor, int64_t num_classes = -1);

// torch.nn.utils.get_total_norm (ops/grad_clip.cpp): the norm_type-norm of all the tensors' elements together,
// one Task over every tensor (no sync); a 0-dim tensor of their promoted dtype.
Tensor grad_norm(std::span<const Tensor> tensors, double norm_type = 2.0);
// torch.nn.utils.clip_grads_with_norm_: every grad *= min(1, max_norm / (total_norm + 1e-6)), in place, one
// Task over every contiguous grad (others: an elementwise mul_ each), the factor computed on the stream.
void clip_grads_with_norm_(std::span<Tensor> grads, double max_norm, const Tensor& total_norm);

}  // namespace dg
