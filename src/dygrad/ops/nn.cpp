// nn ops (softmax, log_softmax, embedding, cross_entropy): validation, shapes, Tasks and backward
// formulas. Each backward is a kernel of its own (backend/cpu/softmax.cpp, embedding.cpp), not differentiable
// again: while backward records a graph (create_graph), the formulas compose differentiable ops instead, with
// the kernels' values (docs/autograd.md, "Double backward").
#include "dygrad/ops/nn.h"

#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/index.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/reduce.h"
#include "dygrad/ops/shape.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/scratch.h"
#include "dygrad/ops/storage_only.h"

namespace dg {

namespace {
OpCost softmax_cost(const Task& t) {
  OpCost c;
  const double n = double(t.inputs[0].numel());
  c.flops = 5 * n;  // max, subtract, exp, add, scale (an exp counted as one)
  c.bytes = n * double(t.inputs[0].itemsize()) * 2;
  return c;
}
}  // namespace

const OpDef op_softmax_backward("softmax_backward", attrs_type<ReduceAttrs>());
const OpDef op_log_softmax_backward("log_softmax_backward", attrs_type<ReduceAttrs>());
// Scratch of the CPU kernel (backend/cpu/embedding.cpp): the counting sort of the I indices over V rows (row
// starts [V + 1], positions [I], next [V], int64) and one grad row [C] per pool thread in the compute type.
size_t embedding_backward_scratch(const Task& t) {
  const Tensor& grad = t.outputs[0];
  const int64_t V = t.attrs.get<EmbeddingBackwardAttrs>().num_embeddings, I = t.inputs[1].numel();
  return scratch_bytes<int64_t>(V + 1) + scratch_bytes<int64_t>(I) + scratch_bytes<int64_t>(V) +
         per_worker_scratch_bytes(grad.shape()[1], compute_itemsize(grad.dtype()), V);
}
const OpDef op_embedding_backward("embedding_backward", attrs_type<EmbeddingBackwardAttrs>(), {.scratch = embedding_backward_scratch});
const OpDef op_cross_entropy_backward("cross_entropy_backward", attrs_type<CrossEntropyAttrs>());

namespace {
// The composed paths compute in float32 for 16-bit dtypes, as the kernels do, and round once.
DType compute_type(DType t) { return itemsize(t) == 2 ? DType::Float32 : t; }

// softmax: grad_x = y * (g - sum(g * y)); log_softmax: grad_x = g - exp(y) * sum(g). Saved: y.
template <const OpDef& BackwardOp>
void softmax_family_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  const DType dtype = n.input_meta[0].dtype;
  if (grad_enabled()) {
    const Dims& dims = n.attrs.get<ReduceAttrs>().dims;
    Tensor y = to(n.saved_output(0), compute_type(dtype)), grad = to(g[0], compute_type(dtype));
    Tensor result = &BackwardOp == &op_softmax_backward ? mul(y, sub(grad, sum(mul(grad, y), dims, true)))
                                                         : sub(grad, mul(exp(y), sum(grad, dims, true)));
    gi[0] = to(result, dtype);
    return;
  }
  Tensor grad = Tensor::empty(n.input_meta[0].shape, dtype, n.input_meta[0].device);
  enqueue(BackwardOp, {n.saved(0), g[0]}, {grad}, n.attrs);
  gi[0] = grad;
}
// The incoming rows scatter-added into a zero [V, C] gradient. Saved: the indices. Composed: index_add (whose
// gradient in its source is index_select: the double backward is an embedding of the gradient).
void embedding_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  if (grad_enabled()) {
    const IntSpan shape = n.input_meta[0].shape;
    Tensor index = flatten(to(n.saved(0), DType::Int64));
    const int64_t rows[2] = {index.numel(), shape[1]};
    gi[0] = index_add(zeros(shape, {.dtype = g[0].dtype(), .device = g[0].device()}), 0, index, reshape(g[0], rows));
    return;
  }
  Tensor grad = Tensor::empty(n.input_meta[0].shape, n.input_meta[0].dtype, n.input_meta[0].device);
  enqueue(op_embedding_backward, {contiguous(g[0]), n.saved(0)}, {grad}, n.attrs);
  gi[0] = grad;
}
// grad_logits = scale * (softmax(logits) - one_hot(target)), softmax recomputed from the saved
// logsumexp per row; scale = g (g[row] for none), 0 for ignored rows, divided by the counted rows for the mean.
// Saved: logits, target, lse.
void cross_entropy_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  Tensor logits = n.saved(0);
  if (grad_enabled()) {
    const CrossEntropyAttrs& attrs = n.attrs.get<CrossEntropyAttrs>();
    const DType compute = compute_type(logits.dtype());
    Tensor target = n.saved(1);
    Tensor kept = to(ne(target, Scalar(attrs.ignore_index)), compute);
    Tensor scale = mul(kept, to(g[0], compute));
    if (attrs.reduction == LossReduction::Mean) {
      Tensor counted = sum(kept);
      scale = div(scale, where(eq(counted, Scalar(0.0)), Scalar(1.0), counted));
    }
    Tensor probabilities = softmax(to(logits, compute), 1);
    Tensor one_hot = to(class_mask(target, logits.shape()[1]), compute);
    gi[0] = to(mul(sub(probabilities, one_hot), unsqueeze(scale, 1)), logits.dtype());
    return;
  }
  Tensor grad = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  enqueue(op_cross_entropy_backward, {logits, n.saved(1), n.saved(2), contiguous(g[0])}, {grad}, n.attrs);
  gi[0] = grad;
}
}  // namespace

