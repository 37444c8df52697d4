// Arithmetic entry points: dygrad.add/sub/mul/div/neg, their Tensor methods and in-place forms, the
// operators (+ - * / unary -, reversed forms with a Python scalar on the left, += -= *= /=) as C type
// slots, and the casts (to, float, double, ...). Argument parsing only: each calls the C++ op directly.
#include <string_view>

#include "common.h"
#include "dygrad/ops/device.h"
#include "dygrad/ops/dispatch.h"

namespace dg::py {

namespace {
// One struct per binary op: the tensor-tensor, tensor-scalar and scalar-tensor (reversed operator)
// forms, and the in-place forms. `has_alpha` adds the keyword-only `alpha` (torch's add and sub).
struct Add {
  static constexpr const char* name = "add";
  static constexpr const char* inplace_name = "add_";
  static constexpr const char* inplace_operator = "Tensor.__iadd__";  // `a += b`: errors name it
  static constexpr bool has_alpha = true;
  static Tensor tensor_tensor(const Tensor& a, const Tensor& b, Scalar alpha) { return add(a, b, alpha); }
  static Tensor tensor_scalar(const Tensor& a, Scalar b, Scalar alpha) { return add(a, b, alpha); }
  static Tensor scalar_tensor(Scalar a, const Tensor& b) { return add(b, a); }
  static Tensor& inplace_tensor(Tensor& a, const Tensor& b, Scalar alpha) { return add_(a, b, alpha); }
  static Tensor& inplace_scalar(Tensor& a, Scalar b, Scalar alpha) { return add_(a, b, alpha); }
  static Tensor& out_tensor(Tensor& out, const Tensor& a, const Tensor& b, Scalar alpha) { return add_out(out, a, b, alpha); }
  static Tensor& out_scalar(Tensor& out, const Tensor& a, Scalar b, Scalar alpha) { return add_out(out, a, b, alpha); }
};
struct Sub {
  static constexpr const char* name = "sub";
  static constexpr const char* inplace_name = "sub_";
  static constexpr const char* inplace_operator = "Tensor.__isub__";  // `a -= b`: errors name it
  static constexpr bool has_alpha = true;
  static Tensor tensor_tensor(const Tensor& a, const Tensor& b, Scalar alpha) { return sub(a, b, alpha); }
  static Tensor tensor_scalar(const Tensor& a, Scalar b, Scalar alpha) { return sub(a, b, alpha); }
  static Tensor scalar_tensor(Scalar a, const Tensor& b) { return rsub(b, a); }
  static Tensor& inplace_tensor(Tensor& a, const Tensor& b, Scalar alpha) { return sub_(a, b, alpha); }
  static Tensor& inplace_scalar(Tensor& a, Scalar b, Scalar alpha) { return sub_(a, b, alpha); }
  static Tensor& out_tensor(Tensor& out, const Tensor& a, const Tensor& b, Scalar alpha) { return sub_out(out, a, b, alpha); }
  static Tensor& out_scalar(Tensor& out, const Tensor& a, Scalar b, Scalar alpha) { return sub_out(out, a, b, alpha); }
};
struct Mul {
  static constexpr const char* name = "mul";
  static constexpr const char* inplace_name = "mul_";
  static constexpr const char* inplace_operator = "Tensor.__imul__";  // `a *= b`: errors name it
  static constexpr bool has_alpha = false;
  static Tensor tensor_tensor(const Tensor& a, const Tensor& b, Scalar) { return mul(a, b); }
  static Tensor tensor_scalar(const Tensor& a, Scalar b, Scalar) { return mul(a, b); }
  static Tensor scalar_tensor(Scalar a, const Tensor& b) { return mul(b, a); }
  static Tensor& inplace_tensor(Tensor& a, const Tensor& b, Scalar) { return mul_(a, b); }
  static Tensor& inplace_scalar(Tensor& a, Scalar b, Scalar) { return mul_(a, b); }
  static Tensor& out_tensor(Tensor& out, const Tensor& a, const Tensor& b, Scalar) { return mul_out(out, a, b); }
  static Tensor& out_scalar(Tensor& out, const Tensor& a, Scalar b, Scalar) { return mul_out(out, a, b); }
};
struct Div {
  static constexpr const char* name = "div";
  static constexpr const char* inplace_name = "div_";
  static constexpr const char* inplace_operator = "Tensor.__itruediv__";  // `a /= b`: errors name it
  static constexpr bool has_alpha = false;
  static Tensor tensor_tensor(const Tensor& a, const Tensor& b, Scalar) { return div(a, b); }
  static Tensor tensor_scalar(const Tensor& a, Scalar b, Scalar) { return div(a, b); }
  static Tensor scalar_tensor(Scalar a, const Tensor& b) { return rdiv(b, a); }
  static Tensor& inplace_tensor(Tensor& a, const Tensor& b, Scalar) { return div_(a, b); }
  static Tensor& inplace_scalar(Tensor& a, Scalar b, Scalar) { return div_(a, b); }
  static Tensor& out_tensor(Tensor& out, const Tensor& a, const Tensor& b, Scalar) { return div_out(out, a, b); }
  static Tensor& out_scalar(Tensor& out, const Tensor& a, Scalar b, Scalar) { return div_out(out, a, b); }
};

// dygrad.<op>(input, other, *, alpha=1, out=None) and Tensor.<op>(other, *, alpha=1).
template <class Op>
PyObject* binary_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig(Op::name, {"input", "other", "alpha", "out"}, 2, 2);
  PyObject* a[4];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  if (!Op::has_alpha && a[2]) return type_error(Op::name, "got an unexpected keyword argument 'alpha'");
  const Tensor* input = to_tensor(Op::name, "input", a[0]);
  Operand other;
  Scalar alpha;
  if (!input || !to_operand(Op::name, "other", a[1], other, input) ||
      !to_scalar_argument(Op::name, "alpha", a[2], 1, alpha))
    return nullptr;
  if (a[3] && a[3] != Py_None) {  // out=: written and returned
    if (!to_tensor(Op::name, "out", a[3])) return nullptr;
    return guarded([&] {
      Tensor& out = unwrap(a[3]);
      if (other.tensor) Op::out_tensor(out, *input, *other.tensor, alpha);
      else Op::out_scalar(out, *input, other.scalar, alpha);
      Py_INCREF(a[3]);
      return a[3];
    });
  }
  return guarded([&] {
    return wrap(other.tensor ? Op::tensor_tensor(*input, *other.tensor, alpha)
                             : Op::tensor_scalar(*input, other.scalar, alpha));
  });
}

// Tensor.<op>_(other, *, alpha=1): returns self.
template <class Op>
PyObject* inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig(Op::inplace_name, {"self", "other", "alpha"}, 2, 2);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  if (!Op::has_alpha && a[2]) return type_error(Op::inplace_name, "got an unexpected keyword argument 'alpha'");
  const Tensor* input = to_tensor(Op::inplace_name, "self", a[0]);
  Operand other;
  Scalar alpha;
  if (!input || !to_operand(Op::inplace_name, "other", a[1], other, input) ||
      !to_scalar_argument(Op::inplace_name, "alpha", a[2], 1, alpha))
    return nullptr;
  return guarded([&] {
    Tensor& target = unwrap(a[0]);
    if (other.tensor) Op::inplace_tensor(target, *other.tensor, alpha);
    else Op::inplace_scalar(target, other.scalar, alpha);
    Py_INCREF(a[0]);
    return a[0];
  });
}

