// Joining, splitting and index entry points: cat/concat, stack, split, chunk, unbind, index_select, gather,
// scatter_add(_), scatter(_), index_add(_), repeat, repeat_interleave, tril, triu. (Python indexing, t[...], lives elsewhere.)
#include <optional>
#include <string_view>
#include <vector>

#include "autocast.h"
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
  return guarded([&] {
    if (autocast::on()) tensors = autocast::promote(tensors);  // a promote op under torch's CPU autocast
    return wrap(IsStack ? stack(tensors, dim) : cat(tensors, dim));
  });
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

// index_add_(dim, index, source, *, alpha=1): in place, returns self.
PyObject* index_add_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("index_add_", {"self", "dim", "index", "source", "alpha"}, 4, 4);
  PyObject* a[5];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  int64_t dim;
  if (!to_tensor("index_add_", "self", a[0]) || !to_int_argument("index_add_", "dim", a[1], dim)) return nullptr;
  const Tensor* index = to_tensor("index_add_", "index", a[2]);
  const Tensor* source = index ? to_tensor("index_add_", "source", a[3]) : nullptr;
  Scalar alpha = 1;
  if (!source || !to_scalar_argument("index_add_", "alpha", a[4], 1, alpha)) return nullptr;
  return guarded([&] {
    index_add_(unwrap(a[0]), dim, *index, alpha.to_double() == 1.0 ? *source : mul(*source, alpha));
    Py_INCREF(a[0]);
    return a[0];
  });
}

// reduce=None | 'add' | 'multiply' (torch 2.13's scatter.reduce).
bool to_scatter_reduce(const char* op, PyObject* o, ScatterReduce& out) {
  out = ScatterReduce::None;
  if (!o || o == Py_None) return true;
  if (!PyUnicode_Check(o)) {
    type_error(op, "argument 'reduce' must be str, not %s", type_name(o));
    return false;
  }
  const char* text = PyUnicode_AsUTF8(o);
  if (!text) return false;
  if (std::string_view(text) == "add") out = ScatterReduce::Add;
  else if (std::string_view(text) == "multiply") out = ScatterReduce::Multiply;
  else {
    PyErr_Format(PyExc_RuntimeError, "[%s] reduce argument must be either add or multiply, got '%s'", op, text);
    return false;
  }
  return true;
}

// scatter(input, dim, index, src, *, reduce=None) and scatter(input, dim, index, value, *, reduce=None);
// Tensor.scatter_ the same in place.
template <bool Inplace>
PyObject* scatter_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* name = Inplace ? "scatter_" : "scatter";
  static const Signature sig(name, {"input", "dim", "index", "src", "value", "reduce"}, 4, 3);
  PyObject* a[6];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(name, "input", a[0]);
  int64_t dim;
  if (!input || !to_int_argument(name, "dim", a[1], dim)) return nullptr;
  const Tensor* index = to_tensor(name, "index", a[2]);
  ScatterReduce reduce;
  if (!index || !to_scatter_reduce(name, a[5], reduce)) return nullptr;
  if ((a[3] != nullptr) == (a[4] != nullptr))
    return type_error(name, "expected exactly one of 'src' (a Tensor) and 'value' (a number)");
  PyObject* operand = a[3] ? a[3] : a[4];
  const Tensor* src = nullptr;
  Scalar value;
  if (is_tensor(operand)) src = &unwrap(operand);
  else if (!to_scalar(operand, value)) {
    if (PyErr_Occurred()) return nullptr;  // an int beyond [-2**63, 2**64)
    return type_error(name, "argument '%s' must be a Tensor or a number, not %s", a[3] ? "src" : "value",
                      type_name(operand));
  }
  return guarded([&] {
    if constexpr (Inplace) {
      Tensor& target = unwrap(a[0]);
      if (src) scatter_(target, dim, *index, *src, reduce);
      else scatter_(target, dim, *index, value, reduce);
      Py_INCREF(a[0]);
      return a[0];
    } else {
      return wrap(src ? scatter(*input, dim, *index, *src, reduce) : scatter(*input, dim, *index, value, reduce));
    }
  });
}

// Tensor.repeat(*repeats): ints or one sequence (or repeats= by keyword).
PyObject* repeat_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const Tensor* tensor = self ? to_tensor("repeat", "self", self) : nullptr;
  if (!tensor) return type_error("repeat", "is a Tensor method: call x.repeat(*repeats)");
  Dims repeats;
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nkw > 1 || (nkw == 1 && nargs > 0)) return type_error("repeat", "got unexpected keyword arguments");
  if (nkw == 1) {
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "repeats") != 0)
      return type_error("repeat", "got an unexpected keyword argument '%s'", PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, 0)));
    if (!to_int_list("repeat", "repeats", args[0], repeats)) return nullptr;
  } else if (!to_shape("repeat", args, nargs, repeats)) {
    return nullptr;
  }
  return guarded([&] { return wrap(repeat(*tensor, repeats)); });
}

// repeat_interleave(input, repeats, dim=None, *, output_size=None); repeat_interleave(repeats, *, output_size=None).
PyObject* repeat_interleave_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("repeat_interleave", {"input", "repeats", "dim", "output_size"}, 3, 1);
  PyObject* a[4];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("repeat_interleave", "input", a[0]);
  if (!input) return nullptr;
  std::optional<int64_t> dim, output_size;
  int64_t value;
  if (a[2] && a[2] != Py_None) {
    if (!to_int_argument("repeat_interleave", "dim", a[2], value)) return nullptr;
    dim = value;
  }
  if (a[3] && a[3] != Py_None) {
    if (!to_int_argument("repeat_interleave", "output_size", a[3], value)) return nullptr;
    output_size = value;
  }
  if (!a[1]) {  // the index form: input is the repeats tensor
    if (dim) return type_error("repeat_interleave", "missing required argument 'repeats'");
    return guarded([&] { return wrap(repeat_interleave(*input, output_size)); });
  }
  if (is_tensor(a[1])) {
    const Tensor& repeats = unwrap(a[1]);
    return guarded([&] { return wrap(repeat_interleave(*input, repeats, dim, output_size)); });
  }
  int64_t repeats;
  if (!to_int_argument("repeat_interleave", "repeats", a[1], repeats)) return nullptr;
  return guarded([&] { return wrap(repeat_interleave(*input, repeats, dim, output_size)); });
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
      {"index_add_", index_add_inplace_entry, "index_add_(dim, index, source, *, alpha=1) -> Tensor: in place, returns self", false, true},
      {"scatter", scatter_entry<false>, "scatter(input, dim, index, src | value, *, reduce=None) -> Tensor", true, true},
      {"scatter_", scatter_entry<true>, "scatter_(dim, index, src | value, *, reduce=None) -> Tensor: in place, returns self", false, true},
      {"repeat", repeat_entry, "repeat(*repeats) -> Tensor: a copy tiled repeats[d] times along each dim", false, true},
      {"repeat_interleave", repeat_interleave_entry, "repeat_interleave(input, repeats, dim=None, *, output_size=None) -> Tensor", true, true},
      {"tril", triangle_entry<true>, "tril(input, diagonal=0) -> Tensor: lower triangle, the rest zero", true, true},
      {"triu", triangle_entry<false>, "triu(input, diagonal=0) -> Tensor: upper triangle, the rest zero", true, true},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
