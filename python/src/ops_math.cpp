// Math entry points: unary functions (exp, log, sqrt, ..., silu, gelu, relu) with their Tensor methods and
// in-place forms, pow with the `**` operator (reversed with a number base), maximum and minimum.
#include <string_view>

#include "common.h"

namespace dg::py {

namespace {
// dygrad.<op>(input) and Tensor.<op>(): one Tensor, no options.
template <Tensor (*Fn)(const Tensor&)>
PyObject* unary_impl(const char* name, PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (kwnames && PyTuple_GET_SIZE(kwnames) > 0) {
    // input= by keyword is the only keyword torch accepts.
    if (self || nargs != 0 || PyTuple_GET_SIZE(kwnames) != 1 ||
        PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "input") != 0)
      return type_error(name, "got an unexpected keyword argument");
    const Tensor* t = to_tensor(name, "input", args[0]);
    if (!t) return nullptr;
    return guarded([&] { return wrap(Fn(*t)); });
  }
  if (nargs != (self ? 0 : 1)) return type_error(name, "takes 1 argument (%zd given)", nargs + (self ? 1 : 0));
  const Tensor* t = to_tensor(name, "input", self ? self : args[0]);
  if (!t) return nullptr;
  return guarded([&] { return wrap(Fn(*t)); });
}

#define DG_UNARY_ENTRY(op)                                                                            \
  PyObject* op##_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) { \
    return unary_impl<static_cast<Tensor (*)(const Tensor&)>(op)>(#op, self, args, nargs, kwnames);  \
  }
DG_UNARY_ENTRY(exp)
DG_UNARY_ENTRY(log)
DG_UNARY_ENTRY(expm1)
DG_UNARY_ENTRY(log1p)
DG_UNARY_ENTRY(sqrt)
DG_UNARY_ENTRY(rsqrt)
DG_UNARY_ENTRY(abs)
DG_UNARY_ENTRY(sin)
DG_UNARY_ENTRY(cos)
DG_UNARY_ENTRY(tanh)
DG_UNARY_ENTRY(sigmoid)
DG_UNARY_ENTRY(silu)
DG_UNARY_ENTRY(relu)
DG_UNARY_ENTRY(floor)
DG_UNARY_ENTRY(ceil)
DG_UNARY_ENTRY(trunc)
DG_UNARY_ENTRY(sign)
DG_UNARY_ENTRY(reciprocal)
DG_UNARY_ENTRY(isnan)
DG_UNARY_ENTRY(isinf)
DG_UNARY_ENTRY(isfinite)
#undef DG_UNARY_ENTRY

// Tensor.<op>_() and dygrad.<op>_(input): in place, returns self.
template <Tensor& (*Fn)(Tensor&)>
PyObject* unary_inplace_impl(const char* name, PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (kwnames && PyTuple_GET_SIZE(kwnames) > 0) return type_error(name, "takes no keyword arguments");
  if (nargs != (self ? 0 : 1)) return type_error(name, "takes 1 argument (%zd given)", nargs + (self ? 1 : 0));
  PyObject* o = self ? self : args[0];
  if (!to_tensor(name, "input", o)) return nullptr;
  return guarded([&] {
    Fn(unwrap(o));
    Py_INCREF(o);
    return o;
  });
}
PyObject* exp_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return unary_inplace_impl<exp_>("exp_", self, args, nargs, kwnames);
}
PyObject* relu_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return unary_inplace_impl<relu_>("relu_", self, args, nargs, kwnames);
}
#define DG_UNARY_INPLACE_ENTRY(op)                                                                             \
  PyObject* op##_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) { \
    return unary_inplace_impl<op##_>(#op "_", self, args, nargs, kwnames);                                   \
  }
DG_UNARY_INPLACE_ENTRY(floor)
DG_UNARY_INPLACE_ENTRY(ceil)
DG_UNARY_INPLACE_ENTRY(trunc)
DG_UNARY_INPLACE_ENTRY(sign)
DG_UNARY_INPLACE_ENTRY(reciprocal)
#undef DG_UNARY_INPLACE_ENTRY

// round(input, *, decimals=0) and Tensor.round_(*, decimals=0): in place returns self.
template <bool Inplace>
PyObject* round_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* name = Inplace ? "round_" : "round";
  static const Signature sig(name, {"input", "decimals"}, 1, 1);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  if (!to_tensor(name, "input", a[0])) return nullptr;
  int64_t decimals = 0;
  if (a[1] && !to_int_argument(name, "decimals", a[1], decimals)) return nullptr;
  return guarded([&]() -> PyObject* {
    if constexpr (Inplace) {
      round_(unwrap(a[0]), decimals);
      Py_INCREF(a[0]);
      return a[0];
    } else {
      return wrap(round(unwrap(a[0]), decimals));
    }
  });
}