// The operator slots: `a op b` with a Tensor on either side; NotImplemented for other operand types.
template <class Op>
PyObject* binary_slot(PyObject* a, PyObject* b) {
  Scalar s;
  if (is_tensor(a)) {
    if (is_tensor(b)) return guarded([&] { return wrap(Op::tensor_tensor(unwrap(a), unwrap(b), 1)); });
    if (to_scalar(b, s)) return guarded([&] { return wrap(Op::tensor_scalar(unwrap(a), s, 1)); });
    if (PyComplex_Check(b))
      return guarded([&] { return wrap(Op::tensor_tensor(unwrap(a), complex_number(b, unwrap(a)), 1)); });
  } else if (is_tensor(b) && to_scalar(a, s)) {
    return guarded([&] { return wrap(Op::scalar_tensor(s, unwrap(b))); });
  } else if (is_tensor(b) && PyComplex_Check(a)) {
    return guarded([&] { return wrap(Op::tensor_tensor(complex_number(a, unwrap(b)), unwrap(b), 1)); });
  }
  return not_implemented_unless_error();
}

template <class Op>
PyObject* inplace_slot(PyObject* a, PyObject* b) {
  Scalar s;
  if (!is_tensor(a)) Py_RETURN_NOTIMPLEMENTED;
  ApiNameScope name(Op::inplace_operator);
  if (is_tensor(b)) {
    return guarded([&] {
      Op::inplace_tensor(unwrap(a), unwrap(b), 1);
      Py_INCREF(a);
      return a;
    });
  }
  if (to_scalar(b, s)) {
    return guarded([&] {
      Op::inplace_scalar(unwrap(a), s, 1);
      Py_INCREF(a);
      return a;
    });
  }
  if (PyComplex_Check(b)) {
    return guarded([&] {
      Op::inplace_tensor(unwrap(a), complex_number(b, unwrap(a)), 1);
      Py_INCREF(a);
      return a;
    });
  }
  return not_implemented_unless_error();
}

