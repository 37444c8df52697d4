// The losses of torch.nn.functional that torch implements in C++: nll_loss, an op of its own (OpDef, kernel and
// backward kernel: backend/cpu/nll_loss.cpp); mse_loss, l1_loss, binary_cross_entropy_with_logits and
// cross_entropy with class weights, label smoothing or class-probability targets, composed of existing ops
// (their gradients come from the composition). The plain class-index cross_entropy is the fused op of ops/nn.cpp.
#include "dygrad/ops/nn.h"

#include <algorithm>
#include <cmath>

#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/index.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/reduce.h"
#include "dygrad/ops/shape.h"
#include "dygrad/core/shape.h"
#include "dygrad/core/small_vector.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/scratch.h"

namespace dg {

LossReduction loss_reduction(const char* op, std::string_view reduction) {
  if (reduction == "mean") return LossReduction::Mean;
  if (reduction == "sum") return LossReduction::Sum;
  DG_CHECK(reduction == "none", Value, "[", op, "] ", reduction, " is not a valid value for reduction "
           "(expected 'mean', 'sum' or 'none')");
  return LossReduction::None;
}

namespace {
Tensor reduce_loss(const Tensor& loss, LossReduction reduction) {
  if (reduction == LossReduction::None) return loss;
  return reduction == LossReduction::Sum ? sum(loss) : mean(loss);
}

// The elementwise losses: input and target broadcast (torch.broadcast_tensors; the functional warns when
// the sizes differ), floating dtypes only (torch: "mse_cpu" not implemented for 'Long').
Tensor pointwise_difference(const char* op, const Tensor& input, const Tensor& target) {
  check_defined(op, input);
  check_defined(op, target, "target");
  check_same_device(op, input, target);
  Tensor difference = sub(input, target);
  DG_CHECK(is_floating(difference.dtype()), NotImplemented, "[", op, "] not implemented for '",
           dtype_torch_name(difference.dtype()), "' (floating inputs expected)");
  return difference;
}

// Checks of nll_loss's operands; returns the class count C. input [N, C, d...] or [C], target [N, d...] or [].
int64_t check_nll(const char* op, const Tensor& input, const Tensor& target, const Tensor& weight) {
  check_defined(op, input);
  check_defined(op, target, "target");
  check_same_device(op, input, target);
  check_floating(op, input);
  DG_CHECK(target.dtype() == DType::Int64, Runtime, "[", op, "] expected target dtype to be Long (int64), but got ",
           dtype_name(target.dtype()));
  DG_CHECK(input.dim() >= 1, Value, "[", op, "] expected input with a class dim, got a 0-dim tensor");
  const int64_t class_dim = input.dim() == 1 ? 0 : 1;
  if (input.dim() == 1) {
    DG_CHECK(target.dim() == 0, Value, "[", op, "] input of shape ", input.shape(), " (unbatched) expects a 0-dim "
             "target, got shape ", target.shape());
  } else {
    DG_CHECK(target.dim() >= 1 && target.shape()[0] == input.shape()[0], Value, "[", op, "] Expected input batch_size (",
             input.shape()[0], ") to match target batch_size (", target.dim() ? target.shape()[0] : 0, ").");
    Dims expected;
    for (int64_t d = 0; d < input.dim(); ++d)
      if (d != 1) expected.push_back(input.shape()[d]);
    DG_CHECK(same_shape(target.shape(), expected), Runtime, "[", op, "] input of shape ", input.shape(),
             " expects a target of shape ", IntSpan(expected), ", got ", target.shape());
  }
  const int64_t classes = input.shape()[class_dim];
  if (weight.defined()) {
    check_same_device(op, input, weight);
    DG_CHECK(weight.dim() == 1 && weight.numel() == classes, Runtime, "[", op, "] weight tensor should be defined "
             "either for all ", classes, " classes or no classes but got weight tensor of shape: ", weight.shape());
    DG_CHECK(weight.dtype() == input.dtype(), Runtime, "[", op, "] expected weight of dtype ", dtype_name(input.dtype()),
             " (the input's), got ", dtype_name(weight.dtype()));
  }
  return classes;
}

// The per-row weight of each target: weight[target] (1 without weights), 0 where target == ignore_index.
// safe_target: target with ignored entries replaced by class 0, so that gathers stay in range.
Tensor row_weights(const Tensor& target, const Tensor& safe_target, const Tensor& weight, int64_t ignore_index,
                   DType dtype) {
  Tensor kept = ne(target, Scalar(ignore_index));
  if (!weight.defined()) return to(kept, dtype);
  Tensor picked = reshape(index_select(detach(weight), 0, flatten(safe_target)), target.shape());
  return where(kept, picked, Scalar(0.0));
}

// total / total_weight; NaN when total_weight is 0 (all ignored, as torch), with zero gradients then (torch's
// backward writes 0 for ignored rows; 1 / 0 in the composed backward would give 0 * inf = NaN).
Tensor weighted_mean(const Tensor& total, const Tensor& total_weight) {
  Tensor empty = eq(total_weight, Scalar(0.0));
  return where(empty, Scalar(NAN), div(total, where(empty, Scalar(1.0), total_weight)));
}

// The class dim of the batched form: [C] -> [1, C] (target [] -> [1]).
struct Batched {
  Tensor input, target;
  bool unbatched;
};
Batched batched(const Tensor& input, const Tensor& target) {
  if (input.dim() != 1) return {input, target, false};
  return {unsqueeze(input, 0), unsqueeze(target, 0), true};
}
}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, std::string_view reduction) {
  const LossReduction mode = loss_reduction("mse_loss", reduction);
  Tensor difference = pointwise_difference("mse_loss", input, target);
  return reduce_loss(mul(difference, difference), mode);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, std::string_view reduction) {
  const LossReduction mode = loss_reduction("l1_loss", reduction);
  return reduce_loss(abs(pointwise_difference("l1_loss", input, target)), mode);
}

