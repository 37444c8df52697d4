// Fused LLM ops (RMSNorm, rotary embedding, SwiGLU, multi-tensor AdamW and SGD): validation, Tasks and backward
// formulas. Attention lives in fused_attention.cpp. Kernels: backend/cpu/fused_*.cpp.
#include "dygrad/ops/fused.h"

#include <bit>
#include <cmath>

#include "dygrad/autograd/saved_buffers.h"
#include "dygrad/ops/device.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/index.h"
#include "dygrad/ops/layout.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/reduce.h"
#include "dygrad/ops/shape.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/scratch.h"

namespace dg {

namespace {
// The fused backward kernels have no backward of their own. While backward records a graph (create_graph:
// grad mode is on), each formula computes the same gradient by a composition of differentiable ops instead, in
// the kernels' compute type, so that it can be differentiated again (docs/autograd.md, "Double backward").
DType compute_dtype(DType t) { return t == DType::Float64 ? DType::Float64 : DType::Float32; }

// --- rms_norm ------------------------------------------------------------------------------------------
// saved: x, rstd, weight (or undefined).
void rms_norm_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi);
Tensor rms_norm_rematerialize(Node& n, uint32_t output_nr);
OpCost rms_norm_cost(const Task& t) {
  const double elements = double(t.inputs[0].numel()), size = double(t.inputs[0].itemsize());
  return {4 * elements, 2 * elements * size};
}
OpCost rms_norm_backward_cost(const Task& t) {
  const double elements = double(t.inputs[1].numel()), size = double(t.inputs[1].itemsize());
  return {8 * elements, 3 * elements * size};
}
}  // namespace

// Scratch of the CPU kernels (backend/cpu/fused_norm.cpp), in the compute type: the weight as one row, then per
// pool thread one row of x (forward) or three (backward: xhat, g, g * w, each of whole 64-byte lines), and
// grad_weight's partial rows, one per chunk of about kNormChunkElements elements.
size_t rms_norm_scratch_of(const Task& t, bool forward) {
  const Tensor& x = t.inputs[forward ? 0 : 1];
  const RmsNormAttrs& attrs = t.attrs.get<RmsNormAttrs>();
  const int64_t cols = x.shape()[x.dim() - 1];
  const size_t item = compute_itemsize(x.dtype());
  const int64_t rows = forward ? t.outputs[1].numel() : t.inputs[2].numel();
  const size_t weight = attrs.has_weight ? scratch_bytes(cols, item) : 0;
  if (forward) return weight + per_worker_scratch_bytes(cols, item, rows);
  const int64_t chunk_rows = std::max<int64_t>(1, kNormChunkElements / std::max<int64_t>(cols, 1));
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  const int64_t row_stride = static_cast<int64_t>(scratch_bytes(cols, item) / item);
  return weight + (attrs.need_grad_weight ? scratch_bytes(chunks * cols, item) : 0) +
         per_worker_scratch_bytes(3 * row_stride, item, chunks);
}
size_t rms_norm_scratch(const Task& t) { return rms_norm_scratch_of(t, true); }
size_t rms_norm_backward_scratch(const Task& t) { return rms_norm_scratch_of(t, false); }
const OpDef op_rms_norm("rms_norm", attrs_type<RmsNormAttrs>(), {.backward = rms_norm_backward, .cost = rms_norm_cost, .scratch = rms_norm_scratch, .rematerialize = rms_norm_rematerialize});
const OpDef op_rms_norm_backward("rms_norm_backward", attrs_type<RmsNormAttrs>(), {.cost = rms_norm_backward_cost, .scratch = rms_norm_backward_scratch});

namespace {
// rms_norm_apply: y = x * rstd * weight from a forward's rstd (the rematerialized output; no reduction, one pass).
OpCost rms_norm_apply_cost(const Task& t) {
  const double elements = double(t.inputs[0].numel()), size = double(t.inputs[0].itemsize());
  return {2 * elements, 2 * elements * size};
}
size_t rms_norm_apply_scratch(const Task& t) {  // the weight as one row in the compute type
  const Tensor& x = t.inputs[0];
  if (!t.attrs.get<RmsNormAttrs>().has_weight) return 0;
  return scratch_bytes(x.shape()[x.dim() - 1], compute_itemsize(x.dtype()));
}
}  // namespace
const OpDef op_rms_norm_apply("rms_norm_apply", attrs_type<RmsNormAttrs>(), {.cost = rms_norm_apply_cost, .scratch = rms_norm_apply_scratch});