PyObject* neg_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("neg", {"input"}, 1, 1);
  PyObject* a[1];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("neg", "input", a[0]);
  if (!input) return nullptr;
  return guarded([&] { return wrap(neg(*input)); });
}

PyObject* negative_slot(PyObject* a) { return guarded([&] { return wrap(neg(unwrap(a))); }); }
PyObject* positive_slot(PyObject* a) {
  Py_INCREF(a);
  return a;
}

// --- casts -----------------------------------------------------------------------------------------------------------
// Tensor.to(dtype) / to(other) / to(device) / to(device, dtype), with copy=False: the dtype cast on the tensor's own
// device, then the copy between devices (ops/device.h).
PyObject* to_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("to", {"self", "a", "b", "dtype", "device", "copy", "non_blocking", "memory_format"}, 3, 1);
  PyObject* a[8];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("to", "self", a[0]);
  if (!input) return nullptr;
  DType dtype = input->dtype();
  Device device = input->device();
  auto take = [&](PyObject* o, bool device_slot) -> bool {
    if (!o || o == Py_None) return true;
    if (is_tensor(o)) {
      const Tensor& other = unwrap(o);
      dtype = other.dtype();
      device = other.device();
      return true;
    }
    if (device_slot || PyUnicode_Check(o) || (PyLong_Check(o) && !PyBool_Check(o))) return to_device_arg("to", o, device);
    return to_dtype("to", o, dtype);
  };
  if (!take(a[1], false) || !take(a[2], false) || !take(a[3], false) || !take(a[4], true) ||
      !device_available("to", device))
    return nullptr;
  bool copy, non_blocking;
  if (!to_bool_argument("to", "copy", a[5], false, copy)) return nullptr;
  if (!to_bool_argument("to", "non_blocking", a[6], false, non_blocking)) return nullptr;
  return guarded([&] {
    Tensor out = input->device() == device ? to(*input, dtype, copy) : to_device(to(*input, dtype), device, non_blocking);
    // torch returns self itself when nothing changes (x.to(x.dtype) is x).
    return out.impl() == input->impl() ? Py_NewRef(a[0]) : wrap(std::move(out));
  });
}