// gelu(input, approximate='none')
PyObject* gelu_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("gelu", {"input", "approximate"}, 1, 1);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("gelu", "input", a[0]);
  if (!input) return nullptr;
  std::string_view approximate = "none";
  if (a[1]) {
    if (!PyUnicode_Check(a[1])) return type_error("gelu", "argument 'approximate' must be str, not %s", type_name(a[1]));
    approximate = PyUnicode_AsUTF8(a[1]);
  }
  return guarded([&] { return wrap(gelu(*input, approximate)); });
}

// pow(input, exponent): Tensor ** Tensor-or-number; pow(self: Number, exponent: Tensor) as torch allows.
PyObject* pow_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("pow", {"input", "exponent"}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  Operand base, exponent;
  if (!to_operand("pow", "input", a[0], base) || !to_operand("pow", "exponent", a[1], exponent)) return nullptr;
  if (!base.tensor && !exponent.tensor)
    return type_error("pow", "argument 'input' or 'exponent' must be Tensor, not two numbers");
  return guarded([&] {
    if (base.tensor && exponent.tensor) return wrap(pow(*base.tensor, *exponent.tensor));
    if (base.tensor) return wrap(pow(*base.tensor, exponent.scalar));
    return wrap(pow(base.scalar, *exponent.tensor));
  });
}

// Tensor.pow_(exponent): computed out of place and copied back (torch's dtype rule for in-place results).
PyObject* pow_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("pow_", {"self", "exponent"}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("pow_", "self", a[0]);
  Operand exponent;
  if (!input || !to_operand("pow_", "exponent", a[1], exponent)) return nullptr;
  return guarded([&] {
    Tensor r = exponent.tensor ? pow(*input, *exponent.tensor) : pow(*input, exponent.scalar);
    DG_CHECK(!is_floating(r.dtype()) || is_floating(input->dtype()), Runtime, "[pow_] result type ", dtype_name(r.dtype()),
             " can't be cast to the desired output type ", dtype_name(input->dtype()));
    copy_(unwrap(a[0]), r);
    Py_INCREF(a[0]);
    return a[0];
  });
}

// square(input) / Tensor.square_(): pow(input, 2), as torch composes it (so bool squares to int64, and the
// gradient is pow's).
template <bool Inplace>
PyObject* square_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* name = Inplace ? "square_" : "square";
  static const Signature sig(name, {Inplace ? "self" : "input"}, 1, 1);
  PyObject* a[1];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(name, Inplace ? "self" : "input", a[0]);
  if (!input) return nullptr;
  return guarded([&] {
    Tensor r = pow(*input, Scalar(int64_t(2)));
    if constexpr (!Inplace) {
      return wrap(r);
    } else {
      DG_CHECK(r.dtype() == input->dtype(), Runtime, "[square_] result type ", dtype_name(r.dtype()),
               " can't be cast to the desired output type ", dtype_name(input->dtype()));
      copy_(unwrap(a[0]), r);
      Py_INCREF(a[0]);
      return a[0];
    }
  });
}

// lerp(input, end, weight) / Tensor.lerp_(end, weight): weight a Tensor or a number.
template <bool Inplace>
PyObject* lerp_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* name = Inplace ? "lerp_" : "lerp";
  static const Signature sig(name, {"input", "end", "weight"}, 3, 3);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(name, "input", a[0]);
  const Tensor* end = input ? to_tensor(name, "end", a[1]) : nullptr;
  Operand weight;
  if (!end || !to_operand(name, "weight", a[2], weight)) return nullptr;
  return guarded([&] {
    if constexpr (Inplace) {
      Tensor& target = unwrap(a[0]);
      if (weight.tensor) lerp_(target, *end, *weight.tensor);
      else lerp_(target, *end, weight.scalar);
      Py_INCREF(a[0]);
      return a[0];
    } else {
      return wrap(weight.tensor ? lerp(*input, *end, *weight.tensor) : lerp(*input, *end, weight.scalar));
    }
  });
}

PyObject* pow_slot(PyObject* a, PyObject* b, PyObject* modulo) {
  if (modulo != Py_None) Py_RETURN_NOTIMPLEMENTED;
  Scalar s;
  if (is_tensor(a)) {
    if (is_tensor(b)) return guarded([&] { return wrap(pow(unwrap(a), unwrap(b))); });
    if (to_scalar(b, s)) return guarded([&] { return wrap(pow(unwrap(a), s)); });
  } else if (is_tensor(b) && to_scalar(a, s)) {
    return guarded([&] { return wrap(pow(s, unwrap(b))); });
  }
  return not_implemented_unless_error();
}

