// Comparison and selection entry points: eq/ne/lt/le/gt/ge (functions, methods and the rich-comparison
// operators, returning bool tensors), logical_not/and/or, where, masked_fill(_), clamp(_) / clip.
#include "common.h"

namespace dg::py {

namespace {
struct Eq {
  static constexpr const char* name = "eq";
  static Tensor apply(const Tensor& a, const Tensor& b) { return eq(a, b); }
  static Tensor apply(const Tensor& a, Scalar b) { return eq(a, b); }
};
struct Ne {
  static constexpr const char* name = "ne";
  static Tensor apply(const Tensor& a, const Tensor& b) { return ne(a, b); }
  static Tensor apply(const Tensor& a, Scalar b) { return ne(a, b); }
};
struct Lt {
  static constexpr const char* name = "lt";
  static Tensor apply(const Tensor& a, const Tensor& b) { return lt(a, b); }
  static Tensor apply(const Tensor& a, Scalar b) { return lt(a, b); }
};
struct Le {
  static constexpr const char* name = "le";
  static Tensor apply(const Tensor& a, const Tensor& b) { return le(a, b); }
  static Tensor apply(const Tensor& a, Scalar b) { return le(a, b); }
};
struct Gt {
  static constexpr const char* name = "gt";
  static Tensor apply(const Tensor& a, const Tensor& b) { return gt(a, b); }
  static Tensor apply(const Tensor& a, Scalar b) { return gt(a, b); }
};
struct Ge {
  static constexpr const char* name = "ge";
  static Tensor apply(const Tensor& a, const Tensor& b) { return ge(a, b); }
  static Tensor apply(const Tensor& a, Scalar b) { return ge(a, b); }
};

// dygrad.<op>(input, other) and Tensor.<op>(other); other is a Tensor or a number.
template <class Op>
PyObject* compare_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig(Op::name, {"input", "other"}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(Op::name, "input", a[0]);
  Operand other;
  if (!input || !to_operand(Op::name, "other", a[1], other)) return nullptr;
  return guarded([&] { return wrap(other.tensor ? Op::apply(*input, *other.tensor) : Op::apply(*input, other.scalar)); });
}

template <class Op>
PyObject* compare_tensor_operand(PyObject* a, PyObject* b) {
  Scalar s;
  if (is_tensor(b)) return guarded([&] { return wrap(Op::apply(unwrap(a), unwrap(b))); });
  if (to_scalar(b, s)) return guarded([&] { return wrap(Op::apply(unwrap(a), s)); });
  if (PyComplex_Check(b))  // a Python complex number: a zero-dim complex tensor (eq/ne run on it; the rest refuse)
    return guarded([&] { return wrap(Op::apply(unwrap(a), complex_number(b, unwrap(a)))); });
  return not_implemented_unless_error();
}

PyObject* logical_not_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("logical_not", {"input"}, 1, 1);
  PyObject* a[1];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("logical_not", "input", a[0]);
  if (!input) return nullptr;
  return guarded([&] { return wrap(logical_not(*input)); });
}

template <Tensor (*Fn)(const Tensor&, const Tensor&)>
PyObject* logical_binary(const Signature& sig, PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(sig.op(), "input", a[0]);
  const Tensor* other = input ? to_tensor(sig.op(), "other", a[1]) : nullptr;
  if (!other) return nullptr;
  return guarded([&] { return wrap(Fn(*input, *other)); });
}
PyObject* logical_and_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("logical_and", {"input", "other"}, 2, 2);
  return logical_binary<logical_and>(sig, self, args, nargs, kwnames);
}
PyObject* logical_or_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("logical_or", {"input", "other"}, 2, 2);
  return logical_binary<logical_or>(sig, self, args, nargs, kwnames);
}