namespace {
// y = x * rstd * w, rstd = (mean(x^2) + eps)^-1/2 over the last dim: with gw = g * w and xhat = x * rstd,
// grad_x = rstd * (gw - xhat * mean(gw * xhat)) and grad_w = sum over rows of g * xhat. The composed form
// recomputes rstd from x (differentiably).
void rms_norm_composed(Node& n, const Tensor& g, const Tensor& x, const Tensor& weight, std::span<Tensor> gi) {
  const DType compute = compute_dtype(x.dtype());
  const int64_t last = x.dim() - 1;
  const IntSpan channels(&last, 1);
  Tensor xc = to(x, compute), grad = to(g, compute);
  Tensor rstd = rsqrt(add(mean(mul(xc, xc), channels, true), Scalar(n.attrs.get<RmsNormAttrs>().eps)));
  Tensor xhat = mul(xc, rstd);
  Tensor gw = weight.defined() ? mul(grad, to(weight, compute)) : grad;
  if (n.needs_grad(0)) gi[0] = to(mul(rstd, sub(gw, mul(xhat, mean(mul(gw, xhat), channels, true)))), x.dtype());
  if (n.needs_grad(1)) gi[1] = to(sum_to(mul(grad, xhat), weight.shape()), weight.dtype());
}
// y again, for a later node that saved it (autograd/node.h, "Rematerialized saves"): x * rstd * weight with the
// forward's own rstd, the same products in the same order as the forward kernel, so bitwise the forward's y; one
// pass, no reduction (rms_norm_apply). Under create_graph it is rms_norm itself, which records a node of its own,
// so y is differentiable again. The norm already keeps x for its backward: a norm followed by a linear layer then
// holds x once, not x and y.
Tensor rms_norm_rematerialize(Node& n, uint32_t output_nr) {
  DG_CHECK(output_nr == 0, Runtime, "[rms_norm] internal error: output ", output_nr, " is not rematerialized");
  const Tensor x = n.saved(0), rstd = n.saved(1), weight = n.saved(2);
  const RmsNormAttrs& attrs = n.attrs.get<RmsNormAttrs>();
  if (grad_enabled()) return rms_norm(x, weight, attrs.eps);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (weight.defined()) enqueue(op_rms_norm_apply, {x, rstd, weight}, {y}, attrs);
  else enqueue(op_rms_norm_apply, {x, rstd}, {y}, attrs);
  return y;
}

void rms_norm_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  Tensor x = n.saved(0), rstd = n.saved(1), weight = n.saved(2);
  if (grad_enabled()) return rms_norm_composed(n, g[0], x, weight, gi);
  const bool need_x = n.needs_grad(0), need_weight = n.needs_grad(1);
  if (!need_x && !need_weight) return;
  RmsNormAttrs attrs = n.attrs.get<RmsNormAttrs>();
  attrs.need_grad_input = need_x;
  attrs.need_grad_weight = need_weight;
  Tensor grad = to(g[0], x.dtype());
  Tensor grad_x = need_x ? Tensor::empty(x.shape(), x.dtype(), x.device()) : Tensor();
  Tensor grad_weight = need_weight ? Tensor::empty(weight.shape(), weight.dtype(), weight.device()) : Tensor();
  SmallVector<Tensor, 4> inputs{grad, x, rstd};
  if (weight.defined()) inputs.push_back(weight);
  SmallVector<Tensor, 2> outputs;
  if (need_x) outputs.push_back(grad_x);
  if (need_weight) outputs.push_back(grad_weight);
  enqueue(op_rms_norm_backward, std::span<const Tensor>(inputs.data(), inputs.size()),
          std::span<const Tensor>(outputs.data(), outputs.size()), attrs);
  if (need_x) gi[0] = grad_x;
  if (need_weight) gi[1] = grad_weight;
}
}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  check_defined("rms_norm", x);
  check_floating("rms_norm", x);
  DG_CHECK(x.dim() >= 1, Value, "[rms_norm] expected an input with at least 1 dim, got shape ", x.shape());
  const int64_t channels = x.shape()[x.dim() - 1];
  if (weight.defined()) {
    check_same_device("rms_norm", x, weight);
    DG_CHECK(weight.dim() == 1 && weight.shape()[0] == channels, Value, "[rms_norm] weight of shape ", weight.shape(),
             " does not match the last dim of the input of shape ", x.shape());
    DG_CHECK(weight.dtype() == x.dtype(), Type, "[rms_norm] weight dtype ", dtype_name(weight.dtype()),
             " differs from the input dtype ", dtype_name(x.dtype()));
  }
  DG_CHECK(eps >= 0, Value, "[rms_norm] eps must be non-negative, got ", eps);
  const int64_t rows = channels == 0 ? shape_numel(x.shape().first(x.shape().size() - 1)) : x.numel() / channels;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor rstd = Tensor::empty(Dims{rows}, compute_dtype(x.dtype()), x.device());
  const Attrs attrs = RmsNormAttrs{eps, weight.defined()};
  if (weight.defined()) enqueue(op_rms_norm, {x, weight}, {y, rstd}, attrs);
  else enqueue(op_rms_norm, {x}, {y, rstd}, attrs);
  if (needs_grad_any({x, weight})) {
    Tensor inputs[2] = {x, weight}, outputs[1] = {y};
    Ref<Node> node = record_node(&op_rms_norm, inputs, outputs);
    node->attrs = attrs;
    node->save(x);
    node->save(rstd);
    node->save(weight);
  }
  return y;
}