PyObject* pow_inplace_slot(PyObject* a, PyObject* b, PyObject* modulo) {
  if (modulo != Py_None || !is_tensor(a)) Py_RETURN_NOTIMPLEMENTED;
  Scalar s;
  if (!is_tensor(b) && !to_scalar(b, s)) return not_implemented_unless_error();
  return guarded([&] {
    Tensor& target = unwrap(a);
    Tensor r = is_tensor(b) ? pow(target, unwrap(b)) : pow(target, s);
    DG_CHECK(!is_floating(r.dtype()) || is_floating(target.dtype()), Runtime, "[pow_] result type ", dtype_name(r.dtype()),
             " can't be cast to the desired output type ", dtype_name(target.dtype()));
    copy_(target, r);
    Py_INCREF(a);
    return a;
  });
}

// maximum(input, other) / minimum(input, other): elementwise, broadcast, both tensors (torch).
template <Tensor (*Fn)(const Tensor&, const Tensor&)>
PyObject* binary_tensor_impl(const char* name, PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                             const Signature& sig) {
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(name, "input", a[0]);
  const Tensor* other = input ? to_tensor(name, "other", a[1]) : nullptr;
  if (!other) return nullptr;
  return guarded([&] { return wrap(Fn(*input, *other)); });
}
// The entry of a (Tensor, Tensor) -> Tensor op named Name: one table line binds it.
template <OpName Name, Tensor (*Fn)(const Tensor&, const Tensor&)>
PyObject* binary_tensor_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig(Name.value, {"input", "other"}, 2, 2);
  return binary_tensor_impl<Fn>(Name.value, self, args, nargs, kwnames, sig);
}
}  // namespace

// ops_compare.cpp: comparisons, and the bitwise operators & | ^ ~ << >> (in place too)
PyObject* tensor_richcompare(PyObject* a, PyObject* b, int op);
PyObject* tensor_and(PyObject* a, PyObject* b);
PyObject* tensor_or(PyObject* a, PyObject* b);
PyObject* tensor_xor(PyObject* a, PyObject* b);
PyObject* tensor_lshift(PyObject* a, PyObject* b);
PyObject* tensor_rshift(PyObject* a, PyObject* b);
PyObject* tensor_iand(PyObject* a, PyObject* b);
PyObject* tensor_ior(PyObject* a, PyObject* b);
PyObject* tensor_ixor(PyObject* a, PyObject* b);
PyObject* tensor_ilshift(PyObject* a, PyObject* b);
PyObject* tensor_irshift(PyObject* a, PyObject* b);
PyObject* tensor_invert(PyObject* a);
// ops_modulo.cpp: % and %=
PyObject* remainder_slot(PyObject* a, PyObject* b);
PyObject* remainder_inplace_slot(PyObject* a, PyObject* b);

const PyType_Slot* math_operator_slots() {
  static PyType_Slot slots[] = {
      {Py_nb_power, reinterpret_cast<void*>(pow_slot)},
      {Py_nb_inplace_power, reinterpret_cast<void*>(pow_inplace_slot)},
      {Py_tp_richcompare, reinterpret_cast<void*>(tensor_richcompare)},
      {Py_nb_and, reinterpret_cast<void*>(tensor_and)},
      {Py_nb_or, reinterpret_cast<void*>(tensor_or)},
      {Py_nb_xor, reinterpret_cast<void*>(tensor_xor)},
      {Py_nb_lshift, reinterpret_cast<void*>(tensor_lshift)},
      {Py_nb_rshift, reinterpret_cast<void*>(tensor_rshift)},
      {Py_nb_inplace_and, reinterpret_cast<void*>(tensor_iand)},
      {Py_nb_inplace_or, reinterpret_cast<void*>(tensor_ior)},
      {Py_nb_inplace_xor, reinterpret_cast<void*>(tensor_ixor)},
      {Py_nb_inplace_lshift, reinterpret_cast<void*>(tensor_ilshift)},
      {Py_nb_inplace_rshift, reinterpret_cast<void*>(tensor_irshift)},
      {Py_nb_invert, reinterpret_cast<void*>(tensor_invert)},
      {Py_nb_remainder, reinterpret_cast<void*>(remainder_slot)},
      {Py_nb_inplace_remainder, reinterpret_cast<void*>(remainder_inplace_slot)},
      {0, nullptr},
  };
  return slots;
}