// where(condition, input, other): input and other are Tensors or numbers (not both numbers).
PyObject* where_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("where", {"condition", "input", "other"}, 3, 3);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* condition = to_tensor("where", "condition", a[0]);
  Operand input, other;
  if (!condition || !to_operand("where", "input", a[1], input) || !to_operand("where", "other", a[2], other)) return nullptr;
  return guarded([&] {
    if (input.tensor && other.tensor) return wrap(where(*condition, *input.tensor, *other.tensor));
    if (input.tensor) return wrap(where(*condition, *input.tensor, other.scalar));
    if (other.tensor) return wrap(where(*condition, input.scalar, *other.tensor));
    // Two numbers: the result dtype follows them (float32 for a float, int64 for ints, as torch; an int in
    // [2**63, 2**64) is a uint64, which int64 refuses to promote with).
    ResultType numbers;
    numbers.add_scalar(input.scalar);
    numbers.add_scalar(other.scalar);
    const DType t = numbers.result();
    return wrap(where(*condition, full({}, input.scalar, {.dtype = t, .device = condition->device()}), other.scalar));
  });
}

// Tensor.where(condition, other): where(condition, self, other), as torch's method.
PyObject* where_method_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("where", {"self", "condition", "other"}, 3, 3);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("where", "self", a[0]);
  const Tensor* condition = input ? to_tensor("where", "condition", a[1]) : nullptr;
  Operand other;
  if (!condition || !to_operand("where", "other", a[2], other)) return nullptr;
  return guarded([&] {
    return wrap(other.tensor ? where(*condition, *input, *other.tensor) : where(*condition, *input, other.scalar));
  });
}

// The fill value of masked_fill: a number or a 0-dim Tensor (read on the host, as torch does).
bool to_fill_value(const char* op, PyObject* o, Scalar& out) {
  if (is_tensor(o)) {
    const Tensor& t = unwrap(o);
    if (t.dim() != 0) {
      PyErr_Format(PyExc_RuntimeError, "[%s] only supports a 0-dimensional value tensor, but got one with %d dims", op,
                   static_cast<int>(t.dim()));
      return false;
    }
    PythonHostRead read(t, op);
    out = t.item_scalar();
    return true;
  }
  return to_scalar_argument(op, "value", o, 0, out);
}

PyObject* masked_fill_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("masked_fill", {"input", "mask", "value"}, 3, 3);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("masked_fill", "input", a[0]);
  const Tensor* mask = input ? to_tensor("masked_fill", "mask", a[1]) : nullptr;
  Scalar value;
  if (!mask) return nullptr;
  try {
    if (!to_fill_value("masked_fill", a[2], value)) return nullptr;
  } catch (...) {
    set_error_from_current_exception();
    return nullptr;
  }
  return guarded([&] { return wrap(masked_fill(*input, *mask, value)); });
}

PyObject* masked_fill_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("masked_fill_", {"self", "mask", "value"}, 3, 3);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("masked_fill_", "self", a[0]);
  const Tensor* mask = input ? to_tensor("masked_fill_", "mask", a[1]) : nullptr;
  Scalar value;
  if (!mask) return nullptr;
  try {
    if (!to_fill_value("masked_fill_", a[2], value)) return nullptr;
  } catch (...) {
    set_error_from_current_exception();
    return nullptr;
  }
  return guarded([&] {
    masked_fill_(unwrap(a[0]), *mask, value);
    Py_INCREF(a[0]);
    return a[0];
  });
}

// clamp(input, min=None, max=None): the bounds are both numbers or both Tensors (either may be None), as in torch.
struct ClampBounds {
  bool tensors = false;
  std::optional<Scalar> min_scalar, max_scalar;
  Tensor min_tensor, max_tensor;
};

