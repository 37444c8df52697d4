// Modular and angle entry points: fmod, remainder (also with a number first) and the `%` operator with its reversed
// and in-place forms; atan2 (arctan2) and atan2_. Argument parsing only: each calls the C++ op (ops/binary_math.cpp).
#include <type_traits>

#include "common.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/math.h"

namespace dg::py {

namespace {
// dygrad.<name>(input, other) with two tensors.
template <OpName Name, Tensor (*Fn)(const Tensor&, const Tensor&)>
PyObject* binary_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig(Name.value, {"input", "other"}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* first = to_tensor(Name.value, "input", a[0]);
  const Tensor* second = first ? to_tensor(Name.value, "other", a[1]) : nullptr;
  if (!second) return nullptr;
  return guarded([&] { return wrap(Fn(*first, *second)); });
}

// fmod and remainder: (Tensor, Tensor or number), remainder also (number, Tensor).
struct Fmod {
  static constexpr const char* name = "fmod";
  static constexpr const char* inplace_name = "fmod_";
  static Tensor tensor_tensor(const Tensor& a, const Tensor& b) { return fmod(a, b); }
  static Tensor tensor_scalar(const Tensor& a, Scalar b) { return fmod(a, b); }
  static Tensor& inplace_tensor(Tensor& a, const Tensor& b) { return fmod_(a, b); }
  static Tensor& inplace_scalar(Tensor& a, Scalar b) { return fmod_(a, b); }
};
struct Remainder {
  static constexpr const char* name = "remainder";
  static constexpr const char* inplace_name = "remainder_";
  static Tensor tensor_tensor(const Tensor& a, const Tensor& b) { return remainder(a, b); }
  static Tensor tensor_scalar(const Tensor& a, Scalar b) { return remainder(a, b); }
  static Tensor& inplace_tensor(Tensor& a, const Tensor& b) { return remainder_(a, b); }
  static Tensor& inplace_scalar(Tensor& a, Scalar b) { return remainder_(a, b); }
};

template <class Op>
PyObject* modulo_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig(Op::name, {"input", "other"}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  Scalar s;
  if constexpr (std::is_same_v<Op, Remainder>) {
    if (!is_tensor(a[0]) && to_scalar(a[0], s)) {  // torch.remainder(number, Tensor)
      const Tensor* other = to_tensor(Op::name, "other", a[1]);
      if (!other) return nullptr;
      return guarded([&] { return wrap(remainder(s, *other)); });
    }
    if (PyErr_Occurred()) return nullptr;  // an int beyond [-2**63, 2**64)
  }
  const Tensor* input = to_tensor(Op::name, "input", a[0]);
  Operand other;
  if (!input || !to_operand(Op::name, "other", a[1], other)) return nullptr;
  return guarded([&] {
    return wrap(other.tensor ? Op::tensor_tensor(*input, *other.tensor) : Op::tensor_scalar(*input, other.scalar));
  });
}

template <class Op>
PyObject* modulo_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig(Op::inplace_name, {"self", "other"}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(Op::inplace_name, "self", a[0]);
  Operand other;
  if (!input || !to_operand(Op::inplace_name, "other", a[1], other)) return nullptr;
  return guarded([&] {
    Tensor& target = unwrap(a[0]);
    if (other.tensor) Op::inplace_tensor(target, *other.tensor);
    else Op::inplace_scalar(target, other.scalar);
    Py_INCREF(a[0]);
    return a[0];
  });
}

PyObject* atan2_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("atan2_", {"self", "other"}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("atan2_", "self", a[0]);
  const Tensor* other = input ? to_tensor("atan2_", "other", a[1]) : nullptr;
  if (!other) return nullptr;
  return guarded([&] {
    atan2_(unwrap(a[0]), *other);
    Py_INCREF(a[0]);
    return a[0];
  });
}
}  // namespace

// `a % b` (Python's sign: remainder), with a number on either side; `a %= b`.
PyObject* remainder_slot(PyObject* a, PyObject* b) {
  Scalar s;
  if (is_tensor(a)) {
    if (is_tensor(b)) return guarded([&] { return wrap(remainder(unwrap(a), unwrap(b))); });
    if (to_scalar(b, s)) return guarded([&] { return wrap(remainder(unwrap(a), s)); });
  } else if (is_tensor(b) && to_scalar(a, s)) {
    return guarded([&] { return wrap(remainder(s, unwrap(b))); });
  }
  return not_implemented_unless_error();
}
PyObject* remainder_inplace_slot(PyObject* a, PyObject* b) {
  Scalar s;
  if (!is_tensor(a)) Py_RETURN_NOTIMPLEMENTED;
  ApiNameScope name("Tensor.__imod__");
  if (is_tensor(b)) {
    return guarded([&] {
      remainder_(unwrap(a), unwrap(b));
      Py_INCREF(a);
      return a;
    });
  }
  if (!to_scalar(b, s)) return not_implemented_unless_error();
  return guarded([&] {
    remainder_(unwrap(a), s);
    Py_INCREF(a);
    return a;
  });
}

void init_ops_modulo(nb::module_& m) {
  static const OpEntry entries[] = {
      {"atan2", binary_entry<"atan2", atan2>, "atan2(input, other) -> Tensor: angle of (other, input)",
       true, true},
      {"arctan2", binary_entry<"arctan2", atan2>, "arctan2(input, other) -> Tensor: atan2", true,
       true},
      {"atan2_", atan2_inplace_entry, "atan2_(other) -> Tensor: in place, returns self", false, true},
      {"fmod", modulo_entry<Fmod>, "fmod(input, other) -> Tensor: C's remainder (the sign of input)", true, true},
      {"fmod_", modulo_inplace_entry<Fmod>, "fmod_(other) -> Tensor: in place, returns self", false, true},
      {"remainder", modulo_entry<Remainder>,
       "remainder(input, other) -> Tensor: Python's % (the sign of other); input may be a number", true, true},
      {"remainder_", modulo_inplace_entry<Remainder>, "remainder_(other) -> Tensor: in place, returns self", false,
       true},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