// --- rotary_position_embedding -------------------------------------------------------------------------
namespace {
// saved: cos, sin (cast to x's dtype).
void rope_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi);
}  // namespace

// Scratch of the CPU kernel (backend/cpu/fused_rope.cpp): per pool thread, x's row and the expanded rows of cos
// and sin (D entries each), in the compute type. x is [a0, a1, a2, dim].
size_t rope_scratch(const Task& t) {
  const Tensor& x = t.inputs[0];
  const int64_t dim = x.shape()[3], rows = x.shape()[0] * x.shape()[1] * x.shape()[2];
  return per_worker_scratch_bytes(3 * dim, compute_itemsize(x.dtype()), rows);
}
const OpDef op_rope("rotary_position_embedding", attrs_type<RopeAttrs>(), {.backward = rope_backward, .scratch = rope_scratch});
const OpDef op_rope_backward("rotary_position_embedding_backward", attrs_type<RopeAttrs>(), {.scratch = rope_scratch});

namespace {
// The inverse rotation of g. Composed (create_graph): the op itself with sin negated, rotation by -angle, which
// records its own node (the gradient is linear in g; cos and sin receive none).
void rope_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  Tensor cos = n.saved(0), sin = n.saved(1);
  if (grad_enabled()) {
    const RopeAttrs& forward = n.attrs.get<RopeAttrs>();
    gi[0] = rotary_position_embedding(to(g[0], cos.dtype()), cos, neg(sin),
                                      forward.rotate_half ? RopeMode::RotateHalf : RopeMode::Interleaved,
                                      forward.time_dim == 2 ? RopeLayout::BHTD : RopeLayout::BTHD);
    return;
  }
  RopeAttrs attrs = n.attrs.get<RopeAttrs>();
  attrs.inverse = true;
  Tensor grad = to(g[0], cos.dtype());
  Tensor grad_x = empty_rows_like(grad, grad.dtype());
  enqueue(op_rope_backward, {grad, cos, sin}, {grad_x}, attrs);
  gi[0] = grad_x;
}
}  // namespace

Tensor rotary_position_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, RopeMode mode, RopeLayout layout) {
  const char* name = "rotary_position_embedding";
  check_defined(name, x);
  check_defined(name, cos, "cos");
  check_defined(name, sin, "sin");
  check_same_device(name, x, cos);
  check_same_device(name, x, sin);
  check_floating(name, x);
  DG_CHECK(x.dim() == 4, Value, "[", name, "] expected x of 4 dims (", layout == RopeLayout::BHTD ? "B, H, T, D" : "B, T, H, D",
           "), got shape ", x.shape());
  const int64_t dim = x.shape()[3], time_dim = layout == RopeLayout::BHTD ? 2 : 1, positions = x.shape()[time_dim];
  DG_CHECK(dim % 2 == 0, Value, "[", name, "] the head dim D must be even, got shape ", x.shape());
  const int64_t want[2] = {positions, dim / 2};
  DG_CHECK(same_shape(cos.shape(), want) && same_shape(sin.shape(), want), Value, "[", name, "] cos and sin must have shape ",
           IntSpan(want), " (T, D/2) for x of shape ", x.shape(), ", got ", cos.shape(), " and ", sin.shape());
  DG_CHECK(is_floating(cos.dtype()) && is_floating(sin.dtype()), Type, "[", name, "] cos and sin must be floating, got ",
           dtype_name(cos.dtype()), " and ", dtype_name(sin.dtype()));
  Tensor c = to(detach(cos), x.dtype()), s = to(detach(sin), x.dtype());
  // Laid out like x (a q/k view of a qkv projection stays in [B, T, H, D] memory order): both are then walked
  // in order (backend/cpu/fused_rope.cpp).
  Tensor y = empty_rows_like(x, x.dtype());
  const Attrs attrs = RopeAttrs{mode == RopeMode::RotateHalf, time_dim};
  enqueue(op_rope, {x, c, s}, {y}, attrs);
  if (needs_grad_any({x})) {
    Tensor inputs[1] = {x}, outputs[1] = {y};
    Ref<Node> node = record_node(&op_rope, inputs, outputs);
    node->attrs = attrs;
    node->save(c);
    node->save(s);
  }
  return y;
}

