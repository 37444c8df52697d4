// The elementwise builder (ops/elementwise_call.h; docs/ops.md, "The elementwise builder").
#include "dygrad/ops/elementwise_call.h"

#include "dygrad/core/shape.h"
#include "dygrad/ops/complex.h"
#include "dygrad/ops/device.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/layout.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/shape.h"

namespace dg {

bool can_cast_result(DType from, DType to) {
  if (is_complex(from) && !is_complex(to)) return false;
  if (is_floating(from) && !is_differentiable(to)) return false;
  if (from != DType::Bool && to == DType::Bool) return false;
  return true;
}

ElementwiseCall::ElementwiseCall(const OpDef& op, const char* name) : op_(op), name_(name) {}

const char* ElementwiseCall::name() const { return api_name(name_); }

void ElementwiseCall::FreeMoved::operator()(std::deque<Tensor>* moved) const { delete moved; }

const Tensor& ElementwiseCall::on_common_device(const Tensor& t) {
  const Device common = operands_[0]->device();
  auto keep = [&](Tensor moved) -> const Tensor& {
    if (!moved_) moved_.reset(new std::deque<Tensor>());
    return moved_->emplace_back(std::move(moved));
  };
  if (common != Device::cpu() && t.device().is_cpu() && t.dim() == 0) return keep(to_device(t, common));
  bool cpu_scalars = true;
  for (const Tensor* o : operands_) cpu_scalars = cpu_scalars && o->device().is_cpu() && o->dim() == 0;
  if (cpu_scalars) {
    for (const Tensor*& o : operands_) o = &keep(to_device(*o, t.device()));
    moved_first_ = true;
    return t;
  }
  check_same_device(name(), *operands_[0], t);  // raises, naming both
  return t;
}

ElementwiseCall& ElementwiseCall::input(const Tensor& t_in, const char* argument, bool promotes) {
  if (!t_in.defined()) [[unlikely]] check_defined(name(), t_in, argument);
  const Tensor& t = !operands_.empty() && t_in.device() != operands_[0]->device() ? on_common_device(t_in) : t_in;
  if (promotes) {
    promoting_ |= 1u << operands_.size();
    promotion_types_.add_tensor(t.dtype(), t.dim());
  } else {
    DG_CHECK(t.dtype() == DType::Bool, Type, "[", name(), "] expected ", argument, " to be a bool tensor, got ",
             dtype_name(t.dtype()));
  }
  operands_.push_back(&t);
  return *this;
}

ElementwiseCall& ElementwiseCall::scalar(Scalar s) {
  promotion_types_.add_scalar(s);
  return *this;
}

ElementwiseCall& ElementwiseCall::promotion(Promotion p) {
  promotion_ = p;
  return *this;
}

ElementwiseCall& ElementwiseCall::save(SaveFn fn, bool reads_old_self) {
  save_ = fn;
  reads_old_self_ = reads_old_self;
  return *this;
}

ElementwiseCall& ElementwiseCall::contiguous_output() {
  contiguous_output_ = true;
  return *this;
}

ElementwiseCall& ElementwiseCall::refuse_bool(const char* message) {
  bool_refusal_ = message;
  return *this;
}

DType ElementwiseCall::compute_dtype() const {
  switch (promotion_) {
    case Promotion::Logical: return DType::Bool;
    case Promotion::PromoteFloat: {
      const DType t = promotion_types_.result();
      return is_differentiable(t) ? t : DType::Float32;
    }
    case Promotion::Promote:
    case Promotion::Compare: return promotion_types_.result();
  }
  return promotion_types_.result();
}

DType ElementwiseCall::result_dtype() const {
  return promotion_ == Promotion::Compare || promotion_ == Promotion::Logical ? DType::Bool : compute_dtype();
}

void ElementwiseCall::check_bool_rule(DType compute) const {
  DG_CHECK(!(bool_refusal_ && compute == DType::Bool), Type, "[", name(), "] ", bool_refusal_);
}

IntSpan ElementwiseCall::broadcast_shape(Dims& storage) const {
  const IntSpan first = operands_[0]->shape();
  bool same = true;
  for (size_t k = 1; k < operands_.size() && same; ++k) {
    const IntSpan other = operands_[k]->shape();
    same = other.size() == first.size();
    for (size_t d = 0; same && d < first.size(); ++d) same = first[d] == other[d];
  }
  if (same) return first;
  storage = Dims(first);
  for (size_t k = 1; k < operands_.size(); ++k) storage = broadcast_shapes(name(), storage, operands_[k]->shape());
  return storage;
}

// The operands as the Task reads them: promoting ones cast to `dtype` (no copy when it already matches).
SmallVector<Tensor, 4> ElementwiseCall::cast_operands(DType dtype) const {
  SmallVector<Tensor, 4> cast;
  for (size_t k = 0; k < operands_.size(); ++k) {
    const Tensor& t = *operands_[k];
    if (promoting_ >> k & 1u && t.dtype() != dtype) cast.push_back(to(t, dtype));
    else cast.push_back(t);  // one reference count increment: no temporary
  }
  return cast;
}

Tensor ElementwiseCall::run() {
  const DType compute = compute_dtype();
  // Complex operands: composed of real ops on view_as_real (ops/complex.cpp); eq and ne run their own kernels.
  if (is_complex(compute) && !(op_.flags & kOpAnyDType)) [[unlikely]] return run_complex(compute);
  const DType result = promotion_ == Promotion::Compare || promotion_ == Promotion::Logical ? DType::Bool : compute;
  check_bool_rule(compute);
  Dims storage;
  const IntSpan shape = broadcast_shape(storage);
  SmallVector<Tensor, 4> inputs = cast_operands(compute);
  const std::span<const Tensor> in(inputs.data(), inputs.size());
  Tensor outputs[1] = {contiguous_output_ ? Tensor::empty(shape, result, in[0].device())
                                          : empty_elementwise(shape, result, in)};
  enqueue(op_, in, outputs, attrs_);
  if (op_.backward && needs_grad_any(in)) {
    Ref<Node> node = record_node(&op_, in, outputs);
    node->attrs = attrs_;
    if (save_) save_(*node, in, detach(outputs[0]));
  }
  return std::move(outputs[0]);
}

Tensor ElementwiseCall::run_complex(DType compute) {
  SmallVector<Tensor, 4> inputs = cast_operands(compute);
  return complex_elementwise(op_, name(), std::span<const Tensor>(inputs.data(), inputs.size()), attrs_);
}

Tensor& ElementwiseCall::run_inplace(Tensor& self) {
  const char* api = name();
  DG_CHECK(!moved_first_, Runtime, "[", api, "] expected all tensors to be on the same device, but found ",
           self.device().str(), " and ", operands_[0]->device().str(), " (a cpu scalar tensor is written in place only "
           "by cpu tensors)");
  DG_CHECK(!operands_.empty() && operands_[0]->same(self), Runtime, "[", api, "] internal error: operand 0 must be self");
  const DType result = result_dtype();
  DG_CHECK(can_cast_result(result, self.dtype()), Runtime, "[", api, "] result type ", dtype_name(result),
           " can't be cast to the desired output type ", dtype_name(self.dtype()));
  if (is_complex(self.dtype()) && !(op_.flags & kOpAnyDType)) [[unlikely]] {  // computed aside, then copied in
    Tensor value = run_complex(self.dtype());
    return copy_(self, value);
  }
  // Computed in self's dtype (comparisons in the promoted one, written into self's).
  const DType compute = promotion_ == Promotion::Compare || promotion_ == Promotion::Logical ? compute_dtype()
                                                                                              : self.dtype();
  check_bool_rule(compute_dtype());
  Dims storage;
  const IntSpan shape = broadcast_shape(storage);
  DG_CHECK(same_shape(shape, self.shape()), Runtime, "[", api, "] output with shape ", self.shape(),
           " doesn't match the broadcast shape ", IntSpan(shape));
  detail::check_no_internal_overlap(api, self);
  bool operands_require_grad = false;
  for (size_t k = 1; k < operands_.size(); ++k) operands_require_grad = operands_require_grad || operands_[k]->requires_grad();
  check_inplace(api, self, operands_require_grad);
  DG_CHECK(compute == self.dtype(), NotImplemented, "[", api, "] in-place comparison into a ", dtype_name(self.dtype()),
           " tensor is not supported");
  SmallVector<Tensor, 4> inputs = cast_operands(compute);
  inputs[0] = self;
  for (size_t k = 1; k < inputs.size(); ++k)  // reading self's own storage while writing it: copy the source
    if (inputs[k].shares_storage(self) && !inputs[k].same(self)) inputs[k] = clone(inputs[k]);
  const std::span<const Tensor> in(inputs.data(), inputs.size());
  const bool record = op_.backward && needs_grad_any(in);
  Ref<Node> node;
  SmallVector<Tensor, 4> saved_inputs;
  if (record) {
    node = make_ref<Node>(&op_, 1);
    record_node(node, in, {});
    node->attrs = attrs_;
    if (save_) {
      saved_inputs = inputs;
      if (reads_old_self_) saved_inputs[0] = clone(self);  // the old value, which the op overwrites
    }
  }
  self.storage().bump_version();
  enqueue(op_, in, std::span<const Tensor>(&self, 1), attrs_);
  if (record) {
    if (save_) save_(*node, std::span<const Tensor>(saved_inputs.data(), saved_inputs.size()), detach(self));
    rebase_history(self, node);
  }
  return self;
}

Tensor& ElementwiseCall::run_out(Tensor& out) {
  const char* api = name();
  check_defined(api, out, "out");
  check_same_device(api, *operands_[0], out);
  bool any_requires_grad = false;
  for (const Tensor* t : operands_) any_requires_grad = any_requires_grad || t->requires_grad();
  DG_CHECK(!(grad_enabled() && any_requires_grad), Runtime,
           "[", api, "] functions with out=... arguments don't support automatic differentiation, but one of the "
           "arguments requires grad");
  const DType result = result_dtype();
  DG_CHECK(can_cast_result(result, out.dtype()), Runtime, "[", api, "] result type ", dtype_name(result),
           " can't be cast to the desired output type ", dtype_name(out.dtype()));
  Dims storage;
  const IntSpan shape = broadcast_shape(storage);
  DG_CHECK(same_shape(shape, out.shape()), Runtime, "[", api, "] out= of shape ", out.shape(),
           " doesn't match the broadcast shape ", IntSpan(shape), " (dygrad does not resize out=)");
  detail::check_no_internal_overlap(api, out);
  check_inplace(api, out);
  const DType compute = compute_dtype();
  check_bool_rule(compute);
  if (result != out.dtype() || is_complex(compute)) {  // computed in the result dtype, then cast into out (as torch)
    Tensor value = run();
    return copy_(out, value);
  }
  SmallVector<Tensor, 4> inputs = cast_operands(compute);
  for (Tensor& t : inputs)
    if (t.shares_storage(out) && !t.same(out)) t = clone(t);
  out.storage().bump_version();
  enqueue(op_, std::span<const Tensor>(inputs.data(), inputs.size()), std::span<const Tensor>(&out, 1), attrs_);
  return out;
}

}  // namespace dg
