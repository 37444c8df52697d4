// Complex entry points: view_as_real/view_as_complex, real/imag, complex, polar, conj (and torch's conj-view
// queries, which dygrad answers for its materialised conj), angle, is_complex. Argument parsing only: each calls
// the C++ op.
#include "common.h"
#include "dygrad/ops/complex.h"

namespace dg::py {

namespace {
// dygrad.<name>(input) and Tensor.<name>(): one tensor.
template <OpName Name, Tensor (*Fn)(const Tensor&)>
PyObject* unary_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig(Name.value, {"input"}, 1, 1);
  PyObject* a[1];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(Name.value, "input", a[0]);
  if (!input) return nullptr;
  return guarded([&] { return wrap(Fn(*input)); });
}

// dygrad.<name>(a, b) with two tensors named A and B.
template <OpName Name, OpName A, OpName B, Tensor (*Fn)(const Tensor&, const Tensor&)>
PyObject* pair_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig(Name.value, {A.value, B.value}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* first = to_tensor(Name.value, A.value, a[0]);
  const Tensor* second = first ? to_tensor(Name.value, B.value, a[1]) : nullptr;
  if (!second) return nullptr;
  return guarded([&] { return wrap(Fn(*first, *second)); });
}

Tensor identity(const Tensor& t) { return t; }
PyObject* is_conj_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("is_conj", {"input"}, 1, 1);
  PyObject* a[1];
  if (!sig.parse(self, args, nargs, kwnames, a) || !to_tensor("is_conj", "input", a[0])) return nullptr;
  Py_RETURN_FALSE;  // conj materialises: no tensor carries a pending conjugation
}
PyObject* is_complex_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("is_complex", {"input"}, 1, 1);
  PyObject* a[1];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("is_complex", "input", a[0]);
  if (!input) return nullptr;
  return PyBool_FromLong(is_complex(input->dtype()));
}

}  // namespace

void init_ops_complex(nb::module_& m) {
  static const OpEntry entries[] = {
      {"view_as_real", unary_entry<"view_as_real", view_as_real>,
       "view_as_real(input) -> Tensor: a complex tensor's float pairs [..., 2], a view", true, true},
      {"view_as_complex", unary_entry<"view_as_complex", view_as_complex>,
       "view_as_complex(input) -> Tensor: float pairs [..., 2] as complex, a view", true, true},
      {"real", unary_entry<"real", real>, "real(input) -> Tensor: the real part (a view)", true, false},
      {"imag", unary_entry<"imag", imag>, "imag(input) -> Tensor: the imaginary part (a view)", true, false},
      {"complex", pair_entry<"complex", "real", "imag", complex>,
       "complex(real, imag) -> Tensor: float32 -> complex64, float64 -> complex128", true, false},
      {"polar", pair_entry<"polar", "abs", "angle", polar>, "polar(abs, angle) -> Tensor: abs * (cos + i sin)",
       true, false},
      {"conj", unary_entry<"conj", conj>, "conj(input) -> Tensor: the conjugate (materialised)", true, true},
      {"conj_physical", unary_entry<"conj_physical", conj>, "conj_physical(input) -> Tensor: the conjugate", true,
       true},
      {"resolve_conj", unary_entry<"resolve_conj", identity>,
       "resolve_conj(input) -> Tensor: input (dygrad's conj is never lazy)", true, true},
      {"resolve_neg", unary_entry<"resolve_neg", identity>, "resolve_neg(input) -> Tensor: input", true, true},
      {"is_conj", is_conj_entry, "is_conj(input) -> bool: False (dygrad's conj is materialised)", true, true},
      {"is_complex", is_complex_entry, "is_complex(input) -> bool", true, true},
      {"angle", unary_entry<"angle", angle>, "angle(input) -> Tensor: the argument, atan2(imag, real)", true, true},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