// --- swiglu --------------------------------------------------------------------------------------------
namespace {
// Two inputs; saved: gate, up.
void swiglu_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi);
// One input [..., 2F]; saved: x.
void swiglu_packed_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi);
OpCost swiglu_cost(const Task& t) {
  const double elements = double(t.outputs[0].numel()), size = double(t.outputs[0].itemsize());
  return {6 * elements, 3 * elements * size};
}

// The gate and up halves of x [..., 2F] as views (no autograd: the packed node covers them).
std::pair<Tensor, Tensor> halves(const Tensor& x) {
  const int64_t last = x.dim() - 1, half = x.shape()[last] / 2;
  Dims sizes(x.shape());
  sizes[static_cast<size_t>(last)] = half;
  Dims strides(x.strides());
  return {Tensor::make_view(x, sizes, strides, x.storage_offset()),
          Tensor::make_view(x, sizes, strides, x.storage_offset() + half * x.strides()[last])};
}
}  // namespace

const OpDef op_swiglu("swiglu", nullptr, {.fusion = FusionClass::Elementwise, .backward = swiglu_backward, .cost = swiglu_cost});
const OpDef op_swiglu_packed("swiglu_packed", nullptr, {.fusion = FusionClass::Elementwise, .backward = swiglu_packed_backward, .cost = swiglu_cost});
const OpDef op_swiglu_backward("swiglu_backward", nullptr, {.fusion = FusionClass::Elementwise});

namespace {
// y = silu(gate) * up: grad_gate = g * up * s (1 + gate (1 - s)) with s = sigmoid(gate), grad_up = g * silu(gate).
// Composed (create_graph) in the compute type.
std::pair<Tensor, Tensor> swiglu_composed(const Tensor& g, const Tensor& gate, const Tensor& up) {
  const DType compute = compute_dtype(gate.dtype());
  Tensor grad = to(g, compute), a = to(gate, compute), b = to(up, compute);
  Tensor s = sigmoid(a);
  Tensor grad_gate = mul(mul(grad, b), mul(s, add(mul(a, rsub(s, Scalar(1))), Scalar(1))));
  return {to(grad_gate, gate.dtype()), to(mul(grad, mul(a, s)), up.dtype())};
}

void swiglu_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  Tensor gate = n.saved(0), up = n.saved(1);
  if (grad_enabled()) {
    auto [grad_gate, grad_up] = swiglu_composed(g[0], gate, up);
    if (n.needs_grad(0)) gi[0] = grad_gate;
    if (n.needs_grad(1)) gi[1] = grad_up;
    return;
  }
  Tensor grad = to(g[0], gate.dtype());
  // The kernel reads each block of gate and up before it writes the same block of the gradients: in place is
  // exact. At a LLaMA step's peak this holds two [tokens, ffn] buffers fewer (docs/recompute.md).
  Tensor grad_gate, grad_up;
  if (gate.impl() != up.impl()) {
    grad_gate = reuse_saved_buffer(gate, n.holds_saved(0));
    grad_up = reuse_saved_buffer(up, n.holds_saved(1));
  }
  if (!grad_gate.defined()) grad_gate = Tensor::empty(gate.shape(), gate.dtype(), gate.device());
  if (!grad_up.defined()) grad_up = Tensor::empty(up.shape(), up.dtype(), up.device());
  enqueue(op_swiglu_backward, {grad, gate, up}, {grad_gate, grad_up});
  if (n.needs_grad(0)) gi[0] = grad_gate;
  if (n.needs_grad(1)) gi[1] = grad_up;
}
void swiglu_packed_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  Tensor x = n.saved(0);
  if (grad_enabled()) {  // the halves as differentiable views, the two gradients joined by cat
    const int64_t last = x.dim() - 1, half = x.shape()[last] / 2;
    auto [grad_gate, grad_up] = swiglu_composed(g[0], narrow(x, last, 0, half), narrow(x, last, half, half));
    const Tensor pieces[2] = {grad_gate, grad_up};
    gi[0] = cat(pieces, last);
    return;
  }
  Tensor grad = to(g[0], x.dtype());
  auto [gate, up] = halves(x);
  Tensor grad_x = Tensor::empty(x.shape(), x.dtype(), x.device());
  auto [grad_gate, grad_up] = halves(grad_x);
  enqueue(op_swiglu_backward, {grad, gate, up}, {grad_gate, grad_up});
  gi[0] = grad_x;
}
}  // namespace

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  check_defined("swiglu", gate, "gate");
  check_defined("swiglu", up, "up");
  check_same_device("swiglu", gate, up);
  check_floating("swiglu", gate);
  DG_CHECK(same_shape(gate.shape(), up.shape()), Value, "[swiglu] gate of shape ", gate.shape(),
           " and up of shape ", up.shape(), " must have the same shape");
  DG_CHECK(gate.dtype() == up.dtype(), Type, "[swiglu] gate dtype ", dtype_name(gate.dtype()), " differs from up dtype ",
           dtype_name(up.dtype()));
  DG_CHECK(gate.dim() >= 1, Value, "[swiglu] expected inputs with at least 1 dim, got shape ", gate.shape());
  Tensor y = Tensor::empty(gate.shape(), gate.dtype(), gate.device());
  enqueue(op_swiglu, {gate, up}, {y});
  if (needs_grad_any({gate, up})) {
    Tensor inputs[2] = {gate, up}, outputs[1] = {y};
    Ref<Node> node = record_node(&op_swiglu, inputs, outputs);
    node->save(gate);
    node->save(up);
  }
  return y;
}