const OpDef op_softmax("softmax", attrs_type<ReduceAttrs>(), {.fusion = FusionClass::Reduction, .backward = softmax_family_backward<op_softmax_backward>, .cost = softmax_cost});
const OpDef op_log_softmax("log_softmax", attrs_type<ReduceAttrs>(), {.fusion = FusionClass::Reduction, .backward = softmax_family_backward<op_log_softmax_backward>, .cost = softmax_cost});
const OpDef op_embedding("embedding", nullptr, {.backward = embedding_backward});
// Scratch of the CPU kernel (backend/cpu/softmax.cpp): one loss per row (target's numel), in the compute type.
size_t cross_entropy_scratch(const Task& t) {
  return scratch_bytes(t.inputs[1].numel(), compute_itemsize(t.inputs[0].dtype()));
}
const OpDef op_cross_entropy("cross_entropy", attrs_type<CrossEntropyAttrs>(), {.fusion = FusionClass::Reduction, .backward = cross_entropy_backward, .scratch = cross_entropy_scratch});

namespace {
Tensor softmax_family(const OpDef& op, const Tensor& a, int64_t dim) {
  check_defined(op.name, a);
  check_floating(op.name, a);
  const int64_t d = wrap_dim(op.name, dim, a.dim());
  const Attrs attrs = ReduceAttrs{reduction_dims(op.name, IntSpan(&d, 1), a.dim())};
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  enqueue(op, {a}, {out}, attrs);
  if (needs_grad_any({a})) {
    Tensor inputs[1] = {a}, outputs[1] = {out};
    Ref<Node> node = record_node(&op, inputs, outputs);
    node->attrs = attrs;
    node->save(detach(out));
  }
  return out;
}
}  // namespace

Tensor softmax(const Tensor& a, int64_t dim) { return softmax_family(op_softmax, a, dim); }

