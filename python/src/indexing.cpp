// Tensor.__getitem__ / __setitem__ (the type's mp_subscript / mp_ass_subscript slots): Python index
// expressions are parsed here in C++ into dg::TensorIndex lists; dg::index / dg::index_put_ do the rest.
// Also index_put_ / index_put (a tuple of index tensors, accumulate=) and nonzero.
#include "common.h"

namespace dg::py {

namespace {
PyObject* g_tensor_function = nullptr;  // dygrad._C.tensor: lists and NumPy arrays used as indices
PyTypeObject* g_ndarray = nullptr;      // numpy.ndarray (null without NumPy)

using Indices = SmallVector<TensorIndex, 8>;

bool is_array(PyObject* o) { return g_ndarray && PyObject_TypeCheck(o, g_ndarray); }

// dygrad.tensor(o) as a Tensor; an empty list gives an empty int64 index (torch: x[[]]).
bool tensor_from(PyObject* o, Tensor& out) {
  if (PyList_Check(o) && PyList_GET_SIZE(o) == 0) {
    out = Tensor::empty(Dims{0}, DType::Int64);
    return true;
  }
  PyObject* t = PyObject_CallOneArg(g_tensor_function, o);
  if (!t) return false;
  out = unwrap(t);
  Py_DECREF(t);
  return true;
}

bool push_integer(PyObject* o, Indices& out) {
  PyObject* number = PyNumber_Index(o);
  if (!number) return false;
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(number, &overflow);
  Py_DECREF(number);
  if (overflow) {
    PyErr_Format(PyExc_IndexError, "[index] index %R is out of the int64 range", o);
    return false;
  }
  if (v == -1 && PyErr_Occurred()) return false;
  out.push_back(TensorIndex::integer_index(v));
  return true;
}

// One entry of an index expression; false with a Python error set.
bool parse_one(PyObject* o, Indices& out) {
  if (PyLong_CheckExact(o)) {
    const long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) return push_integer(o, out);
    out.push_back(TensorIndex::integer_index(v));
    return true;
  }
  if (PySlice_Check(o)) {
    Py_ssize_t start = 0, stop = 0, step = 0;
    if (PySlice_Unpack(o, &start, &stop, &step) < 0) return false;
    if (step <= 0) {
      PyErr_SetString(PyExc_ValueError, "[index] step must be greater than zero");
      return false;
    }
    out.push_back(TensorIndex::slice(start, stop, step));
    return true;
  }
  if (o == Py_None) return out.push_back(TensorIndex::none()), true;
  if (o == Py_Ellipsis) return out.push_back(TensorIndex::ellipsis()), true;
  if (PyBool_Check(o)) return out.push_back(TensorIndex::boolean(o == Py_True)), true;
  if (is_tensor(o)) return out.push_back(TensorIndex::tensor_index(unwrap(o))), true;
  if (PyLong_Check(o)) return push_integer(o, out);
  if (numpy_generic_type && PyObject_TypeCheck(o, numpy_generic_type)) {
    if (PyIndex_Check(o)) return push_integer(o, out);  // NumPy integers; np.bool_ and floats are refused (torch)
  } else if (PyList_Check(o) || is_array(o)) {
    Tensor t;
    if (!tensor_from(o, t)) return false;
    out.push_back(TensorIndex::tensor_index(std::move(t)));
    return true;
  } else if (PyUnicode_Check(o) || PyBytes_Check(o)) {
    PyErr_Format(PyExc_TypeError, "[index] invalid index of type %s", type_name(o));
    return false;
  } else if (PyIndex_Check(o)) {
    return push_integer(o, out);
  }
  PyErr_Format(PyExc_IndexError, "[index] only integers, slices (`:`), ellipsis (`...`), None and long or byte "
               "Tensors are valid indices (got %s)", type_name(o));
  return false;
}

bool parse(PyObject* key, Indices& out) {
  if (!PyTuple_Check(key)) return parse_one(key, out);
  const Py_ssize_t n = PyTuple_GET_SIZE(key);
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!parse_one(PyTuple_GET_ITEM(key, i), out)) return false;
  return true;
}

PyObject* tensor_getitem(PyObject* self, PyObject* key) {
  Indices indices;
  if (!parse(key, indices)) return nullptr;
  return guarded([&] { return wrap(index(unwrap(self), std::span<const TensorIndex>(indices.data(), indices.size()))); });
}