Tensor swiglu(const Tensor& x) {
  check_defined("swiglu", x);
  check_floating("swiglu", x);
  DG_CHECK(x.dim() >= 1 && x.shape()[x.dim() - 1] % 2 == 0, Value,
           "[swiglu] the single-input form needs a last dim of even size (gate, up), got shape ", x.shape());
  auto [gate, up] = halves(x);
  Tensor y = Tensor::empty(gate.shape(), x.dtype(), x.device());
  enqueue(op_swiglu_packed, {gate, up}, {y});
  if (needs_grad_any({x})) {
    Tensor inputs[1] = {x}, outputs[1] = {y};
    Ref<Node> node = record_node(&op_swiglu_packed, inputs, outputs);
    node->save(x);
  }
  return y;
}

// --- the fused optimizer steps (adamw_step, sgd_step) ---------------------------------------------------
namespace {
// P tensors: a step's inputs are its outputs (updated in place), then P gradients, then lr and the other
// hyper-parameters, so P = inputs - outputs - 2 (adamw_step: outputs 4P, or 5P with the low-precision copies of
// master weights; sgd_step: the params, then with momentum the buffers and their initialized flags).
size_t step_count(const Task& t) { return t.inputs.size() - t.outputs.size() - 2; }
// The pieces of `piece` elements the P params (the first P outputs) are cut into: the kernels' work list.
size_t step_pieces(const Task& t, int64_t piece) {
  size_t pieces = 0;
  for (size_t i = 0; i < step_count(t); ++i) pieces += static_cast<size_t>((t.outputs[i].numel() + piece - 1) / piece);
  return pieces;
}
}  // namespace

// --- adamw_step ----------------------------------------------------------------------------------------
namespace {
OpCost adamw_cost(const Task& t) {
  const size_t count = step_count(t);
  const bool copies = t.outputs.size() == 5 * count;
  double elements = 0, bytes = 0;
  for (size_t i = 0; i < count; ++i) {
    const Tensor& p = t.outputs[i];
    elements += double(p.numel());
    // read g, p, m, v; write p, m, v (and the copy)
    bytes += double(p.numel()) * (6 * double(p.itemsize()) + double(t.inputs[t.outputs.size() + i].itemsize()) +
                                  (copies ? double(t.outputs[4 * count + i].itemsize()) : 0.0));
  }
  return {12 * elements, bytes};
}
}  // namespace

namespace {
// The hyper-parameter tensors a fused optimizer step reads when it runs: lr a 0-d floating tensor, hyper a
// contiguous float64 vector of `count` values (adamw_step: betas, eps, weight decay; sgd_step: momentum, dampening,
// weight decay).
void check_step_scalars(const char* name, const Tensor& lr, const Tensor& hyper, int64_t count) {
  check_defined(name, lr, "lr");
  check_defined(name, hyper, "hyper");
  DG_CHECK(lr.dim() == 0 && is_floating(lr.dtype()), Value, "[", name, "] lr must be a 0-d floating tensor, got ",
           dtype_name(lr.dtype()), " of shape ", lr.shape());
  DG_CHECK(hyper.dtype() == DType::Float64 && hyper.dim() == 1 && hyper.shape()[0] == count && hyper.is_contiguous(),
           Value, "[", name, "] hyper must be a contiguous float64 tensor of shape [", count, "], got ",
           dtype_name(hyper.dtype()), " of shape ", hyper.shape());
}
}  // namespace