// nll_loss: one Task (backend/cpu/nll_loss.cpp) computing the loss and the summed weight of the counted rows
// (the mean's divisor, saved for the backward, whose kernel scatters -weight[t] * g into a zero gradient).
const OpDef op_nll_loss_backward("nll_loss_backward", attrs_type<NllLossAttrs>());
namespace {
size_t nll_loss_scratch(const Task& t) {  // a summed loss and weight (float64) per partial: at most one per row
  return scratch_bytes<double>(2 * std::max<int64_t>(t.inputs[1].numel(), 1));
}
OpCost nll_loss_cost(const Task& t) {
  const double rows = double(t.inputs[1].numel());
  return {2 * rows, rows * (8 + 2 * double(t.inputs[0].itemsize()))};
}
// grad_input[n, t, d...] = -weight[t] * g (g[n, d...] for none; divided by the total weight for the mean), 0
// elsewhere and on ignored rows. Saved: target, weight (when weighted), total_weight. While backward records a
// graph (create_graph) the same values are composed of differentiable ops (the kernel is not differentiable): the
// loss is linear in the input, so only the gradient's dependence on g is second order.
void nll_loss_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  const NllLossAttrs& attrs = n.attrs.get<NllLossAttrs>();
  const bool weighted = attrs.weighted;
  if (grad_enabled()) {
    const DType dtype = n.input_meta[0].dtype;
    Tensor target = n.saved(0), kept = ne(target, Scalar(attrs.ignore_index));
    Tensor weights = weighted ? where(kept, reshape(index_select(n.saved(1), 0, flatten(where(kept, target,
                                      Scalar(int64_t(0))))), target.shape()), Scalar(0.0))
                              : to(kept, dtype);
    Tensor scale = to(g[0], dtype);
    if (attrs.reduction == LossReduction::Mean) {
      Tensor total = to(n.saved(weighted ? 2 : 1), dtype);
      scale = div(scale, where(eq(total, Scalar(0.0)), Scalar(1.0), total));
    }
    Tensor mask = to(class_mask(target, n.input_meta[0].shape[1]), dtype);
    gi[0] = mul(mask, unsqueeze(neg(mul(weights, scale)), 1));
    return;
  }
  Tensor grad = Tensor::empty(n.input_meta[0].shape, n.input_meta[0].dtype, n.input_meta[0].device);
  SmallVector<Tensor, 4> inputs{n.saved(0)};
  if (weighted) inputs.push_back(n.saved(1));
  inputs.push_back(n.saved(weighted ? 2 : 1));
  inputs.push_back(contiguous(g[0]));
  const Tensor outputs[1] = {grad};
  enqueue(op_nll_loss_backward, std::span<const Tensor>(inputs.data(), inputs.size()), outputs, n.attrs);
  gi[0] = grad;
}
}  // namespace