int tensor_setitem(PyObject* self, PyObject* key, PyObject* value) {
  if (!value) {
    PyErr_SetString(PyExc_TypeError, "Tensor does not support deleting items");
    return -1;
  }
  Indices indices;
  if (!parse(key, indices)) return -1;
  const std::span<const TensorIndex> span(indices.data(), indices.size());
  Tensor& target = unwrap(self);
  Scalar scalar;
  Tensor source;
  const bool is_scalar = !is_tensor(value) && to_scalar(value, scalar);
  if ((is_scalar && scalar.is_uint()) || PyErr_Occurred()) {
    // torch makes the value a tensor as torch.tensor(value) would: an int outside int64 is refused whatever the
    // target's dtype (docs/dtypes.md, "Python ints beyond int64").
    PyErr_Clear();
    PyErr_SetString(PyExc_ValueError, "[index_put_] Overflow when unpacking long long");
    return -1;
  }
  if (is_tensor(value)) {
    source = unwrap(value);
  } else if (!is_scalar && PyComplex_Check(value)) {  // a Python complex number: a zero-dim complex tensor
    source = complex_number(value, target);
  } else if (!is_scalar) {  // as torch: only Tensors and numbers are assigned
    PyErr_Format(PyExc_TypeError, "[index_put_] can't assign a %s to a Tensor", type_name(value));
    return -1;
  }
  PyObject* result = guarded([&] {
    if (is_scalar) index_put_(target, span, scalar);
    else index_put_(target, span, source);
    return Py_NewRef(Py_None);
  });
  if (!result) return -1;
  Py_DECREF(result);
  return 0;
}

// index_put_(input, indices, values, accumulate=False): indices is a tuple/list of index tensors.
bool index_tensors(const char* op, PyObject* o, Indices& out) {
  if (!PyTuple_Check(o) && !PyList_Check(o)) {
    type_error(op, "argument 'indices' must be a tuple of Tensors, not %s", type_name(o));
    return false;
  }
  nb::object items = nb::steal(PySequence_Tuple(o));
  if (!items) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items.ptr()); ++i) {
    PyObject* item = PyTuple_GET_ITEM(items.ptr(), i);
    if (item == Py_None) out.push_back(TensorIndex::slice());  // torch: None keeps the dim whole
    else if (const Tensor* t = to_tensor(op, "indices", item)) out.push_back(TensorIndex::tensor_index(*t));
    else return false;
  }
  return true;
}

template <bool InPlace>
PyObject* index_put_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig(InPlace ? "index_put_" : "index_put", {"input", "indices", "values", "accumulate"}, 3, 3);
  PyObject* a[4];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(sig.op(), "input", a[0]);
  const Tensor* values = input ? to_tensor(sig.op(), "values", a[2]) : nullptr;
  bool accumulate = false;
  Indices indices;
  if (!values || !to_bool_argument(sig.op(), "accumulate", a[3], false, accumulate) ||
      !index_tensors(sig.op(), a[1], indices))
    return nullptr;
  return guarded([&] {
    const std::span<const TensorIndex> span(indices.data(), indices.size());
    if (InPlace) {
      index_put_(unwrap(a[0]), span, *values, accumulate);
      return Py_NewRef(a[0]);
    }
    Tensor out = clone(*input);
    index_put_(out, span, *values, accumulate);
    return wrap(std::move(out));
  });
}

PyObject* nonzero_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("nonzero", {"input", "as_tuple"}, 1, 1);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("nonzero", "input", a[0]);
  bool as_tuple = false;
  if (!input || !to_bool_argument("nonzero", "as_tuple", a[1], false, as_tuple)) return nullptr;
  return guarded([&]() -> PyObject* {
    Tensor rows = nonzero(*input);
    if (!as_tuple) return wrap(std::move(rows));
    const int64_t columns = std::max<int64_t>(input->dim(), 1);
    nb::object tuple = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(columns)));
    for (int64_t d = 0; d < columns; ++d) {
      Tensor column = input->dim() == 0 ? Tensor::empty(Dims{rows.shape()[0]}, DType::Int64, input->device())
                                        : select(rows, 1, d);
      if (input->dim() == 0) fill_(column, Scalar(0));
      PyObject* item = wrap(std::move(column));
      if (!item) return nullptr;
      PyTuple_SET_ITEM(tuple.ptr(), static_cast<Py_ssize_t>(d), item);
    }
    return tuple.release().ptr();
  });
}
}  // namespace

// Added to the Tensor type's slots by init_tensor (tensor.cpp).
const PyType_Slot* mapping_slots() {
  static const PyType_Slot slots[] = {
      {Py_mp_subscript, reinterpret_cast<void*>(tensor_getitem)},
      {Py_mp_ass_subscript, reinterpret_cast<void*>(tensor_setitem)},
      {0, nullptr},
  };
  return slots;
}

void init_indexing(nb::module_& m) {
  static const OpEntry entries[] = {
      {"index_put_", index_put_entry<true>, "index_put_(input, indices, values, accumulate=False) -> Tensor\n\n"
       "input[indices] = values (or += with accumulate) for a tuple of index tensors, in place.", false, true},
      {"index_put", index_put_entry<false>, "index_put(input, indices, values, accumulate=False) -> Tensor", true, true},
      {"nonzero", nonzero_entry, "nonzero(input, *, as_tuple=False) -> Tensor\n\nThe indices of the nonzero "
       "elements, one row each (a sync point: the size depends on the values).", true, true},
  };
  register_ops(m, entries);
  g_tensor_function = m.attr("tensor").inc_ref().ptr();
  try {
    nb::object numpy = nb::module_::import_("numpy");
    g_ndarray = reinterpret_cast<PyTypeObject*>(numpy.attr("ndarray").inc_ref().ptr());
  } catch (const nb::python_error&) {
    g_ndarray = nullptr;  // NumPy is optional
  }
}

}  // namespace dg::py
