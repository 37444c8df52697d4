// Argument helpers and result types several binding families share (declared in common.h): optional tensors,
// numbers and strings as arguments; dygrad.return_types' named tuples of values and indices.
#include <cstring>
#include <string_view>

#include "common.h"

namespace dg::py {

namespace {
// One struct-sequence type per name, made on first use and kept for the process.
PyTypeObject* values_indices_type(const char* name) {
  static const char* const names[] = {"max", "min", "sort", "topk"};
  static const char* const qualified[] = {"dygrad.return_types.max", "dygrad.return_types.min",
                                          "dygrad.return_types.sort", "dygrad.return_types.topk"};
  static PyStructSequence_Field fields[] = {{"values", nullptr}, {"indices", nullptr}, {nullptr, nullptr}};
  static PyStructSequence_Desc descs[4];
  static PyTypeObject* types[4] = {};
  for (size_t i = 0; i < 4; ++i) {
    if (std::strcmp(name, names[i]) != 0) continue;
    if (!types[i]) {
      descs[i] = {qualified[i], nullptr, fields, 2};
      types[i] = PyStructSequence_NewType(&descs[i]);
    }
    return types[i];
  }
  PyErr_Format(PyExc_SystemError, "dygrad: no return type named %s", name);
  return nullptr;
}
}  // namespace

PyObject* wrap_values_indices(const char* name, ValuesIndices r) {
  PyTypeObject* type = values_indices_type(name);
  if (!type) return nullptr;
  PyObject* out = PyStructSequence_New(type);
  if (!out) return nullptr;
  PyObject* values = wrap(std::move(r.values));
  PyObject* indices = values ? wrap(std::move(r.indices)) : nullptr;
  if (!indices) {
    Py_XDECREF(values);
    Py_DECREF(out);
    return nullptr;
  }
  PyStructSequence_SetItem(out, 0, values);
  PyStructSequence_SetItem(out, 1, indices);
  return out;
}

bool to_optional_tensor(const char* op, const char* argument, PyObject* o, Tensor& out) {
  if (!o || o == Py_None) return true;
  const Tensor* t = to_tensor(op, argument, o);
  if (!t) return false;
  out = *t;
  return true;
}

bool to_double_argument(const char* op, const char* argument, PyObject* o, double fallback, double& out) {
  // A double argument takes any int as Python's float() does, as torch's double arguments do (dropout(p=2**64)
  // reads 1.8e19); a number argument (to_scalar) refuses one outside [-2**63, 2**64).
  if (o && PyLong_Check(o) && !PyBool_Check(o)) {
    int overflow = 0;
    PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) [[unlikely]] {
      out = PyLong_AsDouble(o);  // OverflowError beyond float64's range, as Python's float()
      return !(out == -1.0 && PyErr_Occurred());
    }
  }
  Scalar s;
  if (!to_scalar_argument(op, argument, o, fallback, s)) return false;
  out = s.to_double();
  return true;
}

bool to_string_argument(const char* op, const char* argument, PyObject* o, std::string_view& out) {
  if (!o) return true;
  if (!PyUnicode_Check(o)) return type_error(op, "argument '%s' must be str, not %s", argument, type_name(o)), false;
  out = PyUnicode_AsUTF8(o);
  return true;
}

}  // namespace dg::py