bool to_clamp_bounds(const char* op, PyObject* lo, PyObject* hi, ClampBounds& out) {
  PyObject* given[2] = {lo && lo != Py_None ? lo : nullptr, hi && hi != Py_None ? hi : nullptr};
  const char* names[2] = {"min", "max"};
  Operand operands[2];
  int num_tensors = 0;
  for (int k = 0; k < 2; ++k) {
    if (!given[k]) continue;
    if (!to_operand(op, names[k], given[k], operands[k])) return false;
    num_tensors += operands[k].tensor != nullptr;
  }
  if (!given[0] && !given[1]) {
    PyErr_Format(PyExc_RuntimeError, "[%s] At least one of 'min' or 'max' must not be None", op);
    return false;
  }
  out.tensors = num_tensors > 0;
  if (out.tensors && num_tensors != (given[0] != nullptr) + (given[1] != nullptr))
    return type_error(op, "min and max must both be Tensors or both be numbers, not a Tensor and a number"), false;
  for (int k = 0; k < 2; ++k) {
    if (!given[k]) continue;
    if (out.tensors) (k == 0 ? out.min_tensor : out.max_tensor) = *operands[k].tensor;
    else (k == 0 ? out.min_scalar : out.max_scalar) = operands[k].scalar;
  }
  return true;
}

PyObject* clamp_impl(const Signature& sig, PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(sig.op(), "input", a[0]);
  if (!input) return nullptr;
  return guarded([&]() -> PyObject* {
    ClampBounds b;
    if (!to_clamp_bounds(sig.op(), a[1], a[2], b)) return nullptr;
    if (b.tensors) return wrap(clamp(*input, b.min_tensor, b.max_tensor));
    return wrap(clamp(*input, b.min_scalar, b.max_scalar));
  });
}
PyObject* clamp_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("clamp", {"input", "min", "max"}, 3, 1);
  return clamp_impl(sig, self, args, nargs, kwnames);
}
PyObject* clip_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("clip", {"input", "min", "max"}, 3, 1);
  return clamp_impl(sig, self, args, nargs, kwnames);
}

PyObject* clamp_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("clamp_", {"self", "min", "max"}, 3, 1);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  if (!to_tensor("clamp_", "self", a[0])) return nullptr;
  return guarded([&]() -> PyObject* {
    ClampBounds b;
    if (!to_clamp_bounds("clamp_", a[1], a[2], b)) return nullptr;
    Tensor& target = unwrap(a[0]);
    if (b.tensors) clamp_(target, b.min_tensor, b.max_tensor);
    else clamp_(target, b.min_scalar, b.max_scalar);
    Py_INCREF(a[0]);
    return a[0];
  });
}
// isclose / allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False): a bool tensor / a Python bool.
template <bool All>
PyObject* isclose_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* name = All ? "allclose" : "isclose";
  static const Signature sig(name, {"input", "other", "rtol", "atol", "equal_nan"}, 5, 2);
  PyObject* a[5];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(name, "input", a[0]);
  const Tensor* other = input ? to_tensor(name, "other", a[1]) : nullptr;
  Scalar rtol, atol;
  bool equal_nan;
  if (!other || !to_scalar_argument(name, "rtol", a[2], 1e-05, rtol) || !to_scalar_argument(name, "atol", a[3], 1e-08, atol) ||
      !to_bool_argument(name, "equal_nan", a[4], false, equal_nan))
    return nullptr;
  return guarded([&]() -> PyObject* {
    if constexpr (All) {
      PyObject* result = allclose(*input, *other, rtol.to_double(), atol.to_double(), equal_nan) ? Py_True : Py_False;
      Py_INCREF(result);
      return result;
    } else {
      return wrap(isclose(*input, *other, rtol.to_double(), atol.to_double(), equal_nan));
    }
  });
}

// equal(input, other) -> bool: same shape and elements (a sync).
PyObject* equal_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("equal", {"input", "other"}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("equal", "input", a[0]);
  const Tensor* other = input ? to_tensor("equal", "other", a[1]) : nullptr;
  if (!other) return nullptr;
  return guarded([&]() -> PyObject* {
    PyObject* result = equal(*input, *other) ? Py_True : Py_False;
    Py_INCREF(result);
    return result;
  });
}

}  // namespace