// Scratch of the CPU kernel (backend/cpu/fused_adamw.cpp): its list of pieces of kAdamWPiece elements, each
// {tensor, begin, end}, and two doubles per tensor (its step size and bias correction); outputs are (params,
// exp_avgs, exp_avg_sqs, steps), count each.
size_t adamw_scratch(const Task& t) {
  const size_t count = step_count(t), pieces = step_pieces(t, kAdamWPiece);
  return scratch_bytes(static_cast<int64_t>(pieces), 3 * sizeof(int64_t)) + 2 * scratch_bytes<double>(static_cast<int64_t>(count));
}
const OpDef op_adamw("adamw_step", attrs_type<AdamWAttrs>(), {.cost = adamw_cost, .scratch = adamw_scratch,
                                                                     .alias_of = alias_each_output});

std::pair<Tensor, Tensor> adamw_hyper_tensors(const AdamWOptions& o, Device device) {
  const int64_t four[1] = {4};
  return {full(Dims{}, o.lr, {.dtype = DType::Float64, .device = device}),
          to_device(from_vector(std::vector<double>{o.beta1, o.beta2, o.eps, o.weight_decay}, four, DType::Float64),
                    device)};
}

void adamw_step(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> exp_avgs,
                std::span<Tensor> exp_avg_sqs, std::span<Tensor> state_steps, const AdamWOptions& o,
                std::span<Tensor> model_params) {
  const char* name = "adamw_step";
  DG_CHECK(o.lr >= 0, Value, "[", name, "] Invalid learning rate: ", o.lr);
  DG_CHECK(o.eps >= 0, Value, "[", name, "] Invalid epsilon value: ", o.eps);
  DG_CHECK(o.beta1 >= 0 && o.beta1 < 1, Value, "[", name, "] Invalid beta parameter at index 0: ", o.beta1);
  DG_CHECK(o.beta2 >= 0 && o.beta2 < 1, Value, "[", name, "] Invalid beta parameter at index 1: ", o.beta2);
  DG_CHECK(o.weight_decay >= 0, Value, "[", name, "] Invalid weight_decay value: ", o.weight_decay);
  if (params.empty()) return;
  const auto [lr, hyper] = adamw_hyper_tensors(o, params[0].device());
  adamw_step(params, grads, exp_avgs, exp_avg_sqs, state_steps, lr, hyper, o.decoupled_weight_decay, model_params);
}

