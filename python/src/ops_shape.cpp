// Shape and view entry points: view (of a shape, or of a dtype), reshape, expand, permute (shape given as ints or one sequence, as
// torch takes them), transpose, t, detach, narrow, select, squeeze, unsqueeze, flatten, unflatten. Views share storage; nothing is copied here.
// The in-place metadata methods (t_, transpose_, swapdims_, squeeze_, unsqueeze_, as_strided_, detach_, resize_,
// resize_as_) change the tensor itself (ops/shape_inplace.h).
#include <algorithm>
#include <optional>

#include "common.h"
#include "dygrad/ops/shape_inplace.h"

namespace dg::py {

namespace {
// Ops that take a list of ints: Tensor.<op>(*shape) / Tensor.<op>(shape) and dygrad.<op>(input, shape).
struct View {
  static constexpr const char* name = "view";
  static constexpr const char* keyword = "size";
  static Tensor apply(const Tensor& a, IntSpan s) { return view(a, s); }
};
struct Reshape {
  static constexpr const char* name = "reshape";
  static constexpr const char* keyword = "shape";
  static Tensor apply(const Tensor& a, IntSpan s) { return reshape(a, s); }
};
struct Expand {
  static constexpr const char* name = "expand";
  static constexpr const char* keyword = "size";
  static Tensor apply(const Tensor& a, IntSpan s) { return expand(a, s); }
};
struct BroadcastTo {
  static constexpr const char* name = "broadcast_to";
  static constexpr const char* keyword = "size";
  static Tensor apply(const Tensor& a, IntSpan s) { return broadcast_to(a, s); }
};
struct Permute {
  static constexpr const char* name = "permute";
  static constexpr const char* keyword = "dims";
  static Tensor apply(const Tensor& a, IntSpan s) { return permute(a, s); }
};

template <class Op>
PyObject* int_list_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  // Positional: [input,] then the ints (or one sequence); or the list by keyword.
  PyObject* input = self;
  if (!input) {
    if (nargs == 0) return type_error(Op::name, "missing required argument 'input'");
    input = args[0];
    ++args;
    --nargs;
  }
  const Tensor* tensor = to_tensor(Op::name, "input", input);
  if (!tensor) return nullptr;
  Dims list;
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nkw > 1 || (nkw == 1 && nargs > 0)) return type_error(Op::name, "got unexpected keyword arguments");
  if (nkw == 1) {
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), Op::keyword) != 0)
      return type_error(Op::name, "got an unexpected keyword argument '%s'", PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, 0)));
    if (!to_int_list(Op::name, Op::keyword, args[0], list)) return nullptr;
  } else if (!to_shape(Op::name, args, nargs, list)) {
    return nullptr;
  }
  return guarded([&] { return wrap(Op::apply(*tensor, list)); });
}

PyObject* transpose_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("transpose", {"input", "dim0", "dim1"}, 3, 3);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("transpose", "input", a[0]);
  int64_t dim0, dim1;
  if (!input || !to_int_argument("transpose", "dim0", a[1], dim0) || !to_int_argument("transpose", "dim1", a[2], dim1))
    return nullptr;
  return guarded([&] { return wrap(transpose(*input, dim0, dim1)); });
}

// Ops of one Tensor argument and no options.
template <Tensor (*Fn)(const Tensor&)>
PyObject* unary_entry_impl(const char* name, PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (kwnames && PyTuple_GET_SIZE(kwnames) > 0) return type_error(name, "takes no keyword arguments");
  PyObject* input = self ? self : (nargs > 0 ? args[0] : nullptr);
  if (nargs != (self ? 0 : 1)) return type_error(name, "takes 1 argument (%zd given)", nargs + (self ? 1 : 0));
  const Tensor* tensor = to_tensor(name, "input", input);
  if (!tensor) return nullptr;
  return guarded([&] { return wrap(Fn(*tensor)); });
}
PyObject* t_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return unary_entry_impl<t>("t", self, args, nargs, kwnames);
}
PyObject* detach_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return unary_entry_impl<detach>("detach", self, args, nargs, kwnames);
}

