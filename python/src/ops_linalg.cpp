// Linear-algebra entry points: matmul (and the `@` / `@=` operators), mm, bmm, outer, linear, addmm(_), baddbmm,
// addbmm, norm, linalg.vector_norm, einsum.
#include <algorithm>
#include <optional>
#include <string_view>
#include <vector>

#include "autocast.h"
#include "common.h"

namespace dg::py {

namespace {
template <Tensor (*Fn)(const Tensor&, const Tensor&), bool Autocast = true>
PyObject* two_tensor_impl(const Signature& sig, const char* second, PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                          PyObject* kwnames) {
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(sig.op(), "input", a[0]);
  const Tensor* other = input ? to_tensor(sig.op(), second, a[1]) : nullptr;
  if (!other) return nullptr;
  return guarded([&] {
    if (Autocast && autocast::on()) return wrap(Fn(autocast::lower(*input), autocast::lower(*other)));
    return wrap(Fn(*input, *other));
  });
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
  return two_tensor_impl<outer, false>(sig, "vec2", self, args, nargs, kwnames);
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
  return guarded([&] {
    if (autocast::on())
      return wrap(linear(autocast::lower(*input), autocast::lower(*weight), bias ? autocast::lower(*bias) : Tensor()));
    return wrap(linear(*input, *weight, bias ? *bias : Tensor()));
  });
}

// addmm / baddbmm / addbmm(input, m1, m2, *, beta=1, alpha=1); Tensor.addmm_ in place.
template <int Kind>  // 0 addmm, 1 baddbmm, 2 addbmm, 3 addmm_
PyObject* scaled_product_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* names[4] = {"addmm", "baddbmm", "addbmm", "addmm_"};
  static constexpr const char* name = names[Kind];
  static constexpr const char* first = Kind == 0 || Kind == 3 ? "mat1" : "batch1";
  static constexpr const char* second = Kind == 0 || Kind == 3 ? "mat2" : "batch2";
  static const Signature sig(name, {Kind == 3 ? "self" : "input", first, second, "beta", "alpha"}, 3, 3);
  PyObject* a[5];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(name, "input", a[0]);
  const Tensor* m1 = input ? to_tensor(name, first, a[1]) : nullptr;
  const Tensor* m2 = m1 ? to_tensor(name, second, a[2]) : nullptr;
  Scalar beta, alpha;
  if (!m2 || !to_scalar_argument(name, "beta", a[3], 1, beta) || !to_scalar_argument(name, "alpha", a[4], 1, alpha))
    return nullptr;
  return guarded([&] {
    if constexpr (Kind == 3) {
      addmm_(unwrap(a[0]), *m1, *m2, beta, alpha);
      Py_INCREF(a[0]);
      return a[0];
    } else {
      if (autocast::on()) {
        const Tensor i = autocast::lower(*input), x = autocast::lower(*m1), y = autocast::lower(*m2);
        return wrap(Kind == 0 ? addmm(i, x, y, beta, alpha) : Kind == 1 ? baddbmm(i, x, y, beta, alpha) : addbmm(i, x, y, beta, alpha));
      }
      return wrap(Kind == 0 ? addmm(*input, *m1, *m2, beta, alpha)
                  : Kind == 1 ? baddbmm(*input, *m1, *m2, beta, alpha) : addbmm(*input, *m1, *m2, beta, alpha));
    }
  });
}

// A norm order: a number (inf, -inf included); false with a TypeError.
bool to_order(const char* op, const char* argument, PyObject* o, double fallback, double& out) {
  Scalar s;
  if (!to_scalar_argument(op, argument, o, fallback, s)) return false;
  out = s.to_double();
  return true;
}
// dim=None | int | sequence, keepdim, dtype=None.
bool norm_options(const char* op, PyObject* dim, PyObject* keepdim_object, PyObject* dtype_object, Dims& dims,
                  bool& keepdim, std::optional<DType>& dtype) {
  if (dim && dim != Py_None && !to_int_list(op, "dim", dim, dims)) return false;
  if (!to_bool_argument(op, "keepdim", keepdim_object, false, keepdim)) return false;
  if (dtype_object && dtype_object != Py_None) {
    DType t;
    if (!to_dtype(op, dtype_object, t)) return false;
    dtype = t;
  }
  return true;
}

// linalg.vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None)
PyObject* vector_norm_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("linalg.vector_norm", {"x", "ord", "dim", "keepdim", "dtype"}, 4, 1);
  PyObject* a[5];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* x = to_tensor(sig.op(), "x", a[0]);
  double ord;
  Dims dims;
  bool keepdim;
  std::optional<DType> dtype;
  if (!x || !to_order(sig.op(), "ord", a[1], 2, ord) || !norm_options(sig.op(), a[2], a[3], a[4], dims, keepdim, dtype))
    return nullptr;
  return guarded([&] { return wrap(vector_norm(*x, ord, dims, keepdim, dtype)); });
}