// Bitwise ops on integral and bool tensors (ops/compare.cpp): dygrad.bitwise_and ... with a Tensor or a number on
// either side, their in-place methods, and the operators & | ^ ~ << >> with their reflected and in-place forms.
namespace {
using BitwiseTT = Tensor (*)(const Tensor&, const Tensor&);
using BitwiseTS = Tensor (*)(const Tensor&, Scalar);
using BitwiseInplaceT = Tensor& (*)(Tensor&, const Tensor&);
using BitwiseInplaceS = Tensor& (*)(Tensor&, Scalar);
struct BitwiseFns {
  const char* name;
  BitwiseTT tt;
  BitwiseTS ts;
  BitwiseInplaceT it;
  BitwiseInplaceS is;
  bool commutes;
};
constexpr BitwiseFns kBitwiseAnd{"bitwise_and", bitwise_and, bitwise_and, bitwise_and_, bitwise_and_, true};
constexpr BitwiseFns kBitwiseOr{"bitwise_or", bitwise_or, bitwise_or, bitwise_or_, bitwise_or_, true};
constexpr BitwiseFns kBitwiseXor{"bitwise_xor", bitwise_xor, bitwise_xor, bitwise_xor_, bitwise_xor_, true};
constexpr BitwiseFns kLeftShift{"bitwise_left_shift", bitwise_left_shift, bitwise_left_shift, bitwise_left_shift_,
                                bitwise_left_shift_, false};
constexpr BitwiseFns kRightShift{"bitwise_right_shift", bitwise_right_shift, bitwise_right_shift,
                                 bitwise_right_shift_, bitwise_right_shift_, false};

// A number on the left of a tensor: a commuting op swaps them; a shift makes the number a 0-dim tensor of the
// tensor's dtype when both are integral (a wrapped number does not promote), else of the number's own dtype.
Tensor scalar_first(const BitwiseFns& f, Scalar a, const Tensor& b) {
  if (f.commutes) return f.ts(b, a);
  const DType t = a.is_integral() && !is_floating(b.dtype()) && b.dtype() != DType::Bool ? b.dtype()
                                                                                          : a.default_dtype();
  return f.tt(full({}, a, {.dtype = t, .device = b.device()}), b);
}

PyObject* bitwise_apply(const BitwiseFns& f, PyObject* a, PyObject* b) {
  Scalar s;
  if (is_tensor(a) && is_tensor(b)) return guarded([&] { return wrap(f.tt(unwrap(a), unwrap(b))); });
  if (is_tensor(a) && to_scalar(b, s)) return guarded([&] { return wrap(f.ts(unwrap(a), s)); });
  if (is_tensor(b) && to_scalar(a, s)) return guarded([&] { return wrap(scalar_first(f, s, unwrap(b))); });
  return not_implemented_unless_error();
}

template <const BitwiseFns& F>
PyObject* bitwise_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig(F.name, {"input", "other"}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  PyObject* result = bitwise_apply(F, a[0], a[1]);
  if (result == Py_NotImplemented) {
    Py_DECREF(result);
    PyErr_Format(PyExc_TypeError, "%s(): arguments must be Tensors or numbers, got %s and %s", F.name,
                 Py_TYPE(a[0])->tp_name, Py_TYPE(a[1])->tp_name);
    return nullptr;
  }
  return result;
}

template <const BitwiseFns& F>
PyObject* bitwise_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const std::string name = std::string(F.name) + "_";
  static const Signature sig(name.c_str(), {"self", "other"}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* target = to_tensor(name.c_str(), "self", a[0]);
  Operand other;
  if (!target || !to_operand(name.c_str(), "other", a[1], other)) return nullptr;
  return guarded([&] {
    Tensor t = *target;
    if (other.tensor) F.it(t, *other.tensor);
    else F.is(t, other.scalar);
    Py_INCREF(a[0]);
    return a[0];
  });
}

PyObject* bitwise_not_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("bitwise_not", {"input"}, 1, 1);
  PyObject* a[1];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("bitwise_not", "input", a[0]);
  if (!input) return nullptr;
  return guarded([&] { return wrap(bitwise_not(*input)); });
}
PyObject* bitwise_not_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("bitwise_not_", {"self"}, 1, 1);
  PyObject* a[1];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* target = to_tensor("bitwise_not_", "self", a[0]);
  if (!target) return nullptr;
  return guarded([&] {
    Tensor t = *target;
    bitwise_not_(t);
    Py_INCREF(a[0]);
    return a[0];
  });
}