template <DType Target>
PyObject* cast_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig(dtype_name(Target), {"self"}, 1, 1);
  PyObject* a[1];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(dtype_name(Target), "self", a[0]);
  if (!input) return nullptr;
  return guarded([&] { return wrap(to(*input, Target)); });
}

PyObject* clone_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("clone", {"input", "memory_format"}, 1, 1);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("clone", "input", a[0]);
  if (!input) return nullptr;
  return guarded([&] { return wrap(clone(*input)); });
}

PyObject* contiguous_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("contiguous", {"self", "memory_format"}, 1, 1);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("contiguous", "self", a[0]);
  if (!input) return nullptr;
  if (input->is_contiguous()) {  // torch returns self itself
    Py_INCREF(a[0]);
    return a[0];
  }
  return guarded([&] { return wrap(contiguous(*input)); });
}

PyObject* copy_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("copy_", {"self", "src", "non_blocking"}, 2, 2);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("copy_", "self", a[0]);
  const Tensor* src = input ? to_tensor("copy_", "src", a[1]) : nullptr;
  if (!src) return nullptr;
  return guarded([&] {
    copy_(unwrap(a[0]), *src);
    Py_INCREF(a[0]);
    return a[0];
  });
}

PyObject* fill_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("fill_", {"self", "value"}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("fill_", "self", a[0]);
  if (input && is_tensor(a[1])) {  // a 0-dim tensor value, as torch: copied on the stream, no host read
    return guarded([&] {
      const Tensor& value = unwrap(a[1]);
      DG_CHECK(value.dim() == 0, Runtime, "[fill_] fill_ only supports 0-dimension value tensor but got tensor with ",
               value.dim(), " dimensions.");
      copy_(unwrap(a[0]), value);
      Py_INCREF(a[0]);
      return a[0];
    });
  }
  Scalar value;
  if (!input || !to_scalar_argument("fill_", "value", a[1], 0, value)) return nullptr;
  return guarded([&] {
    fill_(unwrap(a[0]), value);
    Py_INCREF(a[0]);
    return a[0];
  });
}

PyObject* zero_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("zero_", {"self"}, 1, 1);
  PyObject* a[1];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  if (!to_tensor("zero_", "self", a[0])) return nullptr;
  return guarded([&] {
    fill_(unwrap(a[0]), 0);
    Py_INCREF(a[0]);
    return a[0];
  });
}

PyObject* result_type_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("result_type", {"tensor", "other"}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("result_type", "tensor", a[0]);
  Operand other;
  if (!input || !to_operand("result_type", "other", a[1], other)) return nullptr;
  return guarded([&] {
    DType t = other.tensor ? result_type(*input, *other.tensor) : result_type(*input, other.scalar);
    PyObject* o = dtype_object(t);
    Py_INCREF(o);
    return o;
  });
}

PyObject* promote_types_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("promote_types", {"type1", "type2"}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  DType first, second;
  if (!to_dtype("promote_types", a[0], first) || !to_dtype("promote_types", a[1], second)) return nullptr;
  return guarded([&] {
    PyObject* o = dtype_object(promote_types(first, second));
    Py_INCREF(o);
    return o;
  });
}

PyType_Slot g_number_slots[] = {
    {Py_nb_add, reinterpret_cast<void*>(binary_slot<Add>)},
    {Py_nb_subtract, reinterpret_cast<void*>(binary_slot<Sub>)},
    {Py_nb_multiply, reinterpret_cast<void*>(binary_slot<Mul>)},
    {Py_nb_true_divide, reinterpret_cast<void*>(binary_slot<Div>)},
    {Py_nb_inplace_add, reinterpret_cast<void*>(inplace_slot<Add>)},
    {Py_nb_inplace_subtract, reinterpret_cast<void*>(inplace_slot<Sub>)},
    {Py_nb_inplace_multiply, reinterpret_cast<void*>(inplace_slot<Mul>)},
    {Py_nb_inplace_true_divide, reinterpret_cast<void*>(inplace_slot<Div>)},
    {Py_nb_negative, reinterpret_cast<void*>(negative_slot)},
    {Py_nb_positive, reinterpret_cast<void*>(positive_slot)},
    {0, nullptr},
};
}  // namespace

