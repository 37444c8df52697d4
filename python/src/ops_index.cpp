// Joining, splitting and index entry points: cat/concat, stack, split, chunk, unbind, index_select, gather,
// scatter_add(_), index_add, tril, triu. (Python indexing, t[...], lives elsewhere.)
#include <vector>

#include "common.h"

namespace dg::py {

namespace {
// A sequence of Tensors (list or tuple). False with a TypeError.
bool to_tensor_list(const char* op, const char* argument, PyObject* o, std::vector<Tensor>& out) {
  if (!PyTuple_Check(o) && !PyList_Check(o)) {
    type_error(op, "argument '%s' must be a tuple or list of Tensors, not %s", argument, type_name(o));
    return false;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
  PyObject** items = PySequence_Fast_ITEMS(o);
  out.clear();
  out.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!is_tensor(items[i])) {
      type_error(op, "expected a sequence of Tensors for '%s', but item %zd is %s", argument, i, type_name(items[i]));
      return false;
    }
    out.push_back(unwrap(items[i]));
  }
  return true;
}

PyObject* tuple_of(std::vector<Tensor> parts) {
  PyObject* out = PyTuple_New(static_cast<Py_ssize_t>(parts.size()));
  if (!out) return nullptr;
  for (size_t i = 0; i < parts.size(); ++i) {
    PyObject* t = wrap(std::move(parts[i]));
    if (!t) {
      Py_DECREF(out);
      return nullptr;
    }
    PyTuple_SET_ITEM(out, static_cast<Py_ssize_t>(i), t);
  }
  return out;
}

// cat/stack(tensors, dim=0)
template <bool IsStack>
PyObject* join_impl(const Signature& sig, PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  std::vector<Tensor> tensors;
  int64_t dim = 0;
  if (!to_tensor_list(sig.op(), "tensors", a[0], tensors) || (a[1] && !to_int_argument(sig.op(), "dim", a[1], dim)))
    return nullptr;
  return guarded([&] { return wrap(IsStack ? stack(tensors, dim) : cat(tensors, dim)); });
}
PyObject* cat_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("cat", {"tensors", "dim"}, 2, 1);
  return join_impl<false>(sig, self, args, nargs, kwnames);
}
PyObject* concat_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("concat", {"tensors", "dim"}, 2, 1);
  return join_impl<false>(sig, self, args, nargs, kwnames);
}
PyObject* stack_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("stack", {"tensors", "dim"}, 2, 1);
  return join_impl<true>(sig, self, args, nargs, kwnames);
}

// split(tensor, split_size_or_sections, dim=0) -> tuple; Tensor.split(split_size, dim=0).
PyObject* split_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("split", {"tensor", "split_size_or_sections", "dim"}, 3, 2);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("split", "tensor", a[0]);
  int64_t dim = 0;
  if (!input || (a[2] && !to_int_argument("split", "dim", a[2], dim))) return nullptr;
  if (PyTuple_Check(a[1]) || PyList_Check(a[1])) {
    Dims sections;
    if (!to_int_list("split", "split_size_or_sections", a[1], sections)) return nullptr;
    return guarded([&] { return tuple_of(split(*input, IntSpan(sections), dim)); });
  }
  int64_t size;
  if (!to_int_argument("split", "split_size_or_sections", a[1], size)) return nullptr;
  return guarded([&] { return tuple_of(split(*input, size, dim)); });
}

PyObject* chunk_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("chunk", {"input", "chunks", "dim"}, 3, 2);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("chunk", "input", a[0]);
  int64_t chunks, dim = 0;
  if (!input || !to_int_argument("chunk", "chunks", a[1], chunks) || (a[2] && !to_int_argument("chunk", "dim", a[2], dim)))
    return nullptr;
  return guarded([&] { return tuple_of(chunk(*input, chunks, dim)); });
}

// unbind(input, dim=0) -> tuple of views; Tensor.unbind(dim=0).
PyObject* unbind_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("unbind", {"input", "dim"}, 2, 1);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("unbind", "input", a[0]);
  int64_t dim = 0;
  if (!input || (a[1] && !to_int_argument("unbind", "dim", a[1], dim))) return nullptr;
  return guarded([&] { return tuple_of(unbind(*input, dim)); });
}

// index_select/gather(input, dim, index)
template <Tensor (*Fn)(const Tensor&, int64_t, const Tensor&)>
PyObject* dim_index_impl(const Signature& sig, PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(sig.op(), "input", a[0]);
  int64_t dim;
  if (!input || !to_int_argument(sig.op(), "dim", a[1], dim)) return nullptr;
  const Tensor* index = to_tensor(sig.op(), "index", a[2]);
  if (!index) return nullptr;
  return guarded([&] { return wrap(Fn(*input, dim, *index)); });
}
PyObject* index_select_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("index_select", {"input", "dim", "index"}, 3, 3);
  return dim_index_impl<index_select>(sig, self, args, nargs, kwnames);
}
PyObject* gather_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("gather", {"input", "dim", "index"}, 3, 3);
  return dim_index_impl<gather>(sig, self, args, nargs, kwnames);
}