template <const BitwiseFns& F>
PyObject* bitwise_inplace_slot(PyObject* a, PyObject* b) {
  Scalar s;
  if (!is_tensor(a)) Py_RETURN_NOTIMPLEMENTED;
  if (!is_tensor(b) && !to_scalar(b, s)) return not_implemented_unless_error();
  return guarded([&] {
    Tensor t = unwrap(a);
    if (is_tensor(b)) F.it(t, unwrap(b));
    else F.is(t, s);
    Py_INCREF(a);
    return a;
  });
}
}  // namespace

PyObject* tensor_and(PyObject* a, PyObject* b) { return bitwise_apply(kBitwiseAnd, a, b); }
PyObject* tensor_or(PyObject* a, PyObject* b) { return bitwise_apply(kBitwiseOr, a, b); }
PyObject* tensor_xor(PyObject* a, PyObject* b) { return bitwise_apply(kBitwiseXor, a, b); }
PyObject* tensor_lshift(PyObject* a, PyObject* b) { return bitwise_apply(kLeftShift, a, b); }
PyObject* tensor_rshift(PyObject* a, PyObject* b) { return bitwise_apply(kRightShift, a, b); }
PyObject* tensor_iand(PyObject* a, PyObject* b) { return bitwise_inplace_slot<kBitwiseAnd>(a, b); }
PyObject* tensor_ior(PyObject* a, PyObject* b) { return bitwise_inplace_slot<kBitwiseOr>(a, b); }
PyObject* tensor_ixor(PyObject* a, PyObject* b) { return bitwise_inplace_slot<kBitwiseXor>(a, b); }
PyObject* tensor_ilshift(PyObject* a, PyObject* b) { return bitwise_inplace_slot<kLeftShift>(a, b); }
PyObject* tensor_irshift(PyObject* a, PyObject* b) { return bitwise_inplace_slot<kRightShift>(a, b); }
PyObject* tensor_invert(PyObject* a) {
  return guarded([&] { return wrap(bitwise_not(unwrap(a))); });
}

// tp_richcompare of Tensor: `a == b` etc. with a Tensor or a number on the right; NotImplemented otherwise
// (so `t == None` is False, as in torch).
PyObject* tensor_richcompare(PyObject* a, PyObject* b, int op) {
  if (!is_tensor(a)) Py_RETURN_NOTIMPLEMENTED;
  switch (op) {
    case Py_EQ: return compare_tensor_operand<Eq>(a, b);
    case Py_NE: return compare_tensor_operand<Ne>(a, b);
    case Py_LT: return compare_tensor_operand<Lt>(a, b);
    case Py_LE: return compare_tensor_operand<Le>(a, b);
    case Py_GT: return compare_tensor_operand<Gt>(a, b);
    case Py_GE: return compare_tensor_operand<Ge>(a, b);
    default: Py_RETURN_NOTIMPLEMENTED;
  }
}