PyObject* narrow_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("narrow", {"input", "dim", "start", "length"}, 4, 4);
  PyObject* a[4];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("narrow", "input", a[0]);
  int64_t dim, start, length;
  if (!input || !to_int_argument("narrow", "dim", a[1], dim) || !to_int_argument("narrow", "start", a[2], start) ||
      !to_int_argument("narrow", "length", a[3], length))
    return nullptr;
  return guarded([&] { return wrap(narrow(*input, dim, start, length)); });
}

PyObject* select_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("select", {"input", "dim", "index"}, 3, 3);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("select", "input", a[0]);
  int64_t dim, index;
  if (!input || !to_int_argument("select", "dim", a[1], dim) || !to_int_argument("select", "index", a[2], index))
    return nullptr;
  return guarded([&] { return wrap(select(*input, dim, index)); });
}

// squeeze(input, dim=None): dim is an int or a tuple of ints (torch 2); only size-1 dims are removed.
PyObject* squeeze_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("squeeze", {"input", "dim"}, 2, 1);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("squeeze", "input", a[0]);
  if (!input) return nullptr;
  if (!a[1] || a[1] == Py_None) return guarded([&] { return wrap(squeeze(*input)); });
  Dims dims;
  if (!to_int_list("squeeze", "dim", a[1], dims)) return nullptr;
  return guarded([&] {
    const int64_t ndim = input->dim();
    for (int64_t& d : dims) {
      DG_CHECK(d >= -std::max<int64_t>(ndim, 1) && d < std::max<int64_t>(ndim, 1), Index, "[squeeze] dim ", d,
               " is out of range for a tensor of ", ndim, " dims");
      if (d < 0) d += std::max<int64_t>(ndim, 1);
    }
    std::sort(dims.begin(), dims.end());
    Tensor out = *input;
    for (size_t i = dims.size(); i-- > 0;)
      if (i + 1 == dims.size() || dims[i] != dims[i + 1]) out = squeeze(out, dims[i]);
    return wrap(out);
  });
}

PyObject* unsqueeze_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("unsqueeze", {"input", "dim"}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("unsqueeze", "input", a[0]);
  int64_t dim;
  if (!input || !to_int_argument("unsqueeze", "dim", a[1], dim)) return nullptr;
  return guarded([&] { return wrap(unsqueeze(*input, dim)); });
}

PyObject* flatten_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("flatten", {"input", "start_dim", "end_dim"}, 3, 1);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("flatten", "input", a[0]);
  int64_t start = 0, end = -1;
  if (!input || (a[1] && !to_int_argument("flatten", "start_dim", a[1], start)) ||
      (a[2] && !to_int_argument("flatten", "end_dim", a[2], end)))
    return nullptr;
  return guarded([&] { return wrap(flatten(*input, start, end)); });
}