// scatter_add/index_add(input, dim, index, src); index_add also takes alpha=1 (scaled src).
template <Tensor (*Fn)(const Tensor&, int64_t, const Tensor&, const Tensor&)>
PyObject* dim_index_src_impl(const Signature& sig, const char* src_name, PyObject* self, PyObject* const* args,
                             Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* a[5];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(sig.op(), "input", a[0]);
  int64_t dim;
  if (!input || !to_int_argument(sig.op(), "dim", a[1], dim)) return nullptr;
  const Tensor* index = to_tensor(sig.op(), "index", a[2]);
  const Tensor* src = index ? to_tensor(sig.op(), src_name, a[3]) : nullptr;
  if (!src) return nullptr;
  Scalar alpha = 1;
  if (sig.size() > 4 && !to_scalar_argument(sig.op(), "alpha", a[4], 1, alpha)) return nullptr;
  return guarded([&] {
    if (alpha.to_double() == 1.0) return wrap(Fn(*input, dim, *index, *src));
    return wrap(Fn(*input, dim, *index, mul(*src, alpha)));
  });
}
PyObject* scatter_add_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("scatter_add", {"input", "dim", "index", "src"}, 4, 4);
  return dim_index_src_impl<scatter_add>(sig, "src", self, args, nargs, kwnames);
}
PyObject* index_add_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("index_add", {"input", "dim", "index", "source", "alpha"}, 4, 4);
  return dim_index_src_impl<index_add>(sig, "source", self, args, nargs, kwnames);
}

PyObject* scatter_add_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("scatter_add_", {"self", "dim", "index", "src"}, 4, 4);
  PyObject* a[4];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  int64_t dim;
  if (!to_tensor("scatter_add_", "self", a[0]) || !to_int_argument("scatter_add_", "dim", a[1], dim)) return nullptr;
  const Tensor* index = to_tensor("scatter_add_", "index", a[2]);
  const Tensor* src = index ? to_tensor("scatter_add_", "src", a[3]) : nullptr;
  if (!src) return nullptr;
  return guarded([&] {
    scatter_add_(unwrap(a[0]), dim, *index, *src);
    Py_INCREF(a[0]);
    return a[0];
  });
}

// tril/triu(input, diagonal=0)
template <bool IsLower>
PyObject* triangle_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* name = IsLower ? "tril" : "triu";
  static const Signature sig(name, {"input", "diagonal"}, 2, 1);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(name, "input", a[0]);
  int64_t diagonal = 0;
  if (!input || (a[1] && !to_int_argument(name, "diagonal", a[1], diagonal))) return nullptr;
  return guarded([&] { return wrap(IsLower ? tril(*input, diagonal) : triu(*input, diagonal)); });
}
}  // namespace

void init_ops_index(nb::module_& m) {
  static const OpEntry entries[] = {
      {"cat", cat_entry, "cat(tensors, dim=0) -> Tensor", true, false},
      {"concat", concat_entry, "concat(tensors, dim=0) -> Tensor: alias of cat", true, false},
      {"stack", stack_entry, "stack(tensors, dim=0) -> Tensor: joined along a new dim", true, false},
      {"split", split_entry, "split(tensor, split_size_or_sections, dim=0) -> tuple of views", true, true},
      {"chunk", chunk_entry, "chunk(input, chunks, dim=0) -> tuple of views", true, true},
      {"unbind", unbind_entry, "unbind(input, dim=0) -> tuple of views (one autograd node)", true, true},
      {"index_select", index_select_entry, "index_select(input, dim, index) -> Tensor", true, true},
      {"gather", gather_entry, "gather(input, dim, index) -> Tensor", true, true},
      {"scatter_add", scatter_add_entry, "scatter_add(input, dim, index, src) -> Tensor", true, true},
      {"scatter_add_", scatter_add_inplace_entry, "scatter_add_(dim, index, src) -> Tensor: in place, returns self", false, true},
      {"index_add", index_add_entry, "index_add(input, dim, index, source, *, alpha=1) -> Tensor", true, true},
      {"tril", triangle_entry<true>, "tril(input, diagonal=0) -> Tensor: lower triangle, the rest zero", true, true},
      {"triu", triangle_entry<false>, "triu(input, diagonal=0) -> Tensor: upper triangle, the rest zero", true, true},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
