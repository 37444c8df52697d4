// Reduction entry points: sum and mean over all dims or a dim / list of dims, with keepdim and dtype; max/min
// (all, along a dim as a (values, indices) struct sequence, or elementwise), amax/amin, argmax/argmin,
// logsumexp, var and std.
#include "common.h"

namespace dg::py {

namespace {
struct Sum {
  static constexpr const char* name = "sum";
  static Tensor apply(const Tensor& a, IntSpan dims, bool keepdim) { return sum(a, dims, keepdim); }
};
struct Mean {
  static constexpr const char* name = "mean";
  static Tensor apply(const Tensor& a, IntSpan dims, bool keepdim) { return mean(a, dims, keepdim); }
};

// dygrad.<op>(input, dim=None, keepdim=False, *, dtype=None); dtype casts the input first (torch).
template <class Op>
PyObject* reduce_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig(Op::name, {"input", "dim", "keepdim", "dtype"}, 3, 1);
  PyObject* a[4];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(Op::name, "input", a[0]);
  if (!input) return nullptr;
  Dims dims;
  bool all = !a[1] || a[1] == Py_None;
  if (!all && !to_int_list(Op::name, "dim", a[1], dims)) return nullptr;
  bool keepdim;
  if (!to_bool_argument(Op::name, "keepdim", a[2], false, keepdim)) return nullptr;
  DType dtype = input->dtype();
  bool cast = a[3] && a[3] != Py_None;
  if (cast && !to_dtype(Op::name, a[3], dtype)) return nullptr;
  return guarded([&] {
    Tensor x = cast ? to(*input, dtype) : *input;
    // An explicit empty list reduces nothing in torch; dygrad's C++ API reads it as "all dims".
    Tensor out = !all && dims.empty() ? Op::apply(x, std::span<const int64_t>(), keepdim) : Op::apply(x, dims, keepdim);
    // An explicit dtype is the result's dtype (sum of int32 accumulates in int64 and casts back, as torch's
    // result wraps the same way; dtype=bool gives "any").
    if (cast && out.dtype() != dtype) out = to(out, dtype);
    return wrap(std::move(out));
  });
}

// max(input) / max(input, dim, keepdim=False) -> (values, indices) / max(input, other) -> maximum.
template <bool IsMax>
PyObject* max_min_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* name = IsMax ? "max" : "min";
  static const Signature sig(name, {"input", "dim", "keepdim", "other"}, 3, 1);
  PyObject* a[4];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(name, "input", a[0]);
  if (!input) return nullptr;
  PyObject* other = a[3] ? a[3] : (a[1] && is_tensor(a[1]) ? a[1] : nullptr);
  if (other) {
    if (a[2] || (a[3] && a[1])) return type_error(name, "takes (input, other) without dim or keepdim");
    const Tensor* o = to_tensor(name, "other", other);
    if (!o) return nullptr;
    return guarded([&] { return wrap(IsMax ? maximum(*input, *o) : minimum(*input, *o)); });
  }
  if (!a[1]) {
    if (a[2]) return type_error(name, "keepdim requires a dim");
    return guarded([&] { return wrap(IsMax ? max(*input) : min(*input)); });
  }
  int64_t dim;
  bool keepdim;
  if (!to_int_argument(name, "dim", a[1], dim) || !to_bool_argument(name, "keepdim", a[2], false, keepdim)) return nullptr;
  return guarded([&] { return wrap_values_indices(name, IsMax ? max(*input, dim, keepdim) : min(*input, dim, keepdim)); });
}

// amax/amin(input, dim=(), keepdim=False): an empty dim reduces all dims (torch).
// all/any(input, dim=None, keepdim=False): dim an int or a tuple of ints; None reduces all dims, () none (each
// element's own truth, as torch).
struct Amax {
  static constexpr const char* name = "amax";
  static Tensor apply(const Tensor& a, IntSpan dims, bool keepdim, bool) { return amax(a, dims, keepdim); }
};
struct Amin {
  static constexpr const char* name = "amin";
  static Tensor apply(const Tensor& a, IntSpan dims, bool keepdim, bool) { return amin(a, dims, keepdim); }
};
template <bool IsAll>
struct Truth {
  static constexpr const char* name = IsAll ? "all" : "any";
  static Tensor apply(const Tensor& a, IntSpan dims, bool keepdim, bool over_nothing) {
    if (over_nothing) {
      Tensor truth = ne(a, Scalar(0));
      return a.dtype() == DType::UInt8 ? to(truth, DType::UInt8) : truth;
    }
    return IsAll ? all(a, dims, keepdim) : any(a, dims, keepdim);
  }
};

// Op(input, dim, keepdim=False) with dim an int, a list of ints or None; Op::apply learns whether an explicit
// empty list was given.
template <class Op>
PyObject* dims_keepdim_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig(Op::name, {"input", "dim", "keepdim"}, 3, 1);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(Op::name, "input", a[0]);
  const bool given = a[1] && a[1] != Py_None;
  Dims dims;
  bool keepdim;
  if (!input || (given && !to_int_list(Op::name, "dim", a[1], dims)) ||
      !to_bool_argument(Op::name, "keepdim", a[2], false, keepdim))
    return nullptr;
  return guarded([&] { return wrap(Op::apply(*input, dims, keepdim, given && dims.empty())); });
}