void init_ops_math(nb::module_& m) {
  static const OpEntry entries[] = {
      {"exp", exp_entry, "exp(input) -> Tensor", true, true},
      {"log", log_entry, "log(input) -> Tensor: natural logarithm", true, true},
      {"expm1", expm1_entry, "expm1(input) -> Tensor: exp(input) - 1, accurate near 0", true, true},
      {"log1p", log1p_entry, "log1p(input) -> Tensor: log(1 + input), accurate near 0", true, true},
      {"sqrt", sqrt_entry, "sqrt(input) -> Tensor", true, true},
      {"rsqrt", rsqrt_entry, "rsqrt(input) -> Tensor: 1 / sqrt(input)", true, true},
      {"abs", abs_entry, "abs(input) -> Tensor", true, true},
      {"floor", floor_entry, "floor(input) -> Tensor", true, true},
      {"ceil", ceil_entry, "ceil(input) -> Tensor", true, true},
      {"trunc", trunc_entry, "trunc(input) -> Tensor", true, true},
      {"round", round_entry<false>, "round(input, *, decimals=0) -> Tensor: half to even", true, true},
      {"fix", trunc_entry, "fix(input) -> Tensor: trunc", true, true},
      {"sign", sign_entry, "sign(input) -> Tensor", true, true},
      {"reciprocal", reciprocal_entry, "reciprocal(input) -> Tensor", true, true},
      {"isnan", isnan_entry, "isnan(input) -> Tensor (bool)", true, true},
      {"isinf", isinf_entry, "isinf(input) -> Tensor (bool)", true, true},
      {"isfinite", isfinite_entry, "isfinite(input) -> Tensor (bool)", true, true},
      {"sin", sin_entry, "sin(input) -> Tensor", true, true},
      {"cos", cos_entry, "cos(input) -> Tensor", true, true},
      {"tanh", tanh_entry, "tanh(input) -> Tensor", true, true},
      {"sigmoid", sigmoid_entry, "sigmoid(input) -> Tensor", true, true},
      {"silu", silu_entry, "silu(input) -> Tensor: input * sigmoid(input)", true, false},
      {"relu", relu_entry, "relu(input) -> Tensor", true, true},
      {"gelu", gelu_entry, "gelu(input, approximate='none') -> Tensor ('none' or 'tanh')", true, false},
      {"exp_", exp_inplace_entry, "exp_(input) -> Tensor: in place, returns input", true, true},
      {"relu_", relu_inplace_entry, "relu_(input) -> Tensor: in place, returns input", true, true},
      {"floor_", floor_inplace_entry, "floor_(input) -> Tensor: in place, returns input", true, true},
      {"ceil_", ceil_inplace_entry, "ceil_(input) -> Tensor: in place, returns input", true, true},
      {"trunc_", trunc_inplace_entry, "trunc_(input) -> Tensor: in place, returns input", true, true},
      {"round_", round_entry<true>, "round_(input, *, decimals=0) -> Tensor: in place, returns input", true, true},
      {"fix_", trunc_inplace_entry, "fix_(input) -> Tensor: trunc_", true, true},
      {"sign_", sign_inplace_entry, "sign_(input) -> Tensor: in place, returns input", true, true},
      {"reciprocal_", reciprocal_inplace_entry, "reciprocal_(input) -> Tensor: in place, returns input", true, true},
      {"pow", pow_entry, "pow(input, exponent) -> Tensor: Tensor or number base and exponent", true, true},
      {"pow_", pow_inplace_entry, "pow_(exponent) -> Tensor: in place, returns self", false, true},
      {"square", square_entry<false>, "square(input) -> Tensor: pow(input, 2)", true, true},
      {"square_", square_entry<true>, "square_() -> Tensor: in place, returns self", false, true},
      {"maximum", binary_tensor_entry<"maximum", maximum>, "maximum(input, other) -> Tensor: elementwise max", true, true},
      {"logaddexp", binary_tensor_entry<"logaddexp", logaddexp>, "logaddexp(input, other) -> Tensor", true, true},
      {"minimum", binary_tensor_entry<"minimum", minimum>, "minimum(input, other) -> Tensor: elementwise min", true, true},
      {"lerp", lerp_entry<false>, "lerp(input, end, weight) -> Tensor: input + weight * (end - input)", true, true},
      {"lerp_", lerp_entry<true>, "lerp_(end, weight) -> Tensor: in place, returns self", false, true},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
