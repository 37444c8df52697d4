// The elementwise builder: how every elementwise and comparison op is written (docs/ops.md, "The elementwise
// builder"). An op lists its operands (tensors, and scalars that take part in type promotion as Python numbers
// do in torch; their values travel in the attributes), its result-dtype rule and what its backward saves, then
// runs in one of three forms: a new output laid out like the inputs, in place into operand 0, or into an out=
// tensor. The builder checks devices and broadcasting, promotes and casts the tensor operands, enqueues the
// Task and records the autograd node; its errors name the function the user called.
//
//   Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
//     return ElementwiseCall(op_add, "sub").input(a).input(b, "other").attrs(AddAttrs{-alpha}).run();
//   }
#pragma once
#include <deque>
#include <memory>
#include <span>

#include "dygrad/autograd/node.h"
#include "dygrad/core/tensor.h"
#include "dygrad/runtime/op_def.h"

namespace dg {

// The result dtype of an elementwise call.
enum class Promotion : uint8_t {
  Promote,       // torch.result_type of the promoting operands
  PromoteFloat,  // the same; an integral or bool result becomes float32 (true division, exp, log ...)
  Compare,       // computed in the promoted dtype, written as bool (eq, lt ...)
  Logical,       // operands cast to bool, bool result (logical_and, logical_or)
};

// Saves what an op's backward reads. `inputs` are the Task's operands after the cast (in place: operand 0 is a
// copy of the target's old value when the call says the backward reads it); `output` is the result, detached.
using SaveFn = void (*)(Node& node, std::span<const Tensor> inputs, const Tensor& output);

// An ElementwiseCall lives for one statement (or is returned by a helper and run at once): it keeps pointers to
// its tensor operands, which the caller holds.
class ElementwiseCall {
 public:
  // `name` is what the user called ("sub", "add_"); a binding may override it (ApiNameScope, ops/dispatch.h).
  ElementwiseCall(const OpDef& op, const char* name);

  // A tensor operand. `promotes`: takes part in type promotion and is cast to the computed dtype; otherwise it
  // is passed as it is (a bool mask or condition, checked to be bool).
  ElementwiseCall& input(const Tensor& t, const char* argument = "input", bool promotes = true);
  ElementwiseCall& mask(const Tensor& t, const char* argument) { return input(t, argument, false); }
  // A Python number in the promotion (its value is in the attributes).
  ElementwiseCall& scalar(Scalar s);
  ElementwiseCall& promotion(Promotion p);
  template <typename A>
  ElementwiseCall& attrs(const A& a) {
    attrs_.set(a);
    return *this;
  }
  ElementwiseCall& attrs(const Attrs& a) {
    attrs_ = a;
    return *this;
  }
  ElementwiseCall& save(SaveFn fn, bool reads_old_self = false);
  // The output is contiguous whatever the inputs' layout (torch's masked_fill clones contiguously).
  ElementwiseCall& contiguous_output();
  // Raises TypeError with `message` (after "[name] ") when the computed dtype is bool.
  ElementwiseCall& refuse_bool(const char* message = "not supported for bool tensors");

  // The dtype the Task computes in (the result's, except for comparisons: bool).
  DType compute_dtype() const;
  DType result_dtype() const;

  Tensor run();                       // a new output of the broadcast shape, laid out like the inputs
  Tensor& run_inplace(Tensor& self);  // self (operand 0) = op(...), computed in self's dtype
  Tensor& run_out(Tensor& out);       // out = op(...): out has the broadcast shape; no autograd (as torch)

 private:
  // The broadcast shape of the operands into `storage` (a view of operand 0's shape when all are equal).
  IntSpan broadcast_shape(Dims& storage) const;
  SmallVector<Tensor, 4> cast_operands(DType dtype) const;
  Tensor run_complex(DType compute);  // complex operands: ops/complex.cpp composes the op of real ones
  void check_bool_rule(DType compute) const;
  const char* name() const;
  // An operand on another device than the ones before it: a 0-dim CPU tensor beside device tensors (torch's CPU
  // scalar) is copied to their device, and 0-dim CPU operands before a device tensor move to its device; any other
  // mix raises naming both devices.
  const Tensor& on_common_device(const Tensor& t);

  const OpDef& op_;
  const char* name_;
  SmallVector<const Tensor*, 4> operands_;
  uint32_t promoting_ = 0;  // bit k: operand k promotes
  ResultType promotion_types_;
  Promotion promotion_ = Promotion::Promote;
  Attrs attrs_;
  SaveFn save_ = nullptr;
  bool reads_old_self_ = false;
  const char* bool_refusal_ = nullptr;
  bool contiguous_output_ = false;
  bool moved_first_ = false;  // operand 0 (self, in place) is a moved CPU scalar
  // Frees the copies out of line: the call's destructor stays small enough to inline, and a call without copies
  // (every CPU call) pays one null test for them.
  struct FreeMoved {
    void operator()(std::deque<Tensor>* moved) const;
  };
  std::unique_ptr<std::deque<Tensor>, FreeMoved> moved_;  // the device copies of CPU scalars (stable addresses)
};

// torch.can_cast for in-place and out= results: a floating result does not go into an integral or bool tensor,
// an integral result not into a bool one.
bool can_cast_result(DType from, DType to);

}  // namespace dg