const PyType_Slot* number_slots() { return g_number_slots; }

void init_ops_arithmetic(nb::module_& m) {
  static const OpEntry entries[] = {
      {"add", binary_entry<Add>, "add(input, other, *, alpha=1, out=None) -> Tensor: input + alpha * other", true, true},
      {"sub", binary_entry<Sub>, "sub(input, other, *, alpha=1, out=None) -> Tensor: input - alpha * other", true, true},
      {"subtract", binary_entry<Sub>, "subtract(input, other, *, alpha=1, out=None) -> Tensor: alias of sub", true, true},
      {"mul", binary_entry<Mul>, "mul(input, other, *, out=None) -> Tensor", true, true},
      {"multiply", binary_entry<Mul>, "multiply(input, other, *, out=None) -> Tensor: alias of mul", true, true},
      {"div", binary_entry<Div>, "div(input, other, *, out=None) -> Tensor: true division", true, true},
      {"divide", binary_entry<Div>, "divide(input, other, *, out=None) -> Tensor: alias of div", true, true},
      {"true_divide", binary_entry<Div>, "true_divide(input, other, *, out=None) -> Tensor: alias of div", true, true},
      {"neg", neg_entry, "neg(input) -> Tensor", true, true},
      {"negative", neg_entry, "negative(input) -> Tensor: alias of neg", true, true},
      {"add_", inplace_entry<Add>, "add_(other, *, alpha=1) -> Tensor: in place, returns self", false, true},
      {"sub_", inplace_entry<Sub>, "sub_(other, *, alpha=1) -> Tensor: in place, returns self", false, true},
      {"mul_", inplace_entry<Mul>, "mul_(other) -> Tensor: in place, returns self", false, true},
      {"div_", inplace_entry<Div>, "div_(other) -> Tensor: in place, returns self", false, true},
      {"to", to_entry, "to(dtype | other | device, *, copy=False, non_blocking=False, memory_format=None) -> Tensor", false, true},
      {"float", cast_entry<DType::Float32>, "float() -> Tensor: to(float32)", false, true},
      {"double", cast_entry<DType::Float64>, "double() -> Tensor: to(float64)", false, true},
      {"half", cast_entry<DType::Float16>, "half() -> Tensor: to(float16)", false, true},
      {"bfloat16", cast_entry<DType::BFloat16>, "bfloat16() -> Tensor: to(bfloat16)", false, true},
      {"long", cast_entry<DType::Int64>, "long() -> Tensor: to(int64)", false, true},
      {"int", cast_entry<DType::Int32>, "int() -> Tensor: to(int32)", false, true},
      {"bool", cast_entry<DType::Bool>, "bool() -> Tensor: to(bool)", false, true},
      {"byte", cast_entry<DType::UInt8>, "byte() -> Tensor: to(uint8)", false, true},
      {"clone", clone_entry, "clone(input) -> Tensor: a contiguous copy", true, true},
      {"contiguous", contiguous_entry, "contiguous() -> Tensor: self when already contiguous, else a copy", false, true},
      {"copy_", copy_entry, "copy_(src) -> Tensor: src broadcast and cast into self", false, true},
      {"fill_", fill_entry, "fill_(value) -> Tensor", false, true},
      {"zero_", zero_entry, "zero_() -> Tensor", false, true},
      {"result_type", result_type_entry, "result_type(tensor, other) -> dtype", true, false},
      {"promote_types", promote_types_entry, "promote_types(type1, type2) -> dtype: the smallest dtype both "
       "promote to (torch's table, docs/dtypes.md)", true, false},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