void init_ops_compare(nb::module_& m) {
  static const OpEntry entries[] = {
      {"eq", compare_entry<Eq>, "eq(input, other) -> Tensor (bool)", true, true},
      {"isclose", isclose_entry<false>, "isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> Tensor (bool)", true, true},
      {"allclose", isclose_entry<true>, "allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool", true, true},
      {"equal", equal_entry, "equal(input, other) -> bool: same shape and elements", true, true},
      {"ne", compare_entry<Ne>, "ne(input, other) -> Tensor (bool)", true, true},
      {"lt", compare_entry<Lt>, "lt(input, other) -> Tensor (bool)", true, true},
      {"le", compare_entry<Le>, "le(input, other) -> Tensor (bool)", true, true},
      {"gt", compare_entry<Gt>, "gt(input, other) -> Tensor (bool)", true, true},
      {"ge", compare_entry<Ge>, "ge(input, other) -> Tensor (bool)", true, true},
      {"not_equal", compare_entry<Ne>, "not_equal(input, other) -> Tensor: alias of ne", true, true},
      {"less", compare_entry<Lt>, "less(input, other) -> Tensor: alias of lt", true, true},
      {"less_equal", compare_entry<Le>, "less_equal(input, other) -> Tensor: alias of le", true, true},
      {"greater", compare_entry<Gt>, "greater(input, other) -> Tensor: alias of gt", true, true},
      {"greater_equal", compare_entry<Ge>, "greater_equal(input, other) -> Tensor: alias of ge", true, true},
      {"logical_not", logical_not_entry, "logical_not(input) -> Tensor (bool)", true, true},
      {"logical_and", logical_and_entry, "logical_and(input, other) -> Tensor (bool)", true, true},
      {"logical_or", logical_or_entry, "logical_or(input, other) -> Tensor (bool)", true, true},
      {"bitwise_and", bitwise_entry<kBitwiseAnd>, "bitwise_and(input, other) -> Tensor: integral or bool", true, true},
      {"bitwise_or", bitwise_entry<kBitwiseOr>, "bitwise_or(input, other) -> Tensor: integral or bool", true, true},
      {"bitwise_xor", bitwise_entry<kBitwiseXor>, "bitwise_xor(input, other) -> Tensor: integral or bool", true, true},
      {"bitwise_left_shift", bitwise_entry<kLeftShift>, "bitwise_left_shift(input, other) -> Tensor: integral", true, true},
      {"bitwise_right_shift", bitwise_entry<kRightShift>, "bitwise_right_shift(input, other) -> Tensor: integral", true, true},
      {"bitwise_not", bitwise_not_entry, "bitwise_not(input) -> Tensor: ~input, integral or bool", true, true},
      {"bitwise_and_", bitwise_inplace_entry<kBitwiseAnd>, "bitwise_and_(other) -> Tensor: in place, returns self", false, true},
      {"bitwise_or_", bitwise_inplace_entry<kBitwiseOr>, "bitwise_or_(other) -> Tensor: in place, returns self", false, true},
      {"bitwise_xor_", bitwise_inplace_entry<kBitwiseXor>, "bitwise_xor_(other) -> Tensor: in place, returns self", false, true},
      {"bitwise_left_shift_", bitwise_inplace_entry<kLeftShift>, "bitwise_left_shift_(other) -> Tensor: in place", false, true},
      {"bitwise_right_shift_", bitwise_inplace_entry<kRightShift>, "bitwise_right_shift_(other) -> Tensor: in place", false, true},
      {"bitwise_not_", bitwise_not_inplace_entry, "bitwise_not_() -> Tensor: in place, returns self", false, true},
      {"where", where_entry, "where(condition, input, other) -> Tensor", true, false},
      {"where", where_method_entry, "where(condition, other) -> Tensor: where(condition, self, other)", false, true},
      {"masked_fill", masked_fill_entry, "masked_fill(input, mask, value) -> Tensor", true, true},
      {"masked_fill_", masked_fill_inplace_entry, "masked_fill_(mask, value) -> Tensor: in place, returns self", false, true},
      {"clamp", clamp_entry, "clamp(input, min=None, max=None) -> Tensor", true, true},
      {"clip", clip_entry, "clip(input, min=None, max=None) -> Tensor: alias of clamp", true, true},
      {"clamp_", clamp_inplace_entry, "clamp_(min=None, max=None) -> Tensor: in place, returns self", false, true},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
