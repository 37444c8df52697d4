// dygrad.float32 ... dygrad.bool: one dtype object per DType, printed as torch prints its own
// ("dygrad.float32"), with torch's attributes (is_floating_point, itemsize).
#include <cstring>

#include "common.h"

namespace dg::py {

namespace {
struct DTypeObject {
  DType value;
};
PyObject* g_dtype_objects[kNumDTypes] = {};  // kept for the process (no destructor at exit)
PyTypeObject* g_dtype_type = nullptr;

// NumPy's name for each dtype (bfloat16 and the float8 types have none).
constexpr const char* kNumpyNames[kNumDTypes] = {
    "bool", "uint8", "int8", "int16", "uint16", "int32", "int64", "float16", nullptr, "float32", "float64",
    "uint32", "uint64", nullptr, nullptr, "complex64", "complex128"};
}  // namespace

PyObject* dtype_object(DType t) { return g_dtype_objects[static_cast<int>(t)]; }
const char* numpy_dtype_name(DType t) { return kNumpyNames[static_cast<int>(t)]; }

bool is_dtype_object(PyObject* o) { return Py_TYPE(o) == g_dtype_type; }

bool to_dtype(const char* op, PyObject* o, DType& out) {
  if (Py_TYPE(o) == g_dtype_type) {
    out = nb::inst_ptr<DTypeObject>(o)->value;
    return true;
  }
  // Python types, as torch accepts them: float -> float64, int -> int64, bool -> bool.
  if (o == reinterpret_cast<PyObject*>(&PyFloat_Type)) return out = DType::Float64, true;
  if (o == reinterpret_cast<PyObject*>(&PyLong_Type)) return out = DType::Int64, true;
  if (o == reinterpret_cast<PyObject*>(&PyBool_Type)) return out = DType::Bool, true;
  // NumPy dtypes and scalar types, by name.
  if (PyObject_HasAttrString(o, "itemsize") || PyType_Check(o)) {
    nb::object name = nb::steal(PyObject_GetAttrString(o, "name"));
    if (!name.is_valid() || !PyUnicode_Check(name.ptr())) {
      PyErr_Clear();
      name = nb::steal(PyObject_GetAttrString(o, "__name__"));
      PyErr_Clear();
    }
    if (name.is_valid() && PyUnicode_Check(name.ptr())) {
      const char* text = PyUnicode_AsUTF8(name.ptr());
      if (text && std::strcmp(text, "bool_") == 0) text = "bool";
      for (int i = 0; text && i < kNumDTypes; ++i)
        if (kNumpyNames[i] && std::strcmp(text, kNumpyNames[i]) == 0) return out = static_cast<DType>(i), true;
    }
  }
  type_error(op, "argument 'dtype' must be a dygrad dtype (dygrad.float32, ...), not %s", type_name(o));
  return false;
}

void init_dtype(nb::module_& m) {
  nb::class_<DTypeObject> cls(m, "dtype");
  cls.def_prop_ro("is_floating_point", [](const DTypeObject& d) { return is_floating(d.value); })
      .def_prop_ro("is_signed", [](const DTypeObject& d) { return is_signed(d.value); })
      .def_prop_ro("is_complex", [](const DTypeObject& d) { return is_complex(d.value); })
      // torch's to_real / to_complex: complex64 <-> float32, complex128 <-> float64; other dtypes map to themselves
      // (to_real) or raise (to_complex of a non-floating dtype), float16/bfloat16 becoming complex64 (no complex32).
      .def("to_real", [](const DTypeObject& d) { return nb::borrow(dtype_object(to_real_dtype(d.value))); })
      .def("to_complex", [](const DTypeObject& d) {
        DG_CHECK(is_differentiable(d.value) && !is_float8(d.value), Runtime, "[to_complex] no complex dtype for ",
                 dtype_name(d.value));
        return nb::borrow(dtype_object(to_complex_dtype(d.value)));
      })
      .def_prop_ro("itemsize", [](const DTypeObject& d) { return itemsize(d.value); })
      .def("__repr__", [](const DTypeObject& d) { return std::string("dygrad.") + dtype_name(d.value); })
      .def("__str__", [](const DTypeObject& d) { return std::string("dygrad.") + dtype_name(d.value); })
      .def("__reduce__", [](const DTypeObject& d) { return std::string(dtype_name(d.value)); });
  g_dtype_type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  for (int i = 0; i < kNumDTypes; ++i) {
    g_dtype_objects[i] = nb::cast(DTypeObject{static_cast<DType>(i)}).release().ptr();
    m.attr(dtype_name(static_cast<DType>(i))) = nb::borrow(g_dtype_objects[i]);
  }
  // torch's aliases.
  m.attr("float") = nb::borrow(dtype_object(DType::Float32));
  m.attr("double") = nb::borrow(dtype_object(DType::Float64));
  m.attr("half") = nb::borrow(dtype_object(DType::Float16));
  m.attr("long") = nb::borrow(dtype_object(DType::Int64));
  m.attr("int") = nb::borrow(dtype_object(DType::Int32));
  m.attr("short") = nb::borrow(dtype_object(DType::Int16));
  m.attr("cfloat") = nb::borrow(dtype_object(DType::Complex64));
  m.attr("cdouble") = nb::borrow(dtype_object(DType::Complex128));
}

}  // namespace dg::py