void adamw_step(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> exp_avgs,
                std::span<Tensor> exp_avg_sqs, std::span<Tensor> state_steps, const Tensor& lr, const Tensor& hyper,
                bool decoupled_weight_decay, std::span<Tensor> model_params) {
  const char* name = "adamw_step";
  const bool masters = !model_params.empty();
  DG_CHECK(!masters || model_params.size() == params.size(), Value, "[", name, "] expected one model param per master "
           "param: ", params.size(), " params, ", model_params.size(), " model_params");
  DG_CHECK(grads.size() == params.size() && exp_avgs.size() == params.size() && exp_avg_sqs.size() == params.size() &&
               state_steps.size() == params.size(),
           Value, "[", name, "] expected lists of one length: ", params.size(), " params, ", grads.size(), " grads, ",
           exp_avgs.size(), " exp_avgs, ", exp_avg_sqs.size(), " exp_avg_sqs, ", state_steps.size(), " state_steps");
  check_step_scalars(name, lr, hyper, 4);
  if (params.empty()) return;
  NoGradGuard no_grad;
  SmallVector<Tensor, 4> inputs;
  SmallVector<Tensor, 2> outputs;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    check_defined(name, p, "params");
    check_defined(name, grads[i], "grads");
    check_defined(name, exp_avgs[i], "exp_avgs");
    check_defined(name, exp_avg_sqs[i], "exp_avg_sqs");
    check_floating(name, p);
    DG_CHECK(p.is_leaf(), Runtime, "[", name, "] param ", i, " of shape ", p.shape(), " is not a leaf tensor");
    if (masters) {
      // Master weights: float32 params and states; the grad float32 or the model param's dtype (bfloat16 or
      // float16), whose copy of the updated master the kernel writes, rounded once.
      const Tensor& low = model_params[i];
      check_defined(name, low, "model_params");
      check_same_device(name, p, low);
      DG_CHECK(p.dtype() == DType::Float32 && (low.dtype() == DType::BFloat16 || low.dtype() == DType::Float16), Type,
               "[", name, "] master param ", i, " must be float32 and its model param bfloat16 or float16, got ",
               dtype_name(p.dtype()), " and ", dtype_name(low.dtype()));
      DG_CHECK(grads[i].dtype() == DType::Float32 || grads[i].dtype() == low.dtype(), Type, "[", name, "] param ", i,
               ": the grad must be float32 or the model param's ", dtype_name(low.dtype()), ", got ",
               dtype_name(grads[i].dtype()));
      DG_CHECK(same_shape(low.shape(), p.shape()) && low.is_contiguous(), Value, "[", name, "] model param ", i,
               " of shape ", low.shape(), " must be contiguous and of its master's shape ", p.shape());
    }
    const Tensor* related[3] = {&grads[i], &exp_avgs[i], &exp_avg_sqs[i]};
    for (const Tensor* t : related) {
      check_same_device(name, p, *t);
      DG_CHECK(t->dtype() == p.dtype() || (masters && t == &grads[i]), Type, "[", name, "] param ", i, " is ",
               dtype_name(p.dtype()), " but its grad or state is ", dtype_name(t->dtype()));
      DG_CHECK(same_shape(t->shape(), p.shape()), Value, "[", name, "] param ", i, " has shape ", p.shape(),
               " but its grad or state has shape ", t->shape());
    }
    DG_CHECK(p.is_contiguous() && exp_avgs[i].is_contiguous() && exp_avg_sqs[i].is_contiguous(), Value, "[", name,
             "] param ", i, " of shape ", p.shape(), " or its state is not contiguous");
    check_defined(name, state_steps[i], "state_steps");
    check_same_device(name, p, state_steps[i]);
    check_same_device(name, p, lr);
    check_same_device(name, p, hyper);
    DG_CHECK(state_steps[i].dtype() == DType::Float32 && state_steps[i].dim() == 0, Type, "[", name, "] state_steps[",
             i, "] must be a 0-d float32 tensor, got ", dtype_name(state_steps[i].dtype()), " of shape ",
             state_steps[i].shape());
  }
  // Updated in place: outputs, and inputs too (alias_each_output: input i is output i), then the gradients.
  for (Tensor& p : params) outputs.push_back(p);
  for (Tensor& m : exp_avgs) outputs.push_back(m);
  for (Tensor& v : exp_avg_sqs) outputs.push_back(v);
  for (Tensor& s : state_steps) outputs.push_back(s);
  for (Tensor& l : model_params) outputs.push_back(l);
  for (const Tensor& t : outputs) inputs.push_back(t);
  for (const Tensor& g : grads) inputs.push_back(contiguous(g));
  inputs.push_back(lr);
  inputs.push_back(hyper);
  for (Tensor& t : outputs) t.storage().bump_version();
  const AdamWAttrs attrs{decoupled_weight_decay};
  enqueue(op_adamw, std::span<const Tensor>(inputs.data(), inputs.size()),
          std::span<const Tensor>(outputs.data(), outputs.size()), attrs);
}

// --- sgd_step ------------------------------------------------------------------------------------------
namespace {
OpCost sgd_cost(const Task& t) {
  const size_t count = step_count(t);
  const bool momentum = t.outputs.size() == 3 * count;
  double elements = 0, bytes = 0;
  for (size_t i = 0; i < count; ++i) {
    const Tensor& p = t.outputs[i];
    elements += double(p.numel());
    // read g, p (and buf); write p (and buf)
    bytes += double(p.numel()) * (double(t.inputs[t.outputs.size() + i].itemsize()) +
                                  (momentum ? 4.0 : 2.0) * double(p.itemsize()));
  }
  return {(momentum ? 8.0 : 4.0) * elements, bytes};
}
}  // namespace

// Scratch of the CPU kernel (backend/cpu/fused_sgd.cpp): its list of pieces of kSgdPiece elements, each {tensor,
// begin, end}; the params are the first P outputs.
size_t sgd_scratch(const Task& t) {
  const size_t pieces = step_pieces(t, kSgdPiece);
  return scratch_bytes(static_cast<int64_t>(pieces), 3 * sizeof(int64_t));
}
const OpDef op_sgd("sgd_step", attrs_type<SgdAttrs>(), {.cost = sgd_cost, .scratch = sgd_scratch,
                                                        .alias_of = alias_each_output});

std::pair<Tensor, Tensor> sgd_hyper_tensors(const SgdOptions& o, Device device) {
  const int64_t three[1] = {3};
  return {full(Dims{}, o.lr, {.dtype = DType::Float64, .device = device}),
          to_device(from_vector(std::vector<double>{o.momentum, o.dampening, o.weight_decay}, three, DType::Float64),
                    device)};
}

