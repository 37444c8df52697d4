// Ordering and scan entry points: sort and topk (dygrad.return_types.sort / topk: values, indices), argsort,
// cumsum/cumprod (and their in-place forms), flip, fliplr, flipud, roll.
#include <optional>

#include "common.h"

namespace dg::py {

namespace {
// stable=None reads as False (torch's Optional[bool]).
bool to_stable(const char* op, PyObject* o, bool& out) {
  return to_bool_argument(op, "stable", o == Py_None ? nullptr : o, false, out);
}

// sort(input, dim=-1, descending=False, *, stable=False) and argsort(input, dim=-1, descending=False, *, stable=False).
// torch's second overload, sort(input, *, stable, dim=-1, descending=False), is the same call by keyword.
template <bool IsSort>
PyObject* sort_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* name = IsSort ? "sort" : "argsort";
  static const Signature sig(name, {"input", "dim", "descending", "stable"}, 3, 1);
  PyObject* a[4];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(name, "input", a[0]);
  int64_t dim = -1;
  bool descending, stable;
  if (!input || (a[1] && !to_int_argument(name, "dim", a[1], dim)) ||
      !to_bool_argument(name, "descending", a[2], false, descending) || !to_stable(name, a[3], stable))
    return nullptr;
  // torch's overloads: (input, dim=-1, descending=False) or (input, *, stable, dim=-1, descending=False).
  if (a[3] && nargs > (self ? 0 : 1))
    return type_error(name, "takes dim and descending by keyword when stable is given (torch's overload "
                      "(input, *, stable, dim=-1, descending=False))");
  return guarded([&] {
    if constexpr (IsSort) return wrap_values_indices("sort", sort(*input, dim, descending, stable));
    else return wrap(argsort(*input, dim, descending, stable));
  });
}

// topk(input, k, dim=-1, largest=True, sorted=True)
PyObject* topk_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("topk", {"input", "k", "dim", "largest", "sorted"}, 5, 2);
  PyObject* a[5];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("topk", "input", a[0]);
  int64_t k, dim = -1;
  bool largest, sorted;
  if (!input || !to_int_argument("topk", "k", a[1], k) || (a[2] && !to_int_argument("topk", "dim", a[2], dim)) ||
      !to_bool_argument("topk", "largest", a[3], true, largest) || !to_bool_argument("topk", "sorted", a[4], true, sorted))
    return nullptr;
  return guarded([&] { return wrap_values_indices("topk", topk(*input, k, dim, largest, sorted)); });
}

// cumsum/cumprod(input, dim, *, dtype=None); Tensor.cumsum_/cumprod_(dim, *, dtype=None) in place, returning self.
template <bool IsSum, bool InPlace>
PyObject* scan_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* name = IsSum ? (InPlace ? "cumsum_" : "cumsum") : (InPlace ? "cumprod_" : "cumprod");
  static const Signature sig(name, {"input", "dim", "dtype"}, 2, 2);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(name, "input", a[0]);
  int64_t dim;
  if (!input || !to_int_argument(name, "dim", a[1], dim)) return nullptr;
  std::optional<DType> dtype;
  if (a[2] && a[2] != Py_None) {
    DType t;
    if (!to_dtype(name, a[2], t)) return nullptr;
    dtype = t;
  }
  return guarded([&]() -> PyObject* {
    if constexpr (InPlace) {
      if (IsSum) cumsum_(unwrap(a[0]), dim, dtype);
      else cumprod_(unwrap(a[0]), dim, dtype);
      Py_INCREF(a[0]);
      return a[0];
    } else {
      return wrap(IsSum ? cumsum(*input, dim, dtype) : cumprod(*input, dim, dtype));
    }
  });
}

// flip(input, dims): dims an int or a sequence of ints; Tensor.flip(*dims) too.
PyObject* flip_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("flip", {"input", "dims"}, 2, 2);
  if (self && nargs > 1 && !kwnames) {
    Dims dims;
    if (!to_shape("flip", args, nargs, dims)) return nullptr;
    return guarded([&] { return wrap(flip(unwrap(self), dims)); });
  }
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("flip", "input", a[0]);
  Dims dims;
  if (!input || !to_int_list("flip", "dims", a[1], dims)) return nullptr;
  return guarded([&] { return wrap(flip(*input, dims)); });
}

// fliplr(input), flipud(input)
template <bool LeftRight>
PyObject* flip_side_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* name = LeftRight ? "fliplr" : "flipud";
  static const Signature sig(name, {"input"}, 1, 1);
  PyObject* a[1];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(name, "input", a[0]);
  if (!input) return nullptr;
  return guarded([&] { return wrap(LeftRight ? fliplr(*input) : flipud(*input)); });
}

// roll(input, shifts, dims=None): shifts and dims ints or sequences of ints.
PyObject* roll_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("roll", {"input", "shifts", "dims"}, 3, 2);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("roll", "input", a[0]);
  Dims shifts, dims;
  if (!input || !to_int_list("roll", "shifts", a[1], shifts) ||
      (a[2] && a[2] != Py_None && !to_int_list("roll", "dims", a[2], dims)))
    return nullptr;
  return guarded([&] { return wrap(roll(*input, shifts, dims)); });
}
}  // namespace

void init_ops_sort(nb::module_& m) {
  static const OpEntry entries[] = {
      {"sort", sort_entry<true>, "sort(input, dim=-1, descending=False, *, stable=False) -> (values, indices): stable", true, true},
      {"argsort", sort_entry<false>, "argsort(input, dim=-1, descending=False, *, stable=False) -> Tensor: the indices of sort", true, true},
      {"topk", topk_entry, "topk(input, k, dim=-1, largest=True, sorted=True) -> (values, indices)", true, true},
      {"cumsum", scan_entry<true, false>, "cumsum(input, dim, *, dtype=None) -> Tensor: running sum (integers give int64)", true, true},
      {"cumprod", scan_entry<false, false>, "cumprod(input, dim, *, dtype=None) -> Tensor: running product (integers give int64)", true, true},
      {"cumsum_", scan_entry<true, true>, "cumsum_(dim, *, dtype=None) -> Tensor: in place, returns self", false, true},
      {"cumprod_", scan_entry<false, true>, "cumprod_(dim, *, dtype=None) -> Tensor: in place, returns self", false, true},
      {"flip", flip_entry, "flip(input, dims) -> Tensor: reversed along dims (a copy)", true, true},
      {"fliplr", flip_side_entry<true>, "fliplr(input) -> Tensor: flip(input, [1])", true, true},
      {"flipud", flip_side_entry<false>, "flipud(input) -> Tensor: flip(input, [0])", true, true},
      {"roll", roll_entry, "roll(input, shifts, dims=None) -> Tensor: shifted with wrap-around (flattened without dims)", true, true},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