const OpDef op_nll_loss("nll_loss", attrs_type<NllLossAttrs>(), {.fusion = FusionClass::Reduction, .backward = nll_loss_backward, .cost = nll_loss_cost, .scratch = nll_loss_scratch});

// loss[n, d...] = -weight[t] * input[n, t, d...] with t = target[n, d...], 0 where t == ignore_index; the
// mean divides the sum by the sum of the weights of the non-ignored rows (NaN when all are ignored, as torch).
// A target outside [0, C) raises IndexError when the kernel runs (a deferred error).
Tensor nll_loss(const Tensor& input_in, const Tensor& target_in, const Tensor& weight, std::string_view reduction,
                int64_t ignore_index) {
  const LossReduction mode = loss_reduction("nll_loss", reduction);
  check_nll("nll_loss", input_in, target_in, weight);
  const auto [input, target, unbatched] = batched(input_in, target_in);
  Tensor classes = contiguous(target);
  Tensor weights = weight.defined() ? contiguous(detach(weight)) : Tensor();
  const Attrs attrs = NllLossAttrs{ignore_index, mode, weights.defined()};
  Tensor loss = Tensor::empty(mode == LossReduction::None ? target.shape() : IntSpan(), input.dtype(), input.device());
  Tensor total_weight = Tensor::empty(IntSpan(), input.dtype() == DType::Float64 ? DType::Float64 : DType::Float32,
                                      input.device());
  SmallVector<Tensor, 3> inputs{input, classes};
  if (weights.defined()) inputs.push_back(weights);
  const Tensor outputs[2] = {loss, total_weight};
  enqueue(op_nll_loss, std::span<const Tensor>(inputs.data(), inputs.size()), outputs, attrs);
  if (needs_grad_any({input})) {
    Tensor node_inputs[1] = {input}, node_outputs[1] = {loss};
    Ref<Node> node = record_node(&op_nll_loss, node_inputs, node_outputs);
    node->attrs = attrs;
    node->save(classes);
    if (weights.defined()) node->save(weights);
    node->save(total_weight);
  }
  return unbatched && mode == LossReduction::None ? reshape(loss, IntSpan()) : loss;
}