void sgd_step(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> momentum_buffers,
              std::span<Tensor> momentum_initialized, const SgdOptions& o) {
  const char* name = "sgd_step";
  DG_CHECK(o.lr >= 0, Value, "[", name, "] Invalid learning rate: ", o.lr);
  DG_CHECK(o.momentum >= 0, Value, "[", name, "] Invalid momentum value: ", o.momentum);
  DG_CHECK(o.weight_decay >= 0, Value, "[", name, "] Invalid weight_decay value: ", o.weight_decay);
  DG_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), Value, "[", name,
           "] Nesterov momentum requires a momentum and zero dampening");
  DG_CHECK((o.momentum != 0) == !momentum_buffers.empty() || params.empty(), Value, "[", name, "] momentum ",
           o.momentum, " with ", momentum_buffers.size(), " momentum_buffers: expected one buffer per param exactly "
           "when momentum != 0");
  if (params.empty()) return;
  const auto [lr, hyper] = sgd_hyper_tensors(o, params[0].device());
  sgd_step(params, grads, momentum_buffers, momentum_initialized, lr, hyper, o.nesterov, o.maximize);
}

void sgd_step(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> momentum_buffers,
              std::span<Tensor> momentum_initialized, const Tensor& lr, const Tensor& hyper, bool nesterov,
              bool maximize) {
  const char* name = "sgd_step";
  const bool momentum = !momentum_buffers.empty();
  DG_CHECK(grads.size() == params.size() && (!momentum || momentum_buffers.size() == params.size()) &&
               momentum_initialized.size() == momentum_buffers.size(),
           Value, "[", name, "] expected lists of one length: ", params.size(), " params, ", grads.size(), " grads, ",
           momentum_buffers.size(), " momentum_buffers (none without momentum), ", momentum_initialized.size(),
           " momentum_initialized");
  DG_CHECK(momentum || !nesterov, Value, "[", name, "] Nesterov momentum requires momentum buffers");
  check_step_scalars(name, lr, hyper, 3);
  if (params.empty()) return;
  NoGradGuard no_grad;
  SmallVector<Tensor, 4> inputs;
  SmallVector<Tensor, 2> outputs;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    check_defined(name, p, "params");
    check_defined(name, grads[i], "grads");
    check_floating(name, p);
    DG_CHECK(p.is_leaf(), Runtime, "[", name, "] param ", i, " of shape ", p.shape(), " is not a leaf tensor");
    DG_CHECK(p.is_contiguous(), Value, "[", name, "] param ", i, " of shape ", p.shape(), " is not contiguous");
    check_same_device(name, p, lr);
    check_same_device(name, p, hyper);
    const Tensor* related[2] = {&grads[i], momentum ? &momentum_buffers[i] : nullptr};
    for (const Tensor* t : related) {
      if (!t) continue;
      check_defined(name, *t, t == &grads[i] ? "grads" : "momentum_buffers");
      check_same_device(name, p, *t);
      DG_CHECK(t->dtype() == p.dtype(), Type, "[", name, "] param ", i, " is ", dtype_name(p.dtype()),
               " but its grad or momentum buffer is ", dtype_name(t->dtype()));
      DG_CHECK(same_shape(t->shape(), p.shape()), Value, "[", name, "] param ", i, " has shape ", p.shape(),
               " but its grad or momentum buffer has shape ", t->shape());
    }
    if (!momentum) continue;
    DG_CHECK(momentum_buffers[i].is_contiguous(), Value, "[", name, "] momentum buffer ", i, " of shape ",
             p.shape(), " is not contiguous");
    const Tensor& initialized = momentum_initialized[i];
    check_defined(name, initialized, "momentum_initialized");
    check_same_device(name, p, initialized);
    DG_CHECK(initialized.dtype() == DType::Bool && initialized.dim() == 0, Type, "[", name,
             "] momentum_initialized[", i, "] must be a 0-d bool tensor, got ", dtype_name(initialized.dtype()),
             " of shape ", initialized.shape());
  }
  // Updated in place: outputs, and inputs too (alias_each_output: input i is output i), then the gradients.
  for (Tensor& p : params) outputs.push_back(p);
  for (Tensor& b : momentum_buffers) outputs.push_back(b);
  for (Tensor& f : momentum_initialized) outputs.push_back(f);
  for (const Tensor& t : outputs) inputs.push_back(t);
  for (const Tensor& g : grads) inputs.push_back(contiguous(g));
  inputs.push_back(lr);
  inputs.push_back(hyper);
  for (Tensor& t : outputs) t.storage().bump_version();
  const SgdAttrs attrs{momentum, nesterov, maximize};
  enqueue(op_sgd, std::span<const Tensor>(inputs.data(), inputs.size()),
          std::span<const Tensor>(outputs.data(), outputs.size()), attrs);
}

}  // namespace dg