// argmax/argmin(input, dim=None, keepdim=False)
template <bool IsMax>
PyObject* arg_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* name = IsMax ? "argmax" : "argmin";
  static const Signature sig(name, {"input", "dim", "keepdim"}, 3, 1);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(name, "input", a[0]);
  std::optional<int64_t> dim;
  bool keepdim;
  if (!input || !to_bool_argument(name, "keepdim", a[2], false, keepdim)) return nullptr;
  if (a[1] && a[1] != Py_None) {
    int64_t d;
    if (!to_int_argument(name, "dim", a[1], d)) return nullptr;
    dim = d;
  }
  return guarded([&] { return wrap(IsMax ? argmax(*input, dim, keepdim) : argmin(*input, dim, keepdim)); });
}

// logsumexp(input, dim, keepdim=False)
PyObject* logsumexp_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("logsumexp", {"input", "dim", "keepdim"}, 3, 2);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("logsumexp", "input", a[0]);
  Dims dims;
  bool keepdim;
  if (!input || !to_int_list("logsumexp", "dim", a[1], dims) || !to_bool_argument("logsumexp", "keepdim", a[2], false, keepdim))
    return nullptr;
  return guarded([&] { return wrap(logsumexp(*input, dims, keepdim)); });
}

// var/std(input, dim=None, unbiased=True, keepdim=False, *, correction=1); var(input, unbiased) too.
template <bool IsStd>
PyObject* var_std_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* name = IsStd ? "std" : "var";
  static const Signature sig(name, {"input", "dim", "unbiased", "keepdim", "correction"}, 4, 1);
  PyObject* a[5];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(name, "input", a[0]);
  if (!input) return nullptr;
  PyObject* dim = a[1];
  PyObject* unbiased = a[2];
  if (dim && PyBool_Check(dim)) {  // var(input, unbiased)
    if (unbiased) return type_error(name, "got multiple values for argument 'unbiased'");
    unbiased = dim;
    dim = nullptr;
  }
  Dims dims;
  bool all = !dim || dim == Py_None, keepdim, unbiased_value;
  if (!all && !to_int_list(name, "dim", dim, dims)) return nullptr;
  if (!to_bool_argument(name, "keepdim", a[3], false, keepdim) ||
      !to_bool_argument(name, "unbiased", unbiased, true, unbiased_value))
    return nullptr;
  double correction = unbiased_value ? 1 : 0;
  if (a[4] && a[4] != Py_None) {
    if (unbiased) return type_error(name, "takes either 'unbiased' or 'correction', not both");
    Scalar c;
    if (!to_scalar_argument(name, "correction", a[4], 1, c)) return nullptr;
    correction = c.to_double();
  }
  return guarded([&] {
    return wrap(IsStd ? std_dev(*input, dims, correction, keepdim) : var(*input, dims, correction, keepdim));
  });
}
}  // namespace

void init_ops_reduce(nb::module_& m) {
  static const OpEntry entries[] = {
      {"sum", reduce_entry<Sum>, "sum(input, dim=None, keepdim=False, *, dtype=None) -> Tensor", true, true},
      {"mean", reduce_entry<Mean>, "mean(input, dim=None, keepdim=False, *, dtype=None) -> Tensor", true, true},
      {"max", max_min_entry<true>, "max(input) | max(input, dim, keepdim=False) -> (values, indices) | max(input, other)", true, true},
      {"min", max_min_entry<false>, "min(input) | min(input, dim, keepdim=False) -> (values, indices) | min(input, other)", true, true},
      {"amax", dims_keepdim_entry<Amax>, "amax(input, dim=(), keepdim=False) -> Tensor", true, true},
      {"all", dims_keepdim_entry<Truth<true>>, "all(input, dim=None, keepdim=False) -> Tensor (bool; uint8 for uint8)", true, true},
      {"any", dims_keepdim_entry<Truth<false>>, "any(input, dim=None, keepdim=False) -> Tensor (bool; uint8 for uint8)", true, true},
      {"amin", dims_keepdim_entry<Amin>, "amin(input, dim=(), keepdim=False) -> Tensor", true, true},
      {"argmax", arg_entry<true>, "argmax(input, dim=None, keepdim=False) -> Tensor (int64)", true, true},
      {"argmin", arg_entry<false>, "argmin(input, dim=None, keepdim=False) -> Tensor (int64)", true, true},
      {"logsumexp", logsumexp_entry, "logsumexp(input, dim, keepdim=False) -> Tensor", true, true},
      {"var", var_std_entry<false>, "var(input, dim=None, unbiased=True, keepdim=False, *, correction=1) -> Tensor", true, true},
      {"std", var_std_entry<true>, "std(input, dim=None, unbiased=True, keepdim=False, *, correction=1) -> Tensor", true, true},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