Tensor class_mask(const Tensor& target, int64_t classes) {
  Dims shape(static_cast<size_t>(target.dim() + 1), 1);
  shape[1] = classes;
  return eq(unsqueeze(target, 1), reshape(arange(Scalar(classes), target.device()), shape));
}
Tensor log_softmax(const Tensor& a, int64_t dim) { return softmax_family(op_log_softmax, a, dim); }

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  check_defined("embedding", weight, "weight");
  check_defined("embedding", indices, "indices");
  check_same_device("embedding", weight, indices);
  DG_CHECK(weight.dim() == 2, Value, "[embedding] weight must be 2-D (num_embeddings, embedding_dim), got shape ",
           weight.shape());
  DG_CHECK(indices.dtype() == DType::Int32 || indices.dtype() == DType::Int64, Type,
           "[embedding] expected indices of dtype int32 or int64, got ", dtype_name(indices.dtype()));
  if (storage_only::has(weight)) [[unlikely]] return storage_only::embedding(weight, indices);
  Tensor index = contiguous(indices);
  Dims shape(indices.shape().begin(), indices.shape().end());
  shape.push_back(weight.shape()[1]);
  Tensor out = Tensor::empty(shape, weight.dtype(), weight.device());
  enqueue(op_embedding, {weight, index}, {out});
  if (needs_grad_any({weight})) {
    Tensor inputs[1] = {weight}, outputs[1] = {out};
    Ref<Node> node = record_node(&op_embedding, inputs, outputs);
    node->attrs = EmbeddingBackwardAttrs{weight.shape()[0]};
    node->save(index);
  }
  return out;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, std::string_view reduction, int64_t ignore_index) {
  check_defined("cross_entropy", logits, "input");
  check_defined("cross_entropy", target, "target");
  check_same_device("cross_entropy", logits, target);
  check_floating("cross_entropy", logits);
  DG_CHECK(reduction == "mean" || reduction == "sum" || reduction == "none", Value, "[cross_entropy] reduction must be 'mean', 'sum' or 'none', got '", reduction, "'");
  const LossReduction mode = reduction == "mean" ? LossReduction::Mean
                            : reduction == "sum" ? LossReduction::Sum
                                                 : LossReduction::None;
  DG_CHECK(target.dtype() == DType::Int64, Type, "[cross_entropy] expected a target of class indices with dtype int64, "
           "got ", dtype_name(target.dtype()), " (class probabilities are not supported)");
  DG_CHECK(logits.dim() >= 1, Value, "[cross_entropy] expected logits with a class dim, got a 0-dim tensor");
  if (logits.dim() == 1) {  // one unbatched sample: logits [C], target []
    DG_CHECK(target.dim() == 0, Value, "[cross_entropy] logits of shape ", logits.shape(),
             " (unbatched) expect a 0-dim target, got shape ", target.shape());
    const int64_t batched_logits[2] = {1, logits.shape()[0]}, batched_target[1] = {1};
    Tensor loss = cross_entropy(reshape(logits, batched_logits), reshape(target, batched_target), reduction, ignore_index);
    return mode == LossReduction::None ? reshape(loss, IntSpan()) : loss;
  }
  Dims target_shape;
  for (int64_t d = 0; d < logits.dim(); ++d)
    if (d != 1) target_shape.push_back(logits.shape()[d]);
  DG_CHECK(same_shape(target.shape(), target_shape), Value, "[cross_entropy] logits of shape ", logits.shape(),
           " expect a target of shape ", IntSpan(target_shape), ", got ", target.shape());
  Tensor classes = contiguous(target);
  const Attrs attrs = CrossEntropyAttrs{ignore_index, mode};
  Tensor loss = Tensor::empty(mode == LossReduction::None ? IntSpan(target_shape) : IntSpan(), logits.dtype(),
                              logits.device());
  const int64_t rows = shape_numel(target_shape);
  Tensor lse = Tensor::empty(IntSpan(&rows, 1), logits.dtype() == DType::Float64 ? DType::Float64 : DType::Float32,
                             logits.device());
  enqueue(op_cross_entropy, {logits, classes}, {loss, lse}, attrs);
  if (needs_grad_any({logits})) {
    Tensor inputs[1] = {logits}, outputs[1] = {loss};
    Ref<Node> node = record_node(&op_cross_entropy, inputs, outputs);
    node->attrs = attrs;
    node->save(logits);
    node->save(classes);
    node->save(lse);
  }
  return loss;
}

}  // namespace dg