PyObject* unflatten_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("unflatten", {"input", "dim", "sizes"}, 3, 3);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("unflatten", "input", a[0]);
  int64_t dim;
  Dims sizes;
  if (!input || !to_int_argument("unflatten", "dim", a[1], dim) || !to_int_list("unflatten", "sizes", a[2], sizes))
    return nullptr;
  return guarded([&] { return wrap(unflatten(*input, dim, sizes)); });
}
// The in-place view ops: the out-of-place entry (its parsing and errors) makes the view of self, whose metadata and
// history self then takes; returns self.
template <FastcallFunction Entry>
PyObject* in_place_view_entry(const char* name, PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                              PyObject* kwnames) {
  const Tensor* target = to_tensor(name, "self", self);
  if (!target) return nullptr;
  PyObject* view = Entry(self, args, nargs, kwnames);
  if (!view) return nullptr;
  PyObject* result = guarded([&] {
    assign_view_in_place(name, *target, unwrap(view));
    Py_INCREF(self);
    return self;
  });
  Py_DECREF(view);
  return result;
}
PyObject* t_inplace_entry(PyObject* self, PyObject* const*, Py_ssize_t nargs, PyObject* kwnames) {
  const Tensor* target = to_tensor("t_", "self", self);
  if (!target) return nullptr;
  if (nargs != 0 || (kwnames && PyTuple_GET_SIZE(kwnames) > 0)) return type_error("t_", "takes no arguments");
  return guarded([&] {
    t_(*target);
    Py_INCREF(self);
    return self;
  });
}
PyObject* transpose_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return in_place_view_entry<transpose_entry>("transpose_", self, args, nargs, kwnames);
}
PyObject* swapdims_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return in_place_view_entry<transpose_entry>("swapdims_", self, args, nargs, kwnames);
}
PyObject* swapaxes_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return in_place_view_entry<transpose_entry>("swapaxes_", self, args, nargs, kwnames);
}
PyObject* squeeze_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return in_place_view_entry<squeeze_entry>("squeeze_", self, args, nargs, kwnames);
}
PyObject* unsqueeze_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  return in_place_view_entry<unsqueeze_entry>("unsqueeze_", self, args, nargs, kwnames);
}

// Tensor.as_strided_(size, stride, storage_offset=None)
PyObject* as_strided_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("as_strided_", {"self", "size", "stride", "storage_offset"}, 4, 3);
  PyObject* a[4];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* target = to_tensor("as_strided_", "self", a[0]);
  Dims sizes, strides;
  if (!target || !to_int_list("as_strided_", "size", a[1], sizes) || !to_int_list("as_strided_", "stride", a[2], strides))
    return nullptr;
  std::optional<int64_t> offset;
  if (a[3] && a[3] != Py_None) {
    int64_t value;
    if (!to_int_argument("as_strided_", "storage_offset", a[3], value)) return nullptr;
    offset = value;
  }
  return guarded([&] {
    as_strided_(*target, sizes, strides, offset);
    Py_INCREF(a[0]);
    return a[0];
  });
}

PyObject* detach_inplace_entry(PyObject* self, PyObject* const*, Py_ssize_t nargs, PyObject* kwnames) {
  const Tensor* target = to_tensor("detach_", "self", self);
  if (!target) return nullptr;
  if (nargs != 0 || (kwnames && PyTuple_GET_SIZE(kwnames) > 0)) return type_error("detach_", "takes no arguments");
  return guarded([&] {
    detach_(*target);
    Py_INCREF(self);
    return self;
  });
}

// Tensor.resize_(*sizes, memory_format=None): sizes as ints or one sequence (memory_format is ignored, as clone's).
PyObject* resize_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const Tensor* target = to_tensor("resize_", "self", self);
  if (!target) return nullptr;
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, k), "memory_format") != 0)
      return type_error("resize_", "got an unexpected keyword argument '%s'", PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k)));
  }
  Dims shape;
  if (!to_shape("resize_", args, nargs, shape)) return nullptr;
  return guarded([&] {
    resize_(*target, shape);
    Py_INCREF(self);
    return self;
  });
}

// Tensor.resize_as_(other, memory_format=None): resize_ to other's sizes.
PyObject* resize_as_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("resize_as_", {"self", "the_template", "memory_format"}, 3, 2);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* target = to_tensor("resize_as_", "self", a[0]);
  const Tensor* like = to_tensor("resize_as_", "the_template", a[1]);
  if (!target || !like) return nullptr;
  return guarded([&] {
    resize_(*target, like->shape());
    Py_INCREF(a[0]);
    return a[0];
  });
}

// Tensor.view(*shape) / view(shape), or view(dtype) / view(dtype=...): the same bytes read as another dtype.
PyObject* view_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  const bool by_keyword = nargs == 0 && nkw == 1 &&
                          PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "dtype") == 0;
  if (!by_keyword && !(nargs == 1 && nkw == 0 && is_dtype_object(args[0])))
    return int_list_entry<View>(self, args, nargs, kwnames);
  const Tensor* tensor = to_tensor("view", "input", self);
  DType dtype;
  if (!tensor || !to_dtype("view", args[0], dtype)) return nullptr;
  return guarded([&] { return wrap(view_dtype(*tensor, dtype)); });
}
}  // namespace

