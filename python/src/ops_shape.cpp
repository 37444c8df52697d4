// Shape and view entry points: view, reshape, expand, permute (shape given as ints or one sequence, as
// torch takes them), transpose, t, detach. Views share storage; nothing is copied here.
#include "common.h"

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
}  // namespace

void init_ops_shape(nb::module_& m) {
  static const OpEntry entries[] = {
      {"view", int_list_entry<View>, "view(*shape) -> Tensor: a view with the given shape (-1 infers one dim)", false, true},
      {"reshape", int_list_entry<Reshape>, "reshape(input, shape) -> Tensor: a view when possible, else a copy", true, true},
      {"expand", int_list_entry<Expand>, "expand(*sizes) -> Tensor: broadcast view (-1 keeps a dim)", false, true},
      {"broadcast_to", int_list_entry<BroadcastTo>, "broadcast_to(input, size) -> Tensor", true, true},
      {"permute", int_list_entry<Permute>, "permute(input, dims) -> Tensor: a view with dims reordered", true, true},
      {"transpose", transpose_entry, "transpose(input, dim0, dim1) -> Tensor: a view with two dims swapped", true, true},
      {"swapaxes", transpose_entry, "swapaxes(input, dim0, dim1) -> Tensor: alias of transpose", true, true},
      {"t", t_entry, "t(input) -> Tensor: 2-D transpose (0-D and 1-D returned as is)", true, true},
      {"detach", detach_entry, "detach(input) -> Tensor: same data, no autograd history", true, true},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
