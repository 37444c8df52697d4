// Linear-algebra entry points: matmul (and the `@` / `@=` operators), mm, bmm, outer, linear.
#include <algorithm>

#include "common.h"

namespace dg::py {

namespace {
template <Tensor (*Fn)(const Tensor&, const Tensor&)>
PyObject* two_tensor_impl(const Signature& sig, const char* second, PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                          PyObject* kwnames) {
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(sig.op(), "input", a[0]);
  const Tensor* other = input ? to_tensor(sig.op(), second, a[1]) : nullptr;
  if (!other) return nullptr;
  return guarded([&] { return wrap(Fn(*input, *other)); });
}
PyObject* matmul_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("matmul", {"input", "other"}, 2, 2);
  return two_tensor_impl<matmul>(sig, "other", self, args, nargs, kwnames);
}
PyObject* mm_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("mm", {"input", "mat2"}, 2, 2);
  return two_tensor_impl<mm>(sig, "mat2", self, args, nargs, kwnames);
}
PyObject* bmm_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("bmm", {"input", "mat2"}, 2, 2);
  return two_tensor_impl<bmm>(sig, "mat2", self, args, nargs, kwnames);
}
PyObject* outer_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("outer", {"input", "vec2"}, 2, 2);
  return two_tensor_impl<outer>(sig, "vec2", self, args, nargs, kwnames);
}

// linear(input, weight, bias=None): input @ weight.T + bias.
PyObject* linear_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("linear", {"input", "weight", "bias"}, 3, 2);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("linear", "input", a[0]);
  const Tensor* weight = input ? to_tensor("linear", "weight", a[1]) : nullptr;
  if (!weight) return nullptr;
  const Tensor* bias = nullptr;
  if (a[2] && a[2] != Py_None && !(bias = to_tensor("linear", "bias", a[2]))) return nullptr;
  return guarded([&] { return wrap(linear(*input, *weight, bias ? *bias : Tensor())); });
}

PyObject* matmul_slot(PyObject* a, PyObject* b) {
  if (!is_tensor(a) || !is_tensor(b)) Py_RETURN_NOTIMPLEMENTED;
  return guarded([&] { return wrap(matmul(unwrap(a), unwrap(b))); });
}

// `a @= b`: torch computes a @ b and writes it back into a (the shapes must match).
PyObject* matmul_inplace_slot(PyObject* a, PyObject* b) {
  if (!is_tensor(a) || !is_tensor(b)) Py_RETURN_NOTIMPLEMENTED;
  return guarded([&] {
    Tensor& target = unwrap(a);
    Tensor r = matmul(target, unwrap(b));
    DG_CHECK(std::ranges::equal(r.shape(), target.shape()), Runtime, "[matmul] `@=` needs a result of the target's shape ",
             target.shape(), ", got ", r.shape());
    copy_(target, r);
    Py_INCREF(a);
    return a;
  });
}
}  // namespace

const PyType_Slot* linalg_operator_slots() {
  static PyType_Slot slots[] = {
      {Py_nb_matrix_multiply, reinterpret_cast<void*>(matmul_slot)},
      {Py_nb_inplace_matrix_multiply, reinterpret_cast<void*>(matmul_inplace_slot)},
      {0, nullptr},
  };
  return slots;
}

void init_ops_linalg(nb::module_& m) {
  static const OpEntry entries[] = {
      {"matmul", matmul_entry, "matmul(input, other) -> Tensor: torch.matmul's broadcasting rules", true, true},
      {"mm", mm_entry, "mm(input, mat2) -> Tensor: [M, K] @ [K, N]", true, true},
      {"bmm", bmm_entry, "bmm(input, mat2) -> Tensor: [B, M, K] @ [B, K, N]", true, true},
      {"outer", outer_entry, "outer(input, vec2) -> Tensor: [M] x [N] -> [M, N]", true, true},
      {"linear", linear_entry, "linear(input, weight, bias=None) -> Tensor: input @ weight.T + bias", true, false},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