// norm(input, p='fro', dim=None, keepdim=False, dtype=None): torch.norm's vector cases ('fro' is the 2-norm over
// the dims; 'nuc' is not implemented).
PyObject* norm_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("norm", {"input", "p", "dim", "keepdim", "dtype"}, 5, 1);
  PyObject* a[5];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("norm", "input", a[0]);
  if (!input) return nullptr;
  double p = 2;
  if (a[1] && PyUnicode_Check(a[1])) {
    const char* order = PyUnicode_AsUTF8(a[1]);
    if (!order) return nullptr;
    if (std::string_view(order) == "nuc") {
      PyErr_SetString(PyExc_NotImplementedError, "[norm] p='nuc' (the nuclear norm) is not implemented in dygrad");
      return nullptr;
    }
    if (std::string_view(order) != "fro") {
      PyErr_Format(PyExc_RuntimeError, "[norm] order %s not supported (a number, inf, -inf or 'fro')", order);
      return nullptr;
    }
  } else if (a[1] && a[1] != Py_None && !to_order("norm", "p", a[1], 2, p)) {
    return nullptr;
  }
  Dims dims;
  bool keepdim;
  std::optional<DType> dtype;
  if (!norm_options("norm", a[2], a[3], a[4], dims, keepdim, dtype)) return nullptr;
  return guarded([&] { return wrap(vector_norm(*input, p, dims, keepdim, dtype)); });
}

// einsum(equation, *operands) or einsum(equation, [operands]).
PyObject* einsum_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (kwnames && PyTuple_GET_SIZE(kwnames) > 0) return type_error("einsum", "takes no keyword arguments");
  if (nargs < 1 || !PyUnicode_Check(args[0]))
    return type_error("einsum", "argument 'equation' (position 1) must be str");
  Py_ssize_t size;
  const char* text = PyUnicode_AsUTF8AndSize(args[0], &size);
  if (!text) return nullptr;
  PyObject* const* items = args + 1;
  Py_ssize_t count = nargs - 1;
  if (nargs == 2 && (PyList_Check(args[1]) || PyTuple_Check(args[1]))) {
    items = PySequence_Fast_ITEMS(args[1]);
    count = PySequence_Fast_GET_SIZE(args[1]);
  }
  std::vector<Tensor> operands;
  operands.reserve(static_cast<size_t>(count));
  for (Py_ssize_t i = 0; i < count; ++i) {
    if (!is_tensor(items[i])) return type_error("einsum", "operand %zd must be a Tensor, not %s", i, type_name(items[i]));
    operands.push_back(unwrap(items[i]));
  }
  return guarded([&] {
    if (autocast::on())  // torch's einsum runs bmm, a lower-precision op under autocast
      for (Tensor& t : operands) t = autocast::lower(t);
    return wrap(einsum(std::string_view(text, static_cast<size_t>(size)), operands));
  });
}

PyObject* matmul_slot(PyObject* a, PyObject* b) {
  if (!is_tensor(a) || !is_tensor(b)) Py_RETURN_NOTIMPLEMENTED;
  return guarded([&] {
    if (autocast::on()) return wrap(matmul(autocast::lower(unwrap(a)), autocast::lower(unwrap(b))));
    return wrap(matmul(unwrap(a), unwrap(b)));
  });
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
      {"addmm", scaled_product_entry<0>, "addmm(input, mat1, mat2, *, beta=1, alpha=1) -> Tensor: beta * input + alpha * mat1 @ mat2", true, true},
      {"baddbmm", scaled_product_entry<1>, "baddbmm(input, batch1, batch2, *, beta=1, alpha=1) -> Tensor", true, true},
      {"addbmm", scaled_product_entry<2>, "addbmm(input, batch1, batch2, *, beta=1, alpha=1) -> Tensor: the batch summed", true, true},
      {"addmm_", scaled_product_entry<3>, "addmm_(mat1, mat2, *, beta=1, alpha=1) -> Tensor: in place, returns self", false, true},
      {"norm", norm_entry, "norm(input, p='fro', dim=None, keepdim=False, dtype=None) -> Tensor: a vector norm", true, true},
      {"_linalg_vector_norm", vector_norm_entry, "linalg.vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None) -> Tensor", true, false},
      {"einsum", einsum_entry, "einsum(equation, *operands) -> Tensor", true, false},
      {"linear", linear_entry, "linear(input, weight, bias=None) -> Tensor: input @ weight.T + bias", true, false},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