void init_ops_shape(nb::module_& m) {
  static const OpEntry entries[] = {
      {"view", view_entry, "view(*shape) -> Tensor: a view with the given shape (-1 infers one dim); view(dtype) -> "
                           "Tensor: the same bytes as another dtype", false, true},
      {"reshape", int_list_entry<Reshape>, "reshape(input, shape) -> Tensor: a view when possible, else a copy", true, true},
      {"expand", int_list_entry<Expand>, "expand(*sizes) -> Tensor: broadcast view (-1 keeps a dim)", false, true},
      {"broadcast_to", int_list_entry<BroadcastTo>, "broadcast_to(input, size) -> Tensor", true, true},
      {"permute", int_list_entry<Permute>, "permute(input, dims) -> Tensor: a view with dims reordered", true, true},
      {"transpose", transpose_entry, "transpose(input, dim0, dim1) -> Tensor: a view with two dims swapped", true, true},
      {"swapaxes", transpose_entry, "swapaxes(input, dim0, dim1) -> Tensor: alias of transpose", true, true},
      {"swapdims", transpose_entry, "swapdims(input, dim0, dim1) -> Tensor: alias of transpose", true, true},
      {"t", t_entry, "t(input) -> Tensor: 2-D transpose (0-D and 1-D returned as is)", true, true},
      {"t_", t_inplace_entry, "t_() -> Tensor: self becomes its 2-D transpose (in place)", false, true},
      {"transpose_", transpose_inplace_entry, "transpose_(dim0, dim1) -> Tensor: self with two dims swapped (in place)",
       false, true},
      {"swapdims_", swapdims_inplace_entry, "swapdims_(dim0, dim1) -> Tensor: alias of transpose_", false, true},
      {"swapaxes_", swapaxes_inplace_entry, "swapaxes_(dim0, dim1) -> Tensor: alias of transpose_", false, true},
      {"squeeze_", squeeze_inplace_entry, "squeeze_(dim=None) -> Tensor: size-1 dims of self removed (in place)", false,
       true},
      {"unsqueeze_", unsqueeze_inplace_entry, "unsqueeze_(dim) -> Tensor: a size-1 dim inserted into self (in place)",
       false, true},
      {"as_strided_", as_strided_inplace_entry, "as_strided_(size, stride, storage_offset=None) -> Tensor: self takes "
                                                "the given geometry over its storage (in place)", false, true},
      {"detach_", detach_inplace_entry, "detach_() -> Tensor: self without autograd history (in place)", false, true},
      {"resize_", resize_inplace_entry, "resize_(*sizes) -> Tensor: self with contiguous sizes (the storage grows when "
                                        "needed)", false, true},
      {"resize_as_", resize_as_inplace_entry, "resize_as_(other) -> Tensor: resize_ to other's sizes", false, true},
      {"detach", detach_entry, "detach(input) -> Tensor: same data, no autograd history", true, true},
      {"narrow", narrow_entry, "narrow(input, dim, start, length) -> Tensor: a view", true, true},
      {"select", select_entry, "select(input, dim, index) -> Tensor: a view without dim", true, true},
      {"squeeze", squeeze_entry, "squeeze(input, dim=None) -> Tensor: size-1 dims removed (all, one or a tuple)", true, true},
      {"unsqueeze", unsqueeze_entry, "unsqueeze(input, dim) -> Tensor: a size-1 dim inserted", true, true},
      {"flatten", flatten_entry, "flatten(input, start_dim=0, end_dim=-1) -> Tensor", true, true},
      {"unflatten", unflatten_entry, "unflatten(input, dim, sizes) -> Tensor", true, true},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