// torch's cross_entropy_loss_label_smoothing and cross_entropy_loss_prob_target, op for op: log_softmax over the
// class dim, then nll_loss (class-index targets) or the probability-weighted sum (class-probability targets),
// the smoothing term weighted by the class weights.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, std::string_view reduction,
                     int64_t ignore_index, double label_smoothing) {
  const char* op = "cross_entropy";
  const LossReduction mode = loss_reduction(op, reduction);
  DG_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, Runtime, "[", op,
           "] label_smoothing must be between 0.0 and 1.0. Got: ", label_smoothing);
  check_defined(op, logits);
  check_defined(op, target, "target");
  if (!is_floating(target.dtype()) && !weight.defined() && label_smoothing == 0.0)
    return cross_entropy(logits, target, reduction, ignore_index);  // the fused op
  check_floating(op, logits);
  DG_CHECK(logits.dim() >= 1, Value, "[", op, "] expected logits with a class dim, got a 0-dim tensor");
  const int64_t class_dim = logits.dim() == 1 ? 0 : 1, classes = logits.shape()[class_dim];
  Dims weight_shape(static_cast<size_t>(logits.dim()), 1);
  weight_shape[static_cast<size_t>(class_dim)] = classes;
  if (weight.defined()) {
    check_same_device(op, logits, weight);
    DG_CHECK(weight.dim() == 1 && weight.numel() == classes, Runtime, "[", op, "] weight tensor should be defined "
             "either for all ", classes, " classes or no classes but got weight tensor of shape: ", weight.shape());
  }
  Tensor log_probs = log_softmax(logits, class_dim);
  const int64_t class_dims[1] = {class_dim};
  if (is_floating(target.dtype())) {  // class probabilities: target has the logits' shape
    DG_CHECK(same_shape(target.shape(), logits.shape()), Runtime, "[", op, "] class-probability targets must have "
             "the input's shape ", logits.shape(), ", got ", target.shape());
    Tensor probs = label_smoothing > 0 ? add(mul(target, Scalar(1.0 - label_smoothing)), Scalar(label_smoothing / double(classes)))
                                       : target;
    Tensor terms = mul(log_probs, probs);
    if (weight.defined()) terms = mul(terms, reshape(detach(weight), weight_shape));
    if (mode == LossReduction::None) return neg(sum(terms, class_dims));
    Tensor total = neg(sum(terms));
    return mode == LossReduction::Sum ? total : div(total, Scalar(double(logits.numel() / std::max<int64_t>(classes, 1))));
  }
  Tensor nll = nll_loss(log_probs, target, weight, reduction, ignore_index);
  if (label_smoothing == 0.0) return nll;
  Tensor terms = weight.defined() ? mul(log_probs, reshape(detach(weight), weight_shape)) : log_probs;
  Tensor ignored = eq(target, Scalar(ignore_index));
  Tensor smooth = masked_fill(neg(sum(terms, class_dims)), ignored, Scalar(0.0));
  Tensor smooth_total;
  if (mode == LossReduction::None) {
    smooth_total = smooth;
  } else if (mode == LossReduction::Sum) {
    smooth_total = sum(smooth);
  } else {
    const Tensor batched_target = logits.dim() == 1 ? unsqueeze(target, 0) : target;
    Tensor safe_target = where(eq(batched_target, Scalar(ignore_index)), Scalar(int64_t(0)), batched_target);
    Tensor weights = row_weights(batched_target, safe_target, weight, ignore_index, logits.dtype());
    smooth_total = weighted_mean(sum(smooth), sum(weights));
  }
  return add(mul(nll, Scalar(1.0 - label_smoothing)), mul(smooth_total, Scalar(label_smoothing / double(classes))));
}

// torch's formula: loss = (1 - t) x - (1 + (pos_weight - 1) t) log_sigmoid(x), times weight, with
// log_sigmoid(x) = -logaddexp(0, -x) (stable for large |x|; its gradient is sigmoid, from logaddexp's).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        const Tensor& pos_weight, std::string_view reduction) {
  const char* op = "binary_cross_entropy_with_logits";
  const LossReduction mode = loss_reduction(op, reduction);
  check_defined(op, input);
  check_defined(op, target, "target");
  check_same_device(op, input, target);
  DG_CHECK(same_shape(input.shape(), target.shape()), Value, "[", op, "] Target size ", target.shape(),
           " must be the same as input size ", input.shape());
  check_floating(op, input);
  DG_CHECK(is_floating(target.dtype()), Runtime, "[", op, "] expected a floating target, got ",
           dtype_name(target.dtype()));
  Tensor zero = zeros(IntSpan(), {.dtype = input.dtype(), .device = input.device()});
  Tensor log_sigmoid = neg(logaddexp(zero, neg(input)));
  if (pos_weight.defined()) {
    check_same_device(op, input, pos_weight);
    log_sigmoid = mul(log_sigmoid, add(mul(sub(pos_weight, Scalar(1)), target), Scalar(1)));
  }
  Tensor loss = sub(mul(rsub(target, Scalar(1)), input), log_sigmoid);
  if (weight.defined()) {
    check_same_device(op, input, weight);
    loss = mul(loss, weight);
  }
  return reduce_loss(loss, mode);
}

}  // namespace dg
